"""Batch-invariant GEMM y = x @ W^T: a row's bits depend on that row of x and on W only.

Consumes x [M, K] and W [N, K] (bf16 or fp32, inner dim contiguous) and the count of rows to compute, read
from device memory (ROWS below); produces those rows of y [M, N] with fp32 accumulation, rounded to y's
dtype: x's, or fp32 (the accumulator as it is: the residual stream's projections, E4). One
program per (BLOCK_M rows, BLOCK_N columns) tile; K is reduced in BLOCK_K steps from 0 upward, in the same
order for every row, with no split-K, so neither M nor a row's place among the tiles changes its result.
`gemm_group_kernel` runs up to four projections of one x (passes/group_linears.py) in one launch, each tile
computed as gemm_kernel's would be. Above 1,024 rows the launches are persistent and TMA-fed (PERSISTENT),
with the same tiles and K order. Relies on E3 holding across tile shapes for bf16 (TILES' comment).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from flidec.codegen import eager
from flidec.runtime.recording import DTYPE_NAMES


@dataclass(frozen=True, slots=True)
class GemmTiles:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    # row tiles whose column tiles programs take before the next rows' (_tile); 0: grid order
    group_m: int = 0
    # PERSISTENT: this many programs walk the tiles, loading by TMA; 0: a program per tile
    programs: int = 0


# The tiles may depend on M without breaking E3 for bf16: on sm_90 the tensor cores add K into the fp32
# accumulator 16 at a time from 0 upward whatever the tile, so every tile shape gives the same bits (the 0.8B
# projections' outputs have identical digests under every choice benchmarks/gemm_tiles.py tries, and
# test_aot_gpu.py checks the rungs against each other on the hardware). That holds only while every tile
# runs on wgmma (BLOCK_M a multiple of 64, warps a multiple of 4), K is never split and the input precision
# stays; fp32 (FMA products) keeps one choice.
# Per dtype, rungs of (largest M served, largest N served, tiles): a launch takes the first rung serving its
# rows and columns (benchmarks/gemm_tiles.py and profile_runtime.py time them). Small launches take smaller
# tiles because a few large tiles of a narrow projection leave most SMs idle; they lose once the rows fill the
# GPU. Six stages pay up to 256 rows (the SwiGLU kernel, two weight tiles a stage, keeps 4: silu_mul_spec),
# and 64 x 128 tiles help the N = 1,024 launches at 1,024 rows but not the wide ones. Tiles walked by a fixed
# number of programs lost at every size with pointer loads; fed by TMA they win above 1,024 rows
# (PERSISTENT), where the last rung takes over. Every tile choice gives the same bits at every row count.
ANY = 2**31 - 1
SMS = 132  # the SMs of an H100 SXM or H200 (sm_90's parts with the most): a persistent launch's programs
# 128 x 128 tiles a program each: on 4 stages the grouped launch's pointer loads need 256 KiB of shared memory
_PER_TILE = GemmTiles(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3)
TILES: dict[torch.dtype, tuple[tuple[int, int, GemmTiles], ...]] = {
    torch.bfloat16: ((256, ANY, GemmTiles(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=6)),
                     (768, ANY, GemmTiles(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=4)),
                     (1024, 1024, GemmTiles(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=4)),
                     (1024, ANY, _PER_TILE),
                     (ANY, ANY, dataclasses.replace(_PER_TILE, num_stages=4, group_m=8, programs=SMS))),
    torch.float32: ((ANY, ANY, GemmTiles(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=2)),),
}


def tiles_for(dtype: torch.dtype, rows: int, columns: int) -> GemmTiles:
    """The tiles of a launch over `rows` rows and `columns` columns (a group's: all members'): the first rung
    that serves them."""
    return next(t for most_rows, most_columns, t in TILES[dtype]
                if rows <= most_rows and columns <= most_columns)


# With group_m, programs take tiles group_m (8) row tiles at a time, each of those rows' column tiles
# before the next rows' (_tile). In the grid's order (all row tiles of a column tile, then the next column
# tile) a very long x (the offline path's packed instances) leaves L2 before the next column tile comes back
# to it, and the grouped projections grew faster than their rows; grouping fixes that and costs nothing
# measurable where x fits in L2. Which program computes a tile does not change its bits. The persistent rung
# (PERSISTENT) walks its tiles in this order at every size.

# ROWS: the kernels read how many rows to compute from a device int32 (`rows_ptr`), and the programs of row
# tiles past it return at once (PERSISTENT: the walk ends at its last tile). A bucket's grid covers its rows
# (or, for the last layer's MLP, its reads: passes/trim_reads.py), but a stream fills only some of them (a
# ladder pads up to a quarter, the offline path's packs more); the binder writes the stream's count into a
# `live_rows` meta buffer before each replay, so the projections cost the stream's rows, not the bucket's.
# Padding rows of y keep whatever they held: no kernel reads them into a stream's row (tables address only a
# stream's rows and reads, and each row of y depends on its own row of x alone).


@triton.jit
def _tile(GROUP_M: tl.constexpr):
    """(row tile, column tile) of this program. GROUP_M 0: the grid's axes. Else its place in dispatch order
    (axis 0 fastest) taken as GROUP_M row tiles at a time, the first column tile of each of them, then the
    second, ..., the last group holding what is left."""
    if GROUP_M == 0:
        return tl.program_id(0), tl.program_id(1)
    num_m = tl.num_programs(0)
    per_group = GROUP_M * tl.num_programs(1)
    pid = tl.program_id(1) * num_m + tl.program_id(0)
    first_m = (pid // per_group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % size_m, (pid % per_group) // size_m


@triton.jit
def _gemm_tile(x_ptr, w_ptr, y_ptr, M, pid_m, pid_n,
               N: tl.constexpr, K: tl.constexpr, X_ST: tl.constexpr, W_ST: tl.constexpr, Y_ST: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of y = x @ W^T: the whole of K, from 0 upward."""
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + rm.to(tl.int64)[:, None] * X_ST
    w_rows = w_ptr + rn.to(tl.int64)[:, None] * W_ST
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        x = tl.load(x_rows + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_rows + kk[None, :], mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0)
        acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")
    y = y_ptr + rm.to(tl.int64)[:, None] * Y_ST + rn[None, :]
    tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _projections(acc_g, acc_u, dtype: tl.constexpr, ROUND: tl.constexpr):
    """The SwiGLU's gate and up projections as the product reads them: rounded to `dtype` with ROUND."""
    if ROUND:
        return acc_g.to(dtype).to(tl.float32), acc_u.to(dtype).to(tl.float32)
    else:
        return acc_g, acc_u


