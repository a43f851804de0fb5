"""Row copies between a replay's arena and the saved-point staging buffers outside it (runtime/saved).

A recording restores a stream's stored roots and captures its saved points in place, between a buffer's
producer and its consumer (the arena reuses every activation's bytes once it is dead): the keys and values
before the fork attention, the conv windows before the fork conv, the GDN states into their slots before
the first state walk and out of the chunk states after the last. One kernel moves rows as raw bits by a
map the binder fills (runtime/tables.py, "saved points"): SCATTER writes staging row i to arena row map[i]
(a restore), otherwise arena row map[i] is read into staging row i (a capture); a map entry of -1 moves
nothing. The maps fill from the front, so a program whose first entry is -1 returns at once, and a stream
with no saved point skips these steps altogether (the engine replays the recording without them).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from flidec.codegen.pointwise import TILE_ELEMENTS, KernelCall, _ptr


@triton.jit
def copy_rows_kernel(src_ptr, dst_ptr, map_ptr, N: tl.constexpr, SRC_ST: tl.constexpr, DST_ST: tl.constexpr,
                     D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr, SCATTER: tl.constexpr):
    first = tl.program_id(0) * BLOCK_R
    if tl.load(map_ptr + first) < 0:  # the maps fill from the front: nothing at or after this program
        return
    i = first + tl.arange(0, BLOCK_R)
    m = tl.load(map_ptr + i, mask=i < N, other=-1)
    live = m >= 0
    if SCATTER:
        src_row, dst_row = i.to(tl.int64), tl.maximum(m, 0).to(tl.int64)
    else:
        src_row, dst_row = tl.maximum(m, 0).to(tl.int64), i.to(tl.int64)
    for d0 in tl.static_range(0, D, BLOCK_D):
        d = d0 + tl.arange(0, BLOCK_D)
        mask = live[:, None] & (d[None, :] < D)
        x = tl.load(src_ptr + src_row[:, None] * SRC_ST + d[None, :], mask=mask)
        tl.store(dst_ptr + dst_row[:, None] * DST_ST + d[None, :], x, mask=mask)


def reference_copy_rows(src: torch.Tensor, dst: torch.Tensor, rows: torch.Tensor, scatter: bool) -> None:
    """The plain-torch copy the kernel makes, in place into dst ([rows, D] each; `rows` the map)."""
    live = torch.nonzero(rows >= 0).flatten()
    m = rows[live].long()
    if scatter:
        dst[m] = src[live]
    else:
        dst[live] = src[m]


def emit_copy_rows(src: torch.Tensor, dst: torch.Tensor, rows: torch.Tensor, scatter: bool) -> KernelCall:
    """A copy of [*, D] rows (contiguous D) by the int32 map `rows`: the staging side has len(rows) rows."""
    if src.dim() != 2 or dst.dim() != 2 or src.shape[1] != dst.shape[1] or src.dtype != dst.dtype:
        raise ValueError(f"a row copy moves [rows, D] rows of one dtype: {tuple(src.shape)} {src.dtype} to "
                         f"{tuple(dst.shape)} {dst.dtype}")
    if src.stride(1) != 1 or dst.stride(1) != 1 or rows.dtype != torch.int32 or rows.dim() != 1:
        raise ValueError("a row copy needs contiguous rows and an int32 map")
    staging = src if scatter else dst
    if staging.shape[0] < rows.shape[0]:
        raise ValueError(f"the staging side has {staging.shape[0]} rows, the map {rows.shape[0]}")
    d = src.shape[1]
    block_d = min(triton.next_power_of_2(d), TILE_ELEMENTS)
    block_r = max(1, TILE_ELEMENTS // block_d)
    n = rows.shape[0]
    args = {"src_ptr": (src, _ptr(src)), "dst_ptr": (dst, _ptr(dst)), "map_ptr": (rows, "*i32")}
    consts = {"N": n, "SRC_ST": src.stride(0), "DST_ST": dst.stride(0), "D": d, "BLOCK_D": block_d,
              "BLOCK_R": block_r, "SCATTER": scatter}
    sig = {name: ty for name, (_, ty) in args.items()} | {name: "constexpr" for name in consts}
    return KernelCall(copy_rows_kernel, (triton.cdiv(n, block_r),), tuple(v for v, _ in args.values()), sig,
                      consts)
