"""Fused row-wise Triton kernels: the norms, gates, products, adds and gathers between the GEMMs.

Consumes operands as torch tensors (real, or on the meta device when the recording plans launches), each a
set of rows of D contiguous elements viewed as [rows, D] or [T, H, D] with any row and head strides, so views
are never copied; produces KernelCall values that `launch` runs eagerly (interpreter on the CPU, JIT on a
GPU) and the recording stores for AOT. Row counts are read at launch from a device int32 (`rows_ptr`, as in
codegen/gemm.py ROWS: programs past them return at once) and the rest is constexpr, so one compiled kernel
serves every bucket. Relies on E3: a program reduces only within a row, in a fixed order set by D alone.
fp32 inside, one rounding to the output dtype per result (bf16 results agree with the reference within
TOLERANCE, which rounds between some steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from flidec.codegen import eager
from flidec.runtime.recording import DTYPE_NAMES

TILE_ELEMENTS = 8192  # elements per program tile: rows per program = TILE_ELEMENTS // BLOCK_D (fixed by D)
NUM_WARPS = 4


@dataclass(frozen=True)
class KernelCall:
    """One launch: `kernel[grid](*args, **constexprs)`; `signature` types every parameter for AOT."""

    kernel: Any
    grid: tuple[int, ...]
    args: tuple[Any, ...]  # tensors (pointers) and Python scalars, in the kernel's parameter order
    signature: dict[str, str]
    constexprs: dict[str, Any]
    num_warps: int = NUM_WARPS
    num_stages: int = 1

    @property
    def name(self) -> str:
        return self.kernel.__name__


def launch(call: KernelCall, device: torch.device) -> None:
    eager.launch(call.kernel, call.grid, *call.args, device=device, **call.constexprs)


# ---- kernels ----------------------------------------------------------------------------------------------


@triton.jit
def _rows(r, INNER: tl.constexpr, S0: tl.constexpr, S1: tl.constexpr):
    """Element offset of row r of a [T, INNER, D] view with row stride S0 and head stride S1."""
    return (r // INNER).to(tl.int64) * S0 + (r % INNER).to(tl.int64) * S1


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, out_ptr, rows_ptr, eps, INNER: tl.constexpr, X_S0: tl.constexpr,
                    X_S1: tl.constexpr, O_S0: tl.constexpr, O_S1: tl.constexpr, D: tl.constexpr,
                    BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr):
    """Qwen3.5's zero-centred RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w), in fp32."""
    n_rows = tl.load(rows_ptr) * INNER  # the pointer counts tokens, a row here is a token's head
    if tl.program_id(0) * BLOCK_R >= n_rows:  # past the stream's rows (ROWS)
        return
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    d = tl.arange(0, BLOCK_D)
    mask = (r[:, None] < n_rows) & (d[None, :] < D)
    x = tl.load(x_ptr + _rows(r, INNER, X_S0, X_S1)[:, None] + d[None, :], mask=mask,
                other=0.0).to(tl.float32)
    w = tl.load(w_ptr + d, mask=d < D, other=0.0).to(tl.float32)
    h = x * (1.0 / tl.sqrt(tl.sum(x * x, 1) / D + eps))[:, None]
    tl.store(out_ptr + _rows(r, INNER, O_S0, O_S1)[:, None] + d[None, :],
             (h * (1.0 + w)[None, :]).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def add_rms_norm_kernel(x_ptr, y_ptr, w_ptr, sum_ptr, out_ptr, rows_ptr, eps, X_ST: tl.constexpr,
                        Y_ST: tl.constexpr, S_ST: tl.constexpr, O_ST: tl.constexpr, D: tl.constexpr,
                        BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr):
    """The residual add (rounded to its dtype, as the residual stream is) and the RMSNorm of the sum."""
    n_rows = tl.load(rows_ptr)
    if tl.program_id(0) * BLOCK_R >= n_rows:  # past the stream's rows (ROWS)
        return
    r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    mask = (r[:, None] < n_rows) & (d[None, :] < D)
    x = tl.load(x_ptr + r[:, None] * X_ST + d[None, :], mask=mask, other=0.0)
    y = tl.load(y_ptr + r[:, None] * Y_ST + d[None, :], mask=mask, other=0.0)
    s = (x.to(tl.float32) + y.to(tl.float32)).to(sum_ptr.dtype.element_ty)
    tl.store(sum_ptr + r[:, None] * S_ST + d[None, :], s, mask=mask)
    h = s.to(tl.float32)
    w = tl.load(w_ptr + d, mask=d < D, other=0.0).to(tl.float32)
    h = h * (1.0 / tl.sqrt(tl.sum(h * h, 1) / D + eps))[:, None]
    tl.store(out_ptr + r[:, None] * O_ST + d[None, :], (h * (1.0 + w)[None, :]).to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def _add_pairs(s, N: tl.constexpr):
    """s [R, N] -> [R, N // 2]: the sums of adjacent columns 2j and 2j + 1 (a reduction of two values has
    one result in any order: a + b == b + a)."""
    return tl.sum(tl.reshape(s, [s.shape[0], N // 2, 2]), 2)


@triton.jit
def sum_squares(x, N: tl.constexpr):
    """The sums of squares of the rows of x [R, N] (fp32, N a power of 2 from 2 to 256) [R], in one order
    whatever the layout the compiler gives x: a pairwise tree over adjacent columns, level by level.
    tl.sum's order follows its operand's layout (a loaded tile's and a tl.dot result's differ), so two kernels
    holding the same rows in different layouts would round differently; this tree gives them the same bits,
    and on a [R, 2M] tile the same bits as the sum of its two [R, M] halves' trees (gdn_out_kernel's fused
    norm over two value blocks). The squares pass a select first (x itself where the square is NaN, so NaN
    still propagates), so the compiler cannot contract a square into the add that takes it: that would be
    an fma where the pair is in one thread and two roundings where it is not."""
    tl.static_assert(N >= 2)
    tl.static_assert(N <= 256)
    s = x * x
    s = _add_pairs(tl.where(s == s, s, x), N)  # noqa: PLR0124 (s == s is false for NaN)
    if N >= 4:
        s = _add_pairs(s, N // 2)
    if N >= 8:
        s = _add_pairs(s, N // 4)
    if N >= 16:
        s = _add_pairs(s, N // 8)
    if N >= 32:
        s = _add_pairs(s, N // 16)
    if N >= 64:
        s = _add_pairs(s, N // 32)
    if N >= 128:
        s = _add_pairs(s, N // 64)
    if N >= 256:
        s = _add_pairs(s, N // 128)
    return tl.reshape(s, [x.shape[0]])


@triton.jit
def gated_norm(h, ss, z, w, eps, D: tl.constexpr, DTYPE: tl.constexpr):
    """Qwen3_5RMSNormGated of rows h [R, N] (fp32 values of x in DTYPE) whose D entries' squares sum to ss
    [R] (sum_squares), with z [R, N] and the weight w [N] in fp32: w * norm(x) (plain weight, the normed x
    rounded to DTYPE first) * silu(z), fp32. Elementwise given ss: a row split into column blocks gives the
    same bits block by block."""
    h = (h * (1.0 / tl.sqrt(ss / D + eps))[:, None]).to(DTYPE).to(tl.float32)
    return w[None, :] * h * (z / (1.0 + tl.exp(-z)))


@triton.jit
def gated_rms_norm_kernel(x_ptr, z_ptr, w_ptr, out_ptr, rows_ptr, eps, INNER: tl.constexpr,
                          X_S0: tl.constexpr, X_S1: tl.constexpr, Z_S0: tl.constexpr, Z_S1: tl.constexpr,
                          O_S0: tl.constexpr, O_S1: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
                          BLOCK_R: tl.constexpr):
    """Qwen3_5RMSNormGated: w * norm(x) (plain weight, rounded to x's dtype first) * silu(z). Padding
    columns load zeros, which add exact zeros to the sum of squares."""
    n_rows = tl.load(rows_ptr) * INNER  # the pointer counts tokens, a row here is a token's head
    if tl.program_id(0) * BLOCK_R >= n_rows:  # past the stream's rows (ROWS)
        return
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    d = tl.arange(0, BLOCK_D)
    mask = (r[:, None] < n_rows) & (d[None, :] < D)
    x = tl.load(x_ptr + _rows(r, INNER, X_S0, X_S1)[:, None] + d[None, :], mask=mask, other=0.0)
    z = tl.load(z_ptr + _rows(r, INNER, Z_S0, Z_S1)[:, None] + d[None, :], mask=mask,
                other=0.0).to(tl.float32)
    w = tl.load(w_ptr + d, mask=d < D, other=0.0).to(tl.float32)
    h = x.to(tl.float32)
    out = gated_norm(h, sum_squares(h, BLOCK_D), z, w, eps, D, x.dtype)
    tl.store(out_ptr + _rows(r, INNER, O_S0, O_S1)[:, None] + d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def rotary_kernel(x_ptr, pos_ptr, inv_freq_ptr, out_ptr, rows_ptr, INNER: tl.constexpr, X_S0: tl.constexpr,
                  X_S1: tl.constexpr, O_S0: tl.constexpr, O_S1: tl.constexpr, D: tl.constexpr,
                  HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_REST: tl.constexpr,
                  BLOCK_R: tl.constexpr):
    """Partial RoPE on the first 2 * HALF dims of each head at its token's logical position; cos and sin
    are rounded to x's dtype first, as transformers does. The two rotated halves and the rest of the head
    are separate tiles so cos and sin are computed for HALF dims a row, not all D (they are most of the
    kernel's time at long positions)."""
    n_rows = tl.load(rows_ptr) * INNER  # the pointer counts tokens, a row here is a token's head
    if tl.program_id(0) * BLOCK_R >= n_rows:  # past the stream's rows (ROWS)
        return
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    h = tl.arange(0, BLOCK_HALF)
    live = r[:, None] < n_rows
    xrows = _rows(r, INNER, X_S0, X_S1)[:, None]
    orows = _rows(r, INNER, O_S0, O_S1)[:, None]
    hmask = live & (h[None, :] < HALF)
    x1 = tl.load(x_ptr + xrows + h[None, :], mask=hmask, other=0.0)
    x2 = tl.load(x_ptr + xrows + HALF + h[None, :], mask=hmask, other=0.0).to(tl.float32)
    pos = tl.load(pos_ptr + r // INNER, mask=r < n_rows, other=0).to(tl.float32)
    freq = pos[:, None] * tl.load(inv_freq_ptr + h, mask=h < HALF, other=0.0)[None, :]
    cos = tl.cos(freq).to(x1.dtype).to(tl.float32)
    sin = tl.sin(freq).to(x1.dtype).to(tl.float32)
    a = x1.to(tl.float32)
    tl.store(out_ptr + orows + h[None, :], (a * cos - x2 * sin).to(out_ptr.dtype.element_ty), mask=hmask)
    tl.store(out_ptr + orows + HALF + h[None, :], (x2 * cos + a * sin).to(out_ptr.dtype.element_ty),
             mask=hmask)
    if BLOCK_REST > 0:  # the dims past the rotated ones, copied
        d = 2 * HALF + tl.arange(0, BLOCK_REST)
        dmask = live & (d[None, :] < D)
        rest = tl.load(x_ptr + xrows + d[None, :], mask=dmask, other=0.0)
        tl.store(out_ptr + orows + d[None, :], rest.to(out_ptr.dtype.element_ty), mask=dmask)


@triton.jit
def binary_kernel(a_ptr, b_ptr, out_ptr, rows_ptr, A_ST: tl.constexpr, B_ST: tl.constexpr, O_ST: tl.constexpr,
                  D: tl.constexpr, OP: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr):
    """OP 0: a + b (the residual add); OP 1: silu(a) * b (SwiGLU); OP 2: a * sigmoid(b) (an output gate)."""
    n_rows = tl.load(rows_ptr)
    if tl.program_id(0) * BLOCK_R >= n_rows:  # past the stream's rows (ROWS)
        return
    r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    mask = (r[:, None] < n_rows) & (d[None, :] < D)
    a = tl.load(a_ptr + r[:, None] * A_ST + d[None, :], mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + r[:, None] * B_ST + d[None, :], mask=mask, other=0.0).to(tl.float32)
    if OP == 0:
        out = a + b
    elif OP == 1:
        out = a / (1.0 + tl.exp(-a)) * b
    else:
        out = a / (1.0 + tl.exp(-b))
    tl.store(out_ptr + r[:, None] * O_ST + d[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gather_rows_kernel(x_ptr, idx_ptr, out_ptr, rows_ptr, X_ST: tl.constexpr, O_ST: tl.constexpr,
                       D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr):
    """out[j] = x[idx[j]]: the embedding lookup (x = the embedding, idx = tokens) and the read gather."""
    n_rows = tl.load(rows_ptr)
    if tl.program_id(0) * BLOCK_R >= n_rows:  # past the stream's rows (ROWS)
        return
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    d = tl.arange(0, BLOCK_D)
    src = tl.load(idx_ptr + r, mask=r < n_rows, other=0).to(tl.int64)
    mask = (r[:, None] < n_rows) & (d[None, :] < D)
    x = tl.load(x_ptr + src[:, None] * X_ST + d[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + r.to(tl.int64)[:, None] * O_ST + d[None, :], x, mask=mask)


@triton.jit
def gdn_gate_kernel(x_ptr, a_log_ptr, dt_bias_ptr, out_ptr, rows_ptr, X_ST: tl.constexpr, H: tl.constexpr,
                    BETA: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr):
    """Gated DeltaNet gates, fp32 [rows, H]: the log-decay -exp(A_log) * softplus(x + dt_bias), or (BETA)
    the write strength sigmoid(x)."""
    n_rows = tl.load(rows_ptr)
    if tl.program_id(0) * BLOCK_R >= n_rows:  # past the stream's rows (ROWS)
        return
    r = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    h = tl.arange(0, BLOCK_H)
    mask = (r[:, None] < n_rows) & (h[None, :] < H)
    x = tl.load(x_ptr + r[:, None] * X_ST + h[None, :], mask=mask, other=0.0).to(tl.float32)
    if BETA:
        out = 1.0 / (1.0 + tl.exp(-x))
    else:
        a_log = tl.load(a_log_ptr + h, mask=h < H, other=0.0).to(tl.float32)
        x = x + tl.load(dt_bias_ptr + h, mask=h < H, other=0.0).to(tl.float32)[None, :]
        softplus = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x)))  # torch's threshold: x itself above 20
        out = -tl.exp(a_log)[None, :] * softplus
    tl.store(out_ptr + r[:, None] * H + h[None, :], out, mask=mask)


@triton.jit
def label_head_kernel(h_ptr, w_ptr, labels_ptr, nlabels_ptr, out_ptr, H_ST: tl.constexpr, W_ST: tl.constexpr,
                      L: tl.constexpr, H: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_H: tl.constexpr):
    """fp32 logits of read r's labels: hidden row r . embedding row of each label; -inf past its count."""
    r = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1) * BLOCK_L + tl.arange(0, BLOCK_L)
    n = tl.load(nlabels_ptr + r)
    valid = j < n
    label = tl.load(labels_ptr + r * L + j, mask=valid, other=0).to(tl.int64)
    acc = tl.zeros([BLOCK_L], tl.float32)
    for h0 in range(0, H, BLOCK_H):
        hh = h0 + tl.arange(0, BLOCK_H)
        x = tl.load(h_ptr + r * H_ST + hh, mask=hh < H, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + label[:, None] * W_ST + hh[None, :], mask=valid[:, None] & (hh[None, :] < H),
                    other=0.0).to(tl.float32)
        acc += tl.sum(w * x[None, :], 1)
    tl.store(out_ptr + r * L + j, tl.where(valid, acc, float("-inf")), mask=j < L)


# ---- emitters: operands -> KernelCall ---------------------------------------------------------------------

ADD, SILU_MUL, SIGMOID_GATE = 0, 1, 2


def _ptr(t: torch.Tensor) -> str:
    return "*" + DTYPE_NAMES[t.dtype]


def _tile(d: int) -> tuple[int, int]:
    block_d = triton.next_power_of_2(d)
    return block_d, max(1, TILE_ELEMENTS // block_d)


def _layout(t: torch.Tensor) -> tuple[int, int, int, int, int]:
    """(rows, inner, row stride, head stride, D) of a [rows, D] or [T, H, D] operand with contiguous D."""
    if t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(f"operand of shape {tuple(t.shape)} needs a contiguous last dim")
    if t.dim() == 2:
        return t.shape[0], 1, t.stride(0), 0, t.shape[1]
    if t.dim() == 3:
        return t.shape[0] * t.shape[1], t.shape[1], t.stride(0), t.stride(1), t.shape[2]
    raise ValueError(f"row-wise operands are 2-D or 3-D, got shape {tuple(t.shape)}")


def _same_rows(*ts: torch.Tensor) -> tuple[int, int, int]:
    layouts = [_layout(t) for t in ts]
    if len({(n, inner, d) for n, inner, _, _, d in layouts}) != 1:
        raise ValueError(f"operands do not share rows: {[tuple(t.shape) for t in ts]}")
    n, inner, _, _, d = layouts[0]
    return n, inner, d


def _rows_ptr(rows: torch.Tensor | None, t: torch.Tensor) -> tuple[torch.Tensor, str]:
    """The launch's rows pointer (ROWS): `rows`, a recording's live_rows table; for an eager launch (None)
    an int32 holding t's tokens (its first dim), on t's device."""
    if rows is None:
        if t.device.type == "meta":
            raise ValueError("a recorded row-wise launch takes its rows pointer from the stream's meta")
        rows = eager.row_count(t.shape[0], t.device)
    return rows, "*i32"


def _call(kernel: Any, rows: int, block_r: int, args: dict[str, tuple[Any, str]], consts: dict[str, Any]
          ) -> KernelCall:
    sig = {name: ty for name, (_, ty) in args.items()} | {name: "constexpr" for name in consts}
    return KernelCall(kernel, (triton.cdiv(rows, block_r),), tuple(v for v, _ in args.values()), sig, consts)


def emit_rms_norm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float,
                  rows: torch.Tensor | None = None) -> KernelCall:
    n, inner, d = _same_rows(x, out)
    block_d, block_r = _tile(d)
    _, _, xs0, xs1, _ = _layout(x)
    _, _, os0, os1, _ = _layout(out)
    return _call(rms_norm_kernel, n, block_r,
                 {"x_ptr": (x, _ptr(x)), "w_ptr": (weight, _ptr(weight)), "out_ptr": (out, _ptr(out)),
                  "rows_ptr": _rows_ptr(rows, x), "eps": (eps, "fp32")},
                 {"INNER": inner, "X_S0": xs0, "X_S1": xs1, "O_S0": os0, "O_S1": os1, "D": d,
                  "BLOCK_D": block_d, "BLOCK_R": block_r})


def emit_add_rms_norm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, total: torch.Tensor,
                      out: torch.Tensor, eps: float, rows: torch.Tensor | None = None) -> KernelCall:
    n, inner, d = _same_rows(x, y, total, out)
    if inner != 1:
        raise ValueError("add_rms_norm takes [rows, D] operands")
    block_d, block_r = _tile(d)
    return _call(add_rms_norm_kernel, n, block_r,
                 {"x_ptr": (x, _ptr(x)), "y_ptr": (y, _ptr(y)), "w_ptr": (weight, _ptr(weight)),
                  "sum_ptr": (total, _ptr(total)), "out_ptr": (out, _ptr(out)),
                  "rows_ptr": _rows_ptr(rows, x), "eps": (eps, "fp32")},
                 {"X_ST": x.stride(0), "Y_ST": y.stride(0), "S_ST": total.stride(0), "O_ST": out.stride(0),
                  "D": d, "BLOCK_D": block_d, "BLOCK_R": block_r})


def emit_gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, out: torch.Tensor,
                        eps: float, rows: torch.Tensor | None = None) -> KernelCall:
    n, inner, d = _same_rows(x, z, out)
    block_d, block_r = _tile(d)
    (_, _, xs0, xs1, _), (_, _, zs0, zs1, _), (_, _, os0, os1, _) = _layout(x), _layout(z), _layout(out)
    return _call(gated_rms_norm_kernel, n, block_r,
                 {"x_ptr": (x, _ptr(x)), "z_ptr": (z, _ptr(z)), "w_ptr": (weight, _ptr(weight)),
                  "out_ptr": (out, _ptr(out)), "rows_ptr": _rows_ptr(rows, x), "eps": (eps, "fp32")},
                 {"INNER": inner, "X_S0": xs0, "X_S1": xs1, "Z_S0": zs0, "Z_S1": zs1, "O_S0": os0,
                  "O_S1": os1, "D": d, "BLOCK_D": block_d, "BLOCK_R": block_r})


def emit_rotary(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, out: torch.Tensor,
                rows: torch.Tensor | None = None) -> KernelCall:
    n, inner, d = _same_rows(x, out)
    half = inv_freq.shape[0]
    _, block_r = _tile(d)
    (_, _, xs0, xs1, _), (_, _, os0, os1, _) = _layout(x), _layout(out)
    return _call(rotary_kernel, n, block_r,
                 {"x_ptr": (x, _ptr(x)), "pos_ptr": (positions, _ptr(positions)),
                  "inv_freq_ptr": (inv_freq, _ptr(inv_freq)), "out_ptr": (out, _ptr(out)),
                  "rows_ptr": _rows_ptr(rows, x)},
                 {"INNER": inner, "X_S0": xs0, "X_S1": xs1, "O_S0": os0, "O_S1": os1, "D": d, "HALF": half,
                  "BLOCK_HALF": triton.next_power_of_2(half),
                  "BLOCK_REST": triton.next_power_of_2(d - 2 * half) if d > 2 * half else 0,
                  "BLOCK_R": block_r})


def emit_binary(op: int, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                rows: torch.Tensor | None = None) -> KernelCall:
    """ADD, SILU_MUL or SIGMOID_GATE on [rows, D] operands (3-D ones must be contiguous over heads)."""
    flat = [t.flatten(1) if t.dim() == 3 else t for t in (a, b, out)]
    n, _, d = _same_rows(*flat)
    block_d, block_r = _tile(d)
    a2, b2, o2 = flat
    return _call(binary_kernel, n, block_r,
                 {"a_ptr": (a, _ptr(a)), "b_ptr": (b, _ptr(b)), "out_ptr": (out, _ptr(out)),
                  "rows_ptr": _rows_ptr(rows, a)},
                 {"A_ST": a2.stride(0), "B_ST": b2.stride(0), "O_ST": o2.stride(0), "D": d, "OP": op,
                  "BLOCK_D": block_d, "BLOCK_R": block_r})


def emit_gather_rows(x: torch.Tensor, index: torch.Tensor, out: torch.Tensor,
                     rows: torch.Tensor | None = None) -> KernelCall:
    d = x.shape[1]
    if out.shape != (index.shape[0], d) or x.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError(f"gather of {tuple(x.shape)} by {tuple(index.shape)} into {tuple(out.shape)}")
    block_d, block_r = _tile(d)
    n = index.shape[0]
    return _call(gather_rows_kernel, n, block_r,
                 {"x_ptr": (x, _ptr(x)), "idx_ptr": (index, _ptr(index)), "out_ptr": (out, _ptr(out)),
                  "rows_ptr": _rows_ptr(rows, index)},
                 {"X_ST": x.stride(0), "O_ST": out.stride(0), "D": d, "BLOCK_D": block_d, "BLOCK_R": block_r})


def emit_gdn_gate(x: torch.Tensor, out: torch.Tensor, a_log: torch.Tensor | None = None,
                  dt_bias: torch.Tensor | None = None, rows: torch.Tensor | None = None) -> KernelCall:
    """The decay (given A_log and dt_bias) or beta (without them) of x [rows, H] into contiguous fp32 out."""
    n, h = x.shape
    if out.dtype != torch.float32 or out.shape != (n, h) or not out.is_contiguous() or x.stride(1) != 1:
        raise ValueError("a gate reads [rows, H] rows and writes contiguous fp32")
    beta = a_log is None
    params = x if beta else a_log  # beta reads no parameters: any pointer fills their slots
    block_h, block_r = _tile(h)
    return _call(gdn_gate_kernel, n, block_r,
                 {"x_ptr": (x, _ptr(x)), "a_log_ptr": (params, _ptr(params)),
                  "dt_bias_ptr": (x if beta else dt_bias, _ptr(x if beta else dt_bias)),
                  "out_ptr": (out, _ptr(out)), "rows_ptr": _rows_ptr(rows, x)},
                 {"X_ST": x.stride(0), "H": h, "BETA": beta, "BLOCK_H": block_h, "BLOCK_R": block_r})


LABEL_BLOCK, LABEL_BLOCK_H = 16, 256


def emit_label_head(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, nlabels: torch.Tensor,
                    out: torch.Tensor) -> KernelCall:
    reads, h = hidden.shape
    lmax = labels.shape[1]
    contiguous = labels.is_contiguous() and out.is_contiguous()
    if out.shape != (reads, lmax) or out.dtype != torch.float32 or not contiguous:
        raise ValueError("label head: out is contiguous fp32 [reads, labels]")
    block_h = min(LABEL_BLOCK_H, triton.next_power_of_2(h))
    args = {"h_ptr": (hidden, _ptr(hidden)), "w_ptr": (weight, _ptr(weight)),
            "labels_ptr": (labels, _ptr(labels)), "nlabels_ptr": (nlabels, _ptr(nlabels)),
            "out_ptr": (out, _ptr(out))}
    consts = {"H_ST": hidden.stride(0), "W_ST": weight.stride(0), "L": lmax, "H": h, "BLOCK_L": LABEL_BLOCK,
              "BLOCK_H": block_h}
    sig = {name: ty for name, (_, ty) in args.items()} | {name: "constexpr" for name in consts}
    return KernelCall(label_head_kernel, (reads, triton.cdiv(lmax, LABEL_BLOCK)),
                      tuple(v for v, _ in args.values()), sig, consts)
