"""Fork conv: Qwen3.5's depthwise causal conv + SiLU over each row's path, one Triton kernel.

Consumes x [T, C] (any dtype, channels contiguous), the depthwise weight [C, CONV_TAPS] and the conv_taps
table of runtime/tables.py (per row: the rows of its CONV_TAPS - 1 predecessors on its path, then itself; -1
reads zeros, and a row whose own entry is -1 is padding); produces out [T, C] in its own dtype (x's, or fp32:
the Gated DeltaNet's inputs unrounded), written only at segment rows. One program per (BLOCK_R rows, BLOCK_C
channels) tile; each row gathers its taps by index, so a branch's first rows read its parent's last rows
across the fork point. Relies on (E3): an output element depends only on its own taps, summed oldest first in
fp32 whatever the tile, so a forked stream and each path's plain stream give identical bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from flidec.codegen import eager
from flidec.runtime.meta import CONV_TAPS, StreamMeta
from flidec.runtime.recording import DTYPE_NAMES
from flidec.runtime.tables import conv_taps


@dataclass(frozen=True, slots=True)
class ConvTiles:
    block_r: int
    block_c: int
    num_warps: int
    num_stages: int


TILES = ConvTiles(block_r=16, block_c=128, num_warps=4, num_stages=1)  # one choice for every bucket (E3)


@triton.jit
def fork_conv_kernel(
    x_ptr, w_ptr, out_ptr,
    taps_ptr,  # int32 [rows of the grid, TAPS]
    rows_ptr,  # *i32: how many rows to compute (codegen/gemm.py ROWS: the stream's, in a replay)
    X_ST: tl.constexpr, W_ST: tl.constexpr, O_ST: tl.constexpr,  # row strides, in elements
    C: tl.constexpr, TAPS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    num_rows = tl.load(rows_ptr)
    if tl.program_id(0) * BLOCK_R >= num_rows:
        return
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    in_table = rows < num_rows
    in_c = cols < C
    acc = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)
    for j in tl.static_range(TAPS):
        src = tl.load(taps_ptr + rows * TAPS + j, mask=in_table, other=-1)
        x = tl.load(x_ptr + src.to(tl.int64)[:, None] * X_ST + cols[None, :],
                    mask=(src >= 0)[:, None] & in_c[None, :], other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols * W_ST + j, mask=in_c, other=0.0).to(tl.float32)
        acc += x * w[None, :]
    y = acc / (1.0 + tl.exp(-acc))  # SiLU
    own = tl.load(taps_ptr + rows * TAPS + (TAPS - 1), mask=in_table, other=-1)
    tl.store(out_ptr + rows.to(tl.int64)[:, None] * O_ST + cols[None, :], y.to(out_ptr.dtype.element_ty),
             mask=(own >= 0)[:, None] & in_c[None, :])


@dataclass(frozen=True, slots=True)
class ConvSpec:
    """Everything a fork conv kernel is specialized on: one compiled kernel per spec."""

    dtype: torch.dtype  # x's
    weight_dtype: torch.dtype
    channels: int
    strides: tuple[int, int, int]  # row strides in elements of x, weight, out
    out_dtype: torch.dtype | None = None  # fp32 (the Gated DeltaNet's inputs unrounded), or None: x's

    @property
    def tiles(self) -> ConvTiles:
        return TILES

    def signature(self) -> dict[str, str]:
        ptr = "*" + DTYPE_NAMES[self.dtype]
        sig = {"x_ptr": ptr, "w_ptr": "*" + DTYPE_NAMES[self.weight_dtype],
               "out_ptr": "*" + DTYPE_NAMES[self.out_dtype or self.dtype],
               "taps_ptr": "*i32", "rows_ptr": "*i32"}
        return sig | {name: "constexpr" for name in self.constexprs()}

    def constexprs(self) -> dict[str, int]:
        x_st, w_st, o_st = self.strides
        return {"X_ST": x_st, "W_ST": w_st, "O_ST": o_st, "C": self.channels, "TAPS": CONV_TAPS,
                "BLOCK_R": TILES.block_r, "BLOCK_C": TILES.block_c}

    def grid(self, num_rows: int) -> tuple[int, int]:
        return (triton.cdiv(num_rows, TILES.block_r), triton.cdiv(self.channels, TILES.block_c))


def conv_spec(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> ConvSpec:
    """The spec of a launch on these tensors (checking what the kernel assumes of them)."""
    channels = x.shape[1]
    if weight.shape != (channels, CONV_TAPS) or out.shape != x.shape or out.dtype not in (x.dtype,
                                                                                           torch.float32):
        raise ValueError(f"need x and out [T, C] (out in x's dtype or fp32) and a weight [C, {CONV_TAPS}]; "
                         f"got x "
                         f"{tuple(x.shape)}, out {tuple(out.shape)} {out.dtype}, "
                         f"weight {tuple(weight.shape)}")
    if x.stride(1) != 1 or weight.stride(1) != 1 or out.stride(1) != 1:
        raise ValueError("x, weight and out need contiguous channels")
    return ConvSpec(dtype=x.dtype, weight_dtype=weight.dtype, channels=channels,
                    strides=(x.stride(0), weight.stride(0), out.stride(0)),
                    out_dtype=None if out.dtype == x.dtype else out.dtype)


def fork_conv(x: torch.Tensor, weight: torch.Tensor, meta: StreamMeta, out: torch.Tensor | None = None,
              rows: int | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Run the kernel eagerly (JIT on CUDA, interpreter on CPU) with the taps table padded to `rows` if
    given. `out` defaults to a NaN-filled tensor of `dtype` (default x's), so rows the kernel does not write
    stay NaN."""
    if out is None:
        out = torch.full(x.shape, float("nan"), dtype=dtype or x.dtype, device=x.device)
    spec = conv_spec(x, weight, out)
    taps = conv_taps(meta, rows).to(x.device)
    eager.launch(fork_conv_kernel, spec.grid(taps.shape[0]), x, weight, out, taps,
                 eager.row_count(taps.shape[0], x.device), device=x.device, **spec.constexprs())
    return out
