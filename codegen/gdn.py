"""Forked Gated DeltaNet: the chunked gated delta rule over each segment's path, one Triton launch per level.

Consumes q/k [T, Hk, Dk], v [T, Hv, Dv], the log-decay g and write strength beta [T, Hv] (fp32; or, with the
gate fused, the raw projections a and b in the model dtype plus A_log and dt_bias), the GdnTables of
runtime/tables.py and a buffer of fp32 state slots [slots, Hv, Dk, Dv]; produces out [T, Hv, Dv] in v's
dtype, written only at segment rows, and the state slots that deeper levels start from.
One launch per tree level, one program per (work item, value head, block of BLOCK_V value columns): the
program loads its segment's fp32 state at the aligned chunk start (from a slot, or zeros), then walks
chunks of CHUNK absolute positions; the first gathers the ancestors' tail rows by index before the
segment's own rows, so a branch forking inside a chunk recomputes only that chunk. Per chunk, in fp32 (the
reference's WY/UT form): q, k L2-normalised (q also scaled), decays from the in-chunk cumulative sum of g,
the unit lower triangular system inverted blockwise, then outputs and the state at the chunk's end; the
state after the last full chunk goes to the item's dst slot.
Relies on (E3): a row's bits depend only on the positions at or before it on its path: every product whose
row index precedes its column index is masked to an exact zero, positions past a segment's end load zeros,
and chunk boundaries are absolute, so a forked stream and each path's plain stream give identical bits with
the same tile choices (TILES) in every bucket. Value columns are independent: splitting them changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from flidec.codegen import eager
from flidec.runtime.meta import CHUNK, StreamMeta
from flidec.runtime.reference.ops import L2_EPS
from flidec.runtime.tables import ITEM_FIELDS, GdnTables, gdn_tables


@dataclass(frozen=True, slots=True)
class GdnTiles:
    block_v: int  # value columns per program: the state block a program keeps in registers is Dk x block_v
    num_warps: int
    num_stages: int
    dot: str  # tl.dot input precision of the fp32 products


# One tile choice per value head dim, shared by every bucket (E3). The fp32 products run as tf32x3 (three
# tf32 tensor-core products, about fp32 accuracy): "ieee" fp32 dots fall back to FMA loops that spill badly
# at Dk = Dv = 128 (measured for sm_90: 32 registers and a 13 KB stack frame, against 255 registers and
# 2.7 KB with tf32x3). The interpreter computes every precision in fp32.
TILES: dict[int, GdnTiles] = {
    16: GdnTiles(block_v=16, num_warps=4, num_stages=1, dot="tf32x3"),
    32: GdnTiles(block_v=32, num_warps=4, num_stages=1, dot="tf32x3"),
    64: GdnTiles(block_v=64, num_warps=4, num_stages=1, dot="tf32x3"),
    128: GdnTiles(block_v=64, num_warps=4, num_stages=1, dot="tf32x3"),
}
KEY_DIMS = (16, 32, 64, 128)

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_FIELD = {name: i for i, name in enumerate(ITEM_FIELDS)}


@triton.jit
def _unit_lower_inverse(a, CHUNK: tl.constexpr, BLOCK: tl.constexpr, DOT: tl.constexpr):
    """(I + a)^-1 of a strictly lower triangular [CHUNK, CHUNK] a, through BLOCK x BLOCK diagonal blocks.

    With a = a_d + l (a_d its diagonal blocks, l the rest): I + a = (I + a_d)(I + d l) for d = (I + a_d)^-1,
    and n = d l is nilpotent of order CHUNK / BLOCK = 4, so (I + a)^-1 = (I - n)(I + n^2) d. d comes from
    forward substitution run on every diagonal block at once, one row of each per step. Every factor is
    lower triangular with exact zeros above its diagonal, so row i depends on rows at or before i only.
    """
    tl.static_assert(CHUNK == 4 * BLOCK)
    offs = tl.arange(0, CHUNK)
    rows, cols = offs[:, None], offs[None, :]
    same_block = rows // BLOCK == cols // BLOCK
    eye = tl.where(rows == cols, 1.0, 0.0)
    a_d = tl.where(same_block, a, 0.0)
    d = eye
    for step in range(1, BLOCK):
        # rows before `step` in each block are final, and a_d's row reads only those
        d = tl.where(rows % BLOCK == step, eye - tl.dot(a_d, d, input_precision=DOT), d)
    n = tl.dot(d, tl.where(same_block, 0.0, a), input_precision=DOT)
    n2 = tl.dot(n, n, input_precision=DOT)
    return tl.dot(tl.dot(eye - n, eye + n2, input_precision=DOT), d, input_precision=DOT)


@triton.jit
def fork_gdn_kernel(
    q_ptr, k_ptr, v_ptr,
    g_ptr, beta_ptr,  # fp32 g and beta [T, Hv]; with FUSED_GATE the raw projections a and b
    a_log_ptr, dt_bias_ptr,  # [Hv], read only with FUSED_GATE
    out_ptr,
    items_ptr,  # int32 [items, NUM_FIELDS] (runtime/tables.py)
    tails_ptr,  # int32 [items, CHUNK]
    slots_ptr,  # fp32 [slots, HV, DK, DV]
    item_base,  # i32: this level's first item
    scale,  # fp32: q's scale after its L2 norm
    Q_ST: tl.constexpr, Q_SH: tl.constexpr, K_ST: tl.constexpr, K_SH: tl.constexpr,
    V_ST: tl.constexpr, V_SH: tl.constexpr, G_ST: tl.constexpr, B_ST: tl.constexpr,
    O_ST: tl.constexpr, O_SH: tl.constexpr,  # row and head strides, in elements (g, beta: head stride 1)
    HV: tl.constexpr, GROUP: tl.constexpr,  # value heads, and value heads per key head
    DK: tl.constexpr, DV: tl.constexpr, BLOCK_V: tl.constexpr, CHUNK: tl.constexpr,
    NUM_FIELDS: tl.constexpr, F_ROW0: tl.constexpr, F_LENGTH: tl.constexpr, F_TAIL: tl.constexpr,
    F_SRC: tl.constexpr, F_DST: tl.constexpr,
    FUSED_GATE: tl.constexpr, EPS: tl.constexpr,
    DOT: tl.constexpr,  # tl.dot input precision of the fp32 products
):
    item = item_base + tl.program_id(0)
    hv = tl.program_id(1) // (DV // BLOCK_V)
    hk = hv // GROUP
    fields = items_ptr + item * NUM_FIELDS
    row0 = tl.load(fields + F_ROW0)
    length = tl.load(fields + F_LENGTH)
    n_tail = tl.load(fields + F_TAIL)
    src = tl.load(fields + F_SRC)
    dst = tl.load(fields + F_DST)
    total = n_tail + length  # positions from the aligned chunk start to the segment's end
    n_full = total // CHUNK

    offs_c = tl.arange(0, CHUNK)
    offs_k = tl.arange(0, DK)
    offs_v = (tl.program_id(1) % (DV // BLOCK_V)) * BLOCK_V + tl.arange(0, BLOCK_V)
    later = offs_c[:, None] < offs_c[None, :]  # (i, j) with j after i: exact zeros in every product
    state_at = (hv * DK + offs_k[:, None]) * DV + offs_v[None, :]
    slot_size = HV * DK * DV
    state = tl.load(slots_ptr + tl.maximum(src, 0).to(tl.int64) * slot_size + state_at,
                    mask=(offs_k[:, None] >= 0) & (src >= 0), other=0.0)
    if FUSED_GATE:
        neg_a = -tl.exp(tl.load(a_log_ptr + hv).to(tl.float32))
        dt_bias = tl.load(dt_bias_ptr + hv).to(tl.float32)

    for c in range(tl.cdiv(total, CHUNK)):
        pos = c * CHUNK + offs_c  # relative to the aligned chunk start
        in_tail = pos < n_tail
        tail_row = tl.load(tails_ptr + item * CHUNK + pos, mask=in_tail, other=0)
        row = tl.where(in_tail, tail_row, row0 + pos - n_tail).to(tl.int64)
        valid = pos < total
        q = tl.load(q_ptr + row[:, None] * Q_ST + hk * Q_SH + offs_k[None, :], mask=valid[:, None],
                    other=0.0).to(tl.float32)
        k = tl.load(k_ptr + row[:, None] * K_ST + hk * K_SH + offs_k[None, :], mask=valid[:, None],
                    other=0.0).to(tl.float32)
        v = tl.load(v_ptr + row[:, None] * V_ST + hv * V_SH + offs_v[None, :], mask=valid[:, None],
                    other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * G_ST + hv, mask=valid, other=0.0).to(tl.float32)
        beta = tl.load(beta_ptr + row * B_ST + hv, mask=valid, other=0.0).to(tl.float32)
        if FUSED_GATE:
            x = g + dt_bias
            # softplus with torch's threshold 20; below -15, log(1 + e^x) rounds 1 + e^x and e^x is closer
            e_x = tl.exp(tl.minimum(x, 20.0))
            softplus = tl.where(x > 20.0, x, tl.where(x < -15.0, e_x, tl.log(1.0 + e_x)))
            g = tl.where(valid, neg_a * softplus, 0.0)
            beta = tl.where(valid, 1.0 / (1.0 + tl.exp(-beta)), 0.0)
        q = q * tl.rsqrt(tl.sum(q * q, 1) + EPS)[:, None] * scale
        k = k * tl.rsqrt(tl.sum(k * k, 1) + EPS)[:, None]

        cum = tl.cumsum(g, 0)
        decay = tl.exp(tl.where(later, float("-inf"), cum[:, None] - cum[None, :]))  # exactly 0 when later
        k_beta = k * beta[:, None]
        system = tl.dot(k_beta, tl.trans(k), input_precision=DOT) * decay
        system = tl.where(offs_c[:, None] > offs_c[None, :], system, 0.0)  # strictly lower: the unit diagonal
        inv = _unit_lower_inverse(system, CHUNK, CHUNK // 4, DOT)
        u = tl.dot(inv, v * beta[:, None], input_precision=DOT)
        w = tl.dot(inv, k_beta * tl.exp(cum)[:, None], input_precision=DOT)
        v_new = u - tl.dot(w, state, input_precision=DOT)
        intra = tl.dot(q, tl.trans(k), input_precision=DOT) * decay
        o = tl.dot(q * tl.exp(cum)[:, None], state, input_precision=DOT)
        o = tl.dot(intra, v_new, o, input_precision=DOT)
        own = valid & (pos >= n_tail)  # tail rows are the ancestors': they wrote them themselves
        tl.store(out_ptr + row[:, None] * O_ST + hv * O_SH + offs_v[None, :], o.to(out_ptr.dtype.element_ty),
                 mask=own[:, None])

        # Only full chunks move the state on: a partial last chunk is recomputed by the children it ends at.
        cum_last = tl.sum(tl.where(offs_c == CHUNK - 1, cum, 0.0), 0)
        k_end = k * tl.exp(cum_last - cum)[:, None]
        moved = state * tl.exp(cum_last) + tl.dot(tl.trans(k_end), v_new, input_precision=DOT)
        state = tl.where(c < n_full, moved, state)

    # the state at floor(end / CHUNK) * CHUNK, where the segment's children's chunks begin
    tl.store(slots_ptr + tl.maximum(dst, 0).to(tl.int64) * slot_size + state_at, state,
             mask=(offs_k[:, None] >= 0) & (dst >= 0))


@dataclass(frozen=True, slots=True)
class GdnSpec:
    """Everything a forked Gated DeltaNet kernel is specialized on: one compiled kernel per spec."""

    dtype: torch.dtype  # q, k, v
    gate_dtype: torch.dtype  # g and beta (fp32), or a and b when fused (the model dtype)
    out_dtype: torch.dtype
    num_k_heads: int
    num_v_heads: int
    key_dim: int
    value_dim: int
    fused_gate: bool
    strides: tuple[tuple[int, int], ...]  # (row, head) strides in elements of q, k, v, g, beta, out

    @property
    def tiles(self) -> GdnTiles:
        return TILES[self.value_dim]

    def signature(self) -> dict[str, str]:
        sig = {name: "*" + _DTYPES[self.dtype] for name in ("q_ptr", "k_ptr", "v_ptr")}
        gate = "*" + _DTYPES[self.gate_dtype]
        sig |= {name: gate for name in ("g_ptr", "beta_ptr", "a_log_ptr", "dt_bias_ptr")}
        sig |= {"out_ptr": "*" + _DTYPES[self.out_dtype], "items_ptr": "*i32", "tails_ptr": "*i32",
                "slots_ptr": "*fp32", "item_base": "i32", "scale": "fp32"}
        return sig | {name: "constexpr" for name in self.constexprs()}

    def constexprs(self) -> dict[str, int | bool | float]:
        (q_st, q_sh), (k_st, k_sh), (v_st, v_sh), (g_st, _), (b_st, _), (o_st, o_sh) = self.strides
        return {
            "Q_ST": q_st, "Q_SH": q_sh, "K_ST": k_st, "K_SH": k_sh, "V_ST": v_st, "V_SH": v_sh,
            "G_ST": g_st, "B_ST": b_st, "O_ST": o_st, "O_SH": o_sh,
            "HV": self.num_v_heads, "GROUP": self.num_v_heads // self.num_k_heads,
            "DK": self.key_dim, "DV": self.value_dim, "BLOCK_V": self.tiles.block_v, "CHUNK": CHUNK,
            "NUM_FIELDS": len(ITEM_FIELDS), "F_ROW0": _FIELD["row0"], "F_LENGTH": _FIELD["length"],
            "F_TAIL": _FIELD["tail"], "F_SRC": _FIELD["src"], "F_DST": _FIELD["dst"],
            "FUSED_GATE": self.fused_gate, "EPS": L2_EPS, "DOT": self.tiles.dot,
        }

    def grid(self, per_level: int) -> tuple[int, int]:
        return (per_level, self.num_v_heads * (self.value_dim // self.tiles.block_v))


def gdn_spec(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
             out: torch.Tensor, fused_gate: bool) -> GdnSpec:
    """The spec of a launch on these tensors (checking what the kernel assumes of them)."""
    hk, dk = k.shape[1:]
    hv, dv = v.shape[1:]
    if dk not in KEY_DIMS or dv not in TILES:
        raise ValueError(f"head dims {dk}/{dv} have no tile choice (key: {KEY_DIMS}, value: {sorted(TILES)})")
    if q.shape[1:] != k.shape[1:] or hv % hk:
        raise ValueError(f"q {tuple(q.shape[1:])} and k {tuple(k.shape[1:])} heads cannot serve {hv} value "
                         "heads")
    if q.dtype != k.dtype or q.dtype != v.dtype or any(t.stride(2) != 1 for t in (q, k, v, out)):
        raise ValueError("q, k and v must share a dtype; q, k, v and out need a contiguous head dim")
    if g.dtype != beta.dtype or any(t.shape[1] != hv or t.stride(1) != 1 for t in (g, beta)):
        raise ValueError(f"g and beta must be [T, {hv}] of one dtype with contiguous heads")
    if not fused_gate and g.dtype != torch.float32:
        raise ValueError("g and beta are fp32 (pass a_log and dt_bias to fuse the gate on raw projections)")
    strides = tuple((t.stride(0), t.stride(1)) for t in (q, k, v, g, beta, out))
    return GdnSpec(dtype=q.dtype, gate_dtype=g.dtype, out_dtype=out.dtype, num_k_heads=hk, num_v_heads=hv,
                   key_dim=dk, value_dim=dv, fused_gate=fused_gate, strides=strides)


def slot_buffer(num_slots: int, num_v_heads: int, key_dim: int, value_dim: int,
                device: torch.device | str) -> torch.Tensor:
    """A NaN-filled slot buffer: a level reading a slot no earlier level wrote gets NaN outputs, not zeros."""
    return torch.full((max(num_slots, 1), num_v_heads, key_dim, value_dim), float("nan"), device=device)


def launch_levels(spec: GdnSpec, tables: GdnTables, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  g: torch.Tensor, beta: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor,
                  out: torch.Tensor, slots: torch.Tensor) -> None:
    """One launch per tree level in order (roots first), each on the level's block of items."""
    items, tails = tables.items.to(q.device), tables.tails.to(q.device)
    scale = spec.key_dim**-0.5
    for level in range(tables.num_levels):
        eager.launch(fork_gdn_kernel, spec.grid(tables.per_level), q, k, v, g, beta, a_log, dt_bias, out,
                     items, tails, slots, level * tables.per_level, scale, device=q.device,
                     **spec.constexprs())