@triton.jit
def gemm_silu_mul_kernel(
    x_ptr, wg_ptr, wu_ptr, y_ptr,
    rows_ptr,  # *i32: how many rows of x and y to compute (ROWS)
    N: tl.constexpr, K: tl.constexpr,
    X_ST: tl.constexpr, W_ST: tl.constexpr, Y_ST: tl.constexpr,  # row strides (both W share one)
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROUND: tl.constexpr,  # the projections are in y's dtype (else fp32: the accumulators as they are)
):
    """y = silu(x @ Wg^T) * (x @ Wu^T), the SwiGLU product, in the projections' epilogue. Each accumulator
    sees gemm_kernel's products in its order and, with ROUND, is rounded to y's dtype before the product, as
    the two stored projections were, and the product is computed as pointwise.binary_kernel's SILU_MUL
    does."""
    pid_m, pid_n = _tile(GROUP_M)
    M = tl.load(rows_ptr)
    if pid_m * BLOCK_M >= M:
        return
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + rm.to(tl.int64)[:, None] * X_ST
    w_at = rn.to(tl.int64)[:, None] * W_ST
    acc_g = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        x = tl.load(x_rows + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w_mask = (rn[:, None] < N) & (kk[None, :] < K)
        wg = tl.load(wg_ptr + w_at + kk[None, :], mask=w_mask, other=0.0)
        wu = tl.load(wu_ptr + w_at + kk[None, :], mask=w_mask, other=0.0)
        acc_g = tl.dot(x, tl.trans(wg), acc_g, input_precision="ieee")
        acc_u = tl.dot(x, tl.trans(wu), acc_u, input_precision="ieee")
    gate, up = _projections(acc_g, acc_u, y_ptr.dtype.element_ty, ROUND)
    y = y_ptr + rm.to(tl.int64)[:, None] * Y_ST + rn[None, :]
    tl.store(y, (gate / (1.0 + tl.exp(-gate)) * up).to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def gemm_kernel(
    x_ptr, w_ptr, y_ptr,
    rows_ptr,  # *i32: how many rows of x and y to compute (ROWS)
    N: tl.constexpr, K: tl.constexpr,
    X_ST: tl.constexpr, W_ST: tl.constexpr, Y_ST: tl.constexpr,  # row strides, in elements
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid_m, pid_n = _tile(GROUP_M)
    M = tl.load(rows_ptr)
    if pid_m * BLOCK_M >= M:
        return
    _gemm_tile(x_ptr, w_ptr, y_ptr, M, pid_m, pid_n, N, K, X_ST, W_ST, Y_ST, BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def gemm_group_kernel(
    x_ptr,
    w0_ptr, y0_ptr, w1_ptr, y1_ptr, w2_ptr, y2_ptr, w3_ptr, y3_ptr,  # members past GROUP repeat member 0
    rows_ptr,  # *i32: how many rows of x and of every y to compute (ROWS)
    N0: tl.constexpr, N1: tl.constexpr, N2: tl.constexpr, N3: tl.constexpr, K: tl.constexpr,  # N: 0 unused
    X_ST: tl.constexpr,
    W_ST0: tl.constexpr, W_ST1: tl.constexpr, W_ST2: tl.constexpr, W_ST3: tl.constexpr,
    Y_ST0: tl.constexpr, Y_ST1: tl.constexpr, Y_ST2: tl.constexpr, Y_ST3: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """y_i = x @ W_i^T for up to four W_i of one x in one launch: the grid's second axis runs through each
    member's column tiles in turn, and a tile computes exactly what gemm_kernel's tile would."""
    pid_m, pid_n = _tile(GROUP_M)
    M = tl.load(rows_ptr)
    if pid_m * BLOCK_M >= M:
        return
    end0: tl.constexpr = (N0 + BLOCK_N - 1) // BLOCK_N
    end1: tl.constexpr = end0 + (N1 + BLOCK_N - 1) // BLOCK_N
    end2: tl.constexpr = end1 + (N2 + BLOCK_N - 1) // BLOCK_N
    if pid_n < end0:
        _gemm_tile(x_ptr, w0_ptr, y0_ptr, M, pid_m, pid_n, N0, K, X_ST, W_ST0, Y_ST0,
                   BLOCK_M, BLOCK_N, BLOCK_K)
    elif pid_n < end1:
        _gemm_tile(x_ptr, w1_ptr, y1_ptr, M, pid_m, pid_n - end0, N1, K, X_ST, W_ST1, Y_ST1,
                   BLOCK_M, BLOCK_N, BLOCK_K)
    elif pid_n < end2:
        if N2 > 0:  # static: an unused member's branch is not compiled
            _gemm_tile(x_ptr, w2_ptr, y2_ptr, M, pid_m, pid_n - end1, N2, K, X_ST, W_ST2, Y_ST2,
                       BLOCK_M, BLOCK_N, BLOCK_K)
    else:
        if N3 > 0:
            _gemm_tile(x_ptr, w3_ptr, y3_ptr, M, pid_m, pid_n - end2, N3, K, X_ST, W_ST3, Y_ST3,
                       BLOCK_M, BLOCK_N, BLOCK_K)


# PERSISTENT: above 1,024 rows `programs` programs (one per SM) walk a launch's tiles in the grouped order
# (GROUP_M), each tile's K loop flattened into the walk so the next tile's loads are issued during this
# one's last products and store, and x and W come in by TMA (descriptors built on the device, in Triton's
# global scratch, which the runtime provides: runtime/launch.py). A tile's products and K order are
# gemm_kernel's, so its bits are too. The descriptors' row count is the rows pointer's, so TMA returns
# zeros past the stream's rows and the walk covers only its tiles. The flattened, TMA-fed walk was the
# fastest form at large row counts (closest to cuBLAS, outputs torch.equal to gemm_kernel's) and lost at
# 1,024 rows, so the rungs up to 1,024 rows keep a program per tile.

@triton.jit
def _grouped(t, num_m, num_n: tl.constexpr, GROUP_M: tl.constexpr):
    """(row tile, column tile) of the t-th tile in _tile's order."""
    if GROUP_M == 0:
        return t % num_m, t // num_m
    per_group = GROUP_M * num_n
    first_m = (t // per_group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    return first_m + (t % per_group) % size_m, (t % per_group) // size_m


@triton.jit
def _walk_tiles(x_ptr, w_ptr, y_ptr, M, done,
                N: tl.constexpr, K: tl.constexpr, X_ST: tl.constexpr, W_ST: tl.constexpr, Y_ST: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's tiles of y = x @ W^T (PERSISTENT). The launch deals its members' tiles to programs as
    one sequence: `done` tiles of earlier members came before these. Returns done + this member's tiles."""
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[X_ST, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[W_ST, 1], block_shape=[BLOCK_N, BLOCK_K])
    num_m = tl.cdiv(M, BLOCK_M)
    num_n: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    programs = tl.num_programs(0)
    for t in tl.range((tl.program_id(0) + programs - done % programs) % programs, num_m * num_n, programs,
                      flatten=True):
        pid_m, pid_n = _grouped(t, num_m, num_n, GROUP_M)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            x = x_desc.load([pid_m * BLOCK_M, k0])
            w = w_desc.load([pid_n * BLOCK_N, k0])
            acc = tl.dot(x, w.T, acc, input_precision="ieee")
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(y_ptr + rm.to(tl.int64)[:, None] * Y_ST + rn[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))
    return done + num_m * num_n


@triton.jit
def gemm_tma_kernel(
    x_ptr, w_ptr, y_ptr, rows_ptr,
    N: tl.constexpr, K: tl.constexpr, X_ST: tl.constexpr, W_ST: tl.constexpr, Y_ST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """gemm_kernel's launch, PERSISTENT."""
    _walk_tiles(x_ptr, w_ptr, y_ptr, tl.load(rows_ptr), 0, N, K, X_ST, W_ST, Y_ST, BLOCK_M, BLOCK_N, BLOCK_K,
                GROUP_M)


@triton.jit
def gemm_group_tma_kernel(
    x_ptr,
    w0_ptr, y0_ptr, w1_ptr, y1_ptr, w2_ptr, y2_ptr, w3_ptr, y3_ptr,
    rows_ptr,
    N0: tl.constexpr, N1: tl.constexpr, N2: tl.constexpr, N3: tl.constexpr, K: tl.constexpr,
    X_ST: tl.constexpr,
    W_ST0: tl.constexpr, W_ST1: tl.constexpr, W_ST2: tl.constexpr, W_ST3: tl.constexpr,
    Y_ST0: tl.constexpr, Y_ST1: tl.constexpr, Y_ST2: tl.constexpr, Y_ST3: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """gemm_group_kernel's launch, PERSISTENT: each member's tiles walked in turn."""
    M = tl.load(rows_ptr)
    done = _walk_tiles(x_ptr, w0_ptr, y0_ptr, M, 0, N0, K, X_ST, W_ST0, Y_ST0,
                       BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
    done = _walk_tiles(x_ptr, w1_ptr, y1_ptr, M, done, N1, K, X_ST, W_ST1, Y_ST1,
                       BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
    if N2 > 0:  # static: an unused member's walk is not compiled
        done = _walk_tiles(x_ptr, w2_ptr, y2_ptr, M, done, N2, K, X_ST, W_ST2, Y_ST2,
                           BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
    if N3 > 0:
        _walk_tiles(x_ptr, w3_ptr, y3_ptr, M, done, N3, K, X_ST, W_ST3, Y_ST3, BLOCK_M, BLOCK_N, BLOCK_K,
                    GROUP_M)


@triton.jit
def gemm_silu_mul_tma_kernel(
    x_ptr, wg_ptr, wu_ptr, y_ptr, rows_ptr,
    N: tl.constexpr, K: tl.constexpr, X_ST: tl.constexpr, W_ST: tl.constexpr, Y_ST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ROUND: tl.constexpr,
):
    """gemm_silu_mul_kernel's launch, PERSISTENT."""
    M = tl.load(rows_ptr)
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[X_ST, 1], block_shape=[BLOCK_M, BLOCK_K])
    wg_desc = tl.make_tensor_descriptor(wg_ptr, shape=[N, K], strides=[W_ST, 1],
                                        block_shape=[BLOCK_N, BLOCK_K])
    wu_desc = tl.make_tensor_descriptor(wu_ptr, shape=[N, K], strides=[W_ST, 1],
                                        block_shape=[BLOCK_N, BLOCK_K])
    num_m = tl.cdiv(M, BLOCK_M)
    num_n: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    for t in tl.range(tl.program_id(0), num_m * num_n, tl.num_programs(0), flatten=True):
        pid_m, pid_n = _grouped(t, num_m, num_n, GROUP_M)
        acc_g = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        acc_u = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, K, BLOCK_K):
            x = x_desc.load([pid_m * BLOCK_M, k0])
            acc_g = tl.dot(x, wg_desc.load([pid_n * BLOCK_N, k0]).T, acc_g, input_precision="ieee")
            acc_u = tl.dot(x, wu_desc.load([pid_n * BLOCK_N, k0]).T, acc_u, input_precision="ieee")
        gate, up = _projections(acc_g, acc_u, y_ptr.dtype.element_ty, ROUND)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(y_ptr + rm.to(tl.int64)[:, None] * Y_ST + rn[None, :],
                 (gate / (1.0 + tl.exp(-gate)) * up).to(y_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))


@dataclass(frozen=True, slots=True)
class GemmSpec:
    """Everything a GEMM kernel is specialized on (M is a launch argument; its size picked the tiles)."""

    dtype: torch.dtype  # x's and W's
    n: int
    k: int
    strides: tuple[int, int, int]  # row strides of x, W, y, in elements
    tiles: GemmTiles
    out_dtype: torch.dtype | None = None  # y's: fp32 (the accumulator unrounded), or None: x's
    silu_round: bool | None = None  # the SwiGLU launch's ROUND (None: not a SwiGLU launch)

    def signature(self, pointers: tuple[str, ...] = ("x_ptr", "w_ptr", "y_ptr")) -> dict[str, str]:
        """The kernel's parameter types; gemm_silu_mul_kernel names its pointers x, wg, wu, y (the last is
        y)."""
        ptr = "*" + DTYPE_NAMES[self.dtype]
        sig = {name: ptr for name in pointers[:-1]} | {pointers[-1]: "*" + DTYPE_NAMES[self.y_dtype]}
        sig |= {"rows_ptr": "*i32"}
        return sig | {name: "constexpr" for name in self.constexprs()}

    @property
    def y_dtype(self) -> torch.dtype:
        return self.out_dtype or self.dtype

    def constexprs(self) -> dict[str, int]:
        t = self.tiles
        x_st, w_st, y_st = self.strides
        silu = {} if self.silu_round is None else {"ROUND": self.silu_round}
        return {"N": self.n, "K": self.k, "X_ST": x_st, "W_ST": w_st, "Y_ST": y_st,
                "BLOCK_M": t.block_m, "BLOCK_N": t.block_n, "BLOCK_K": t.block_k, "GROUP_M": t.group_m} | silu

    def grid(self, m: int) -> tuple[int, ...]:
        t = self.tiles
        return _grid(t, triton.cdiv(m, t.block_m), triton.cdiv(self.n, t.block_n))

    def kernel(self, silu_mul: bool = False) -> object:
        """The kernel of a launch on this spec: gemm_kernel (gemm_silu_mul_kernel) or its PERSISTENT twin."""
        if silu_mul:
            return gemm_silu_mul_tma_kernel if self.tiles.programs else gemm_silu_mul_kernel
        return gemm_tma_kernel if self.tiles.programs else gemm_kernel


def _grid(tiles: GemmTiles, row_tiles: int, column_tiles: int) -> tuple[int, ...]:
    """A program per tile, or PERSISTENT: `programs` of them (fewer when the launch has fewer tiles)."""
    if tiles.programs:
        return (min(tiles.programs, row_tiles * column_tiles),)
    return (row_tiles, column_tiles)


def _tma_ready(tiles: GemmTiles, *ts: torch.Tensor) -> GemmTiles:
    """`tiles`, or a program per tile where TMA cannot load these tensors: TMA needs 16-byte aligned bases
    (a recording's buffers all are: runtime/buffers.py) and row strides."""
    unaligned = (t.stride(0) * t.element_size() % 16 or (t.device.type != "meta" and t.data_ptr() % 16)
                 for t in ts)
    if tiles.programs and any(unaligned):
        return dataclasses.replace(tiles, programs=0, num_stages=_PER_TILE.num_stages)
    return tiles


def gemm_spec(x: torch.Tensor, weight: torch.Tensor, y: torch.Tensor, columns: int | None = None) -> GemmSpec:
    """The spec of a launch on these tensors (checking what the kernel assumes of them), its tiles picked by
    x's rows and `columns` (default: W's rows)."""
    if x.dtype not in TILES or weight.dtype != x.dtype or y.dtype not in (x.dtype, torch.float32):
        raise ValueError(f"x and W must share one of {sorted(map(str, TILES))}, and y be in it or fp32")
    if x.shape[1] != weight.shape[1] or y.shape != (x.shape[0], weight.shape[0]):
        raise ValueError(f"shapes do not compose: x {tuple(x.shape)}, W {tuple(weight.shape)}, "
                         f"y {tuple(y.shape)}")
    if x.stride(1) != 1 or weight.stride(1) != 1 or y.stride(1) != 1:
        raise ValueError("x, W and y need a contiguous inner dim")
    return GemmSpec(dtype=x.dtype, n=weight.shape[0], k=weight.shape[1],
                    strides=(x.stride(0), weight.stride(0), y.stride(0)),
                    tiles=_tma_ready(tiles_for(x.dtype, x.shape[0], weight.shape[0] if columns is None
                                               else columns), x, weight),
                    out_dtype=None if y.dtype == x.dtype else y.dtype)


def linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
           dtype: torch.dtype | None = None) -> torch.Tensor:
    """y = x @ W^T, run eagerly (JIT on CUDA, interpreter on CPU). `out` defaults to a NaN-filled tensor of
    `dtype` (default x's)."""
    if out is None:
        out = torch.full((x.shape[0], weight.shape[0]), float("nan"), dtype=dtype or x.dtype, device=x.device)
    spec = gemm_spec(x, weight, out)
    if x.shape[0] > 0:
        rows = eager.row_count(len(x), x.device)
        eager.launch(spec.kernel(), spec.grid(x.shape[0]), x, weight, out, rows, device=x.device,
                     num_warps=spec.tiles.num_warps, num_stages=spec.tiles.num_stages, **spec.constexprs())
    return out


SILU_MUL_POINTERS = ("x_ptr", "wg_ptr", "wu_ptr", "y_ptr")


# The SwiGLU launch is PERSISTENT only above SILU_MUL_PERSISTENT_ROWS, and a program per tile below (128 x
# 128 tiles on 3 stages, as before it): in the replays its persistent form was slower or no faster at the
# ladder's middle buckets and faster only at the offline path's largest, while the single and grouped
# projections gained at all of them.
SILU_MUL_PERSISTENT_ROWS = 8192


def silu_mul_spec(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, y: torch.Tensor,
                  projections: torch.dtype | None = None) -> GemmSpec:
    """gemm_silu_mul_kernel's spec: gemm_kernel's for one projection (signature(SILU_MUL_POINTERS)), both
    weights alike, on at most 4 stages: a stage holds two weight tiles, and 6 (TILES' first rung) fill the
    shared memory with one program an SM, which was slower. `projections`: the dtype the product reads the
    two projections in (None: y's; fp32: the accumulators unrounded, fp32 activations).
    PERSISTENT above SILU_MUL_PERSISTENT_ROWS rows only."""
    spec = gemm_spec(x, w_gate, y)
    if w_up.shape != w_gate.shape or w_up.dtype != w_gate.dtype or w_up.stride() != w_gate.stride():
        raise ValueError(f"gate {tuple(w_gate.shape)} and up {tuple(w_up.shape)} weights differ")
    if y.dtype != x.dtype or projections not in (None, x.dtype, torch.float32):
        raise ValueError("the SwiGLU product is written in x's dtype, from projections in it or fp32")
    tiles = spec.tiles
    if tiles.programs and x.shape[0] <= SILU_MUL_PERSISTENT_ROWS:
        tiles = _PER_TILE
    return dataclasses.replace(spec, tiles=dataclasses.replace(tiles, num_stages=min(tiles.num_stages, 4)),
                               silu_round=(projections or x.dtype) == x.dtype)


def linear_silu_mul(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                    out: torch.Tensor | None = None, projections: torch.dtype | None = None) -> torch.Tensor:
    """silu(x @ Wg^T) * (x @ Wu^T) in one launch, run eagerly, the projections read in `projections`
    (silu_mul_spec). `out` defaults to a NaN-filled tensor."""
    if out is None:
        out = torch.full((x.shape[0], w_gate.shape[0]), float("nan"), dtype=x.dtype, device=x.device)
    spec = silu_mul_spec(x, w_gate, w_up, out, projections)
    if x.shape[0] > 0:
        rows = eager.row_count(len(x), x.device)
        eager.launch(spec.kernel(silu_mul=True), spec.grid(x.shape[0]), x, w_gate, w_up, out, rows,
                     device=x.device, num_warps=spec.tiles.num_warps, num_stages=spec.tiles.num_stages,
                     **spec.constexprs())
    return out


GROUP = 4  # the members gemm_group_kernel takes


@dataclass(frozen=True, slots=True)
class GemmGroupSpec:
    """gemm_group_kernel's specialization: its members' GemmSpecs (one x, one dtype, K and tiles)."""

    members: tuple[GemmSpec, ...]

    @property
    def tiles(self) -> GemmTiles:
        return self.members[0].tiles

    def signature(self) -> dict[str, str]:
        ptr, out = ("*" + DTYPE_NAMES[d] for d in (self.members[0].dtype, self.members[0].y_dtype))
        sig = {"x_ptr": ptr} | {f"{p}{i}_ptr": ptr if p == "w" else out
                                for i in range(GROUP) for p in ("w", "y")}
        sig |= {"rows_ptr": "*i32"}
        return sig | {name: "constexpr" for name in self.constexprs()}

    def constexprs(self) -> dict[str, int]:
        t, first = self.tiles, self.members[0]
        unused = dataclasses.replace(first, n=0, strides=(0, 0, 0))
        padded = self.members + (unused,) * (GROUP - len(self.members))
        return ({f"N{i}": m.n for i, m in enumerate(padded)} | {"K": first.k, "X_ST": first.strides[0]}
                | {f"W_ST{i}": m.strides[1] for i, m in enumerate(padded)}
                | {f"Y_ST{i}": m.strides[2] for i, m in enumerate(padded)}
                | {"BLOCK_M": t.block_m, "BLOCK_N": t.block_n, "BLOCK_K": t.block_k, "GROUP_M": t.group_m})

    def grid(self, m: int) -> tuple[int, ...]:
        t = self.tiles
        return _grid(t, triton.cdiv(m, t.block_m), sum(triton.cdiv(s.n, t.block_n) for s in self.members))

    def kernel(self) -> object:
        return gemm_group_tma_kernel if self.tiles.programs else gemm_group_kernel

    def args(self, x: object, weights: tuple, outs: tuple, rows: object) -> tuple:
        """The launch's arguments: x, then (W_i, y_i) per member (member 0's again for unused ones), the
        rows pointer."""
        pairs = [*zip(weights, outs, strict=True)] + [(weights[0], outs[0])] * (GROUP - len(weights))
        return (x, *(t for pair in pairs for t in pair), rows)


def gemm_group_spec(x: torch.Tensor, weights: tuple[torch.Tensor, ...], outs: tuple[torch.Tensor, ...]
                    ) -> GemmGroupSpec:
    if not 1 <= len(weights) <= GROUP or len(outs) != len(weights):
        raise ValueError(f"a group has 1 to {GROUP} members with one output each, not {len(weights)} weights "
                         f"and {len(outs)} outputs")
    columns = sum(w.shape[0] for w in weights)
    members = tuple(gemm_spec(x, w, y, columns) for w, y in zip(weights, outs, strict=True))
    if len({m.tiles for m in members}) > 1:  # some member's W cannot be loaded by TMA: none is (_tma_ready)
        per_tile = dataclasses.replace(members[0].tiles, programs=0, num_stages=_PER_TILE.num_stages)
        members = tuple(dataclasses.replace(m, tiles=per_tile) for m in members)
    if len({w.dtype for w in weights}) != 1 or len({y.dtype for y in outs}) != 1:
        raise ValueError("a group's weights share one dtype, and its outputs one")
    return GemmGroupSpec(members)


def linear_group(x: torch.Tensor, weights: tuple[torch.Tensor, ...],
                 outs: tuple[torch.Tensor, ...] | None = None, dtype: torch.dtype | None = None
                 ) -> tuple[torch.Tensor, ...]:
    """y_i = x @ W_i^T in one launch, run eagerly. `outs` default to NaN-filled tensors of `dtype` (default
    x's)."""
    if outs is None:
        outs = tuple(torch.full((x.shape[0], w.shape[0]), float("nan"), dtype=dtype or x.dtype,
                                device=x.device) for w in weights)
    spec = gemm_group_spec(x, weights, outs)
    if x.shape[0] > 0:
        rows = eager.row_count(len(x), x.device)
        eager.launch(spec.kernel(), spec.grid(x.shape[0]), *spec.args(x, weights, outs, rows),
                     device=x.device, num_warps=spec.tiles.num_warps, num_stages=spec.tiles.num_stages,
                     **spec.constexprs())
    return outs