def fork_gdn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
             meta: StreamMeta, a_log: torch.Tensor | None = None, dt_bias: torch.Tensor | None = None,
             out: torch.Tensor | None = None, slots: torch.Tensor | None = None, levels: int | None = None,
             per_level: int | None = None, num_slots: int | None = None) -> torch.Tensor:
    """Run the kernel eagerly (JIT on CUDA, interpreter on CPU), tables padded to a bucket's sizes if given.

    With `a_log` and `dt_bias`, g and beta are the raw projections a and b and the kernel computes
    g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b) itself. `out` defaults to a NaN-filled
    tensor, so rows the kernel does not write stay NaN; `slots` (see `slot_buffer`) receives the states at
    the chunk boundaries deeper segments start from, in the slots of tables.state_slots.
    """
    fused = a_log is not None
    if fused != (dt_bias is not None) or (fused and {a_log.dtype, dt_bias.dtype} != {g.dtype}):
        raise ValueError("to fuse the gate pass both a_log and dt_bias, in the dtype of the projections a, b")
    if out is None:
        out = torch.full(v.shape, float("nan"), dtype=v.dtype, device=v.device)
    spec = gdn_spec(q, k, v, g, beta, out, fused)
    tables = gdn_tables(meta, levels, per_level, num_slots)
    if slots is None:
        slots = slot_buffer(tables.num_slots, spec.num_v_heads, spec.key_dim, spec.value_dim, q.device)
    if fused:
        launch_levels(spec, tables, q, k, v, g, beta, a_log, dt_bias, out, slots)
    else:
        launch_levels(spec, tables, q, k, v, g, beta, g, g, out, slots)  # a_log, dt_bias unread
    return out
