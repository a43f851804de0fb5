"""Fork attention: causal GQA attention over each query's path in a packed stream, one Triton kernel.

Consumes q [T, Hq, D], k/v [T, Hkv, D] (rows of the stream, head dim contiguous), an optional output gate
[T, Hq, D] and two tables of runtime/tables.py (query tiles, path levels); produces out [T, Hq, D] in q's
dtype (out * sigmoid(gate) when gated), written only at segment rows. One program per (q head, query tile):
block_m aligned logical positions of one segment walk their path's keys in aligned tiles of block_n, each
key position mapped to its stream row through the path levels, with an online softmax in fp32. Relies on
E3: all a query's result depends on is a function of its path and logical position, so a forked stream
and the plain stream of the same path give identical bits with the same TILES in every bucket.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from flidec.codegen import eager
from flidec.runtime import tables
from flidec.runtime.meta import StreamMeta
from flidec.runtime.recording import DTYPE_NAMES

# Key tiles before the query tile are walked level by level of the path: a tile wholly inside one level is
# read from one scalar row pointer plus constant offsets (consecutive rows), a tile holding a fork point is
# gathered key by key; the way a tile is read changes its addresses, never its bits. The softmax uses exp2
# with the scale folded into its argument.


@dataclass(frozen=True, slots=True)
class AttentionTiles:
    block_m: int  # queries per tile, aligned to logical positions
    block_n: int  # keys per tile, aligned to logical positions: fixes the softmax's reduction order
    num_warps: int
    num_stages: int


# One tile choice per head dim, shared by every bucket (E3). block_n = 64 matches the reference's key tiles.
TILES: dict[int, AttentionTiles] = {
    32: AttentionTiles(block_m=64, block_n=64, num_warps=4, num_stages=2),
    64: AttentionTiles(block_m=64, block_n=64, num_warps=4, num_stages=2),
    128: AttentionTiles(block_m=64, block_n=64, num_warps=4, num_stages=2),
    256: AttentionTiles(block_m=128, block_n=64, num_warps=8, num_stages=2),
}
# Head dim 256 (benchmarks/attention_tiles.py times the choices, attention_spills.py counts registers and
# spills): 128-query tiles on 8 warps were the fastest on long states, where attention's time is, and a
# little slower on a short question alone; smaller key tiles, more stages, or 4 warps at 128 queries were
# slower. Reading the key tiles before the query tile as runs (one row pointer a tile) cut the key loop's
# instructions and local memory traffic. Fork == plain in every variant tried.

_OPERANDS = ("Q", "K", "V", "G", "O")


@triton.jit
def _softmax_step(qk, m_i, l_i, acc, v, qk_scale):
    """Folds one key tile's scores qk (unscaled, -inf where masked) and values v into the online softmax.
    qk_scale = sm_scale * log2(e): m is kept in exp2 units and the scale is folded into the exp2 argument
    (one FFMA a score). Every multiply that feeds an add is an explicit fma, so each copy of this step (run
    and gathered tiles) rounds the same way whatever ptxas contracts: a tile gives the same bits either
    way."""
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(tl.fma(qk, qk_scale, -m_new[:, None]))
    l_i = tl.fma(l_i, alpha, tl.sum(p, 1))
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision="ieee")
    return m_new, l_i, acc


@triton.jit
def _run_tile(q, m_i, l_i, acc, k_tile, v_tile, k_offs, v_offs, qk_scale):
    """A key tile whose keys are consecutive stream rows (inside one path level, all before every query of
    the tile): scalar tile pointers plus the loop-invariant offsets of a tile's elements, so no per-key row
    lookup and one 64-bit add an address (the offsets stay in registers: ptxas does not fold them into the
    cp.async immediates, Triton's index math joins their parts with `or`)."""
    k = tl.load(k_tile + k_offs)
    v = tl.load(v_tile + v_offs)
    qk = tl.dot(q, tl.trans(k), input_precision="ieee")
    return _softmax_step(qk, m_i, l_i, acc, v, qk_scale)


@triton.jit
def _gather_tile(q, m_i, l_i, acc, j, k_head, v_head, levels_ptr, seg, qpos, key_end, qk_scale,
                 K_ST: tl.constexpr, V_ST: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                 DEPTH: tl.constexpr, MASKED: tl.constexpr):
    """A key tile mapped key by key to stream rows through the path levels: one that straddles a fork point,
    or (MASKED) one that may hold keys past a query (causal) or past the tile's own keys. Without MASKED
    every key precedes every query row, and the mask would keep them all: the same bits, without it."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kpos = j * BLOCK_N + offs_n
    # Stream row of each key position: the deepest path level that starts at or before it.
    krow = tl.zeros([BLOCK_N], tl.int32)
    for d in tl.static_range(DEPTH):
        start = tl.load(levels_ptr + (seg * DEPTH + d) * 2)
        pos0 = tl.load(levels_ptr + (seg * DEPTH + d) * 2 + 1)
        krow = tl.where(kpos >= pos0, kpos + (start - pos0), krow)
    krow64 = krow.to(tl.int64)
    k_ptrs = k_head + krow64[:, None] * K_ST + offs_d[None, :]
    v_ptrs = v_head + krow64[:, None] * V_ST + offs_d[None, :]
    if MASKED:
        kvalid = kpos < key_end
        k = tl.load(k_ptrs, mask=kvalid[:, None], other=0.0)
        v = tl.load(v_ptrs, mask=kvalid[:, None], other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee")
        qk = tl.where((kpos[None, :] <= qpos[:, None]) & kvalid[None, :], qk, float("-inf"))
    else:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee")
    return _softmax_step(qk, m_i, l_i, acc, v, qk_scale)


@triton.jit
def fork_attention_kernel(
    q_ptr, k_ptr, v_ptr, gate_ptr, out_ptr,
    tiles_ptr,  # int32 [num_tiles, 4]: segment, first row, first logical position, count
    levels_ptr,  # int32 [S, DEPTH, 2]: (start row, pos0) of each segment on the path, root first
    sm_scale,  # fp32
    Q_ST: tl.constexpr, Q_SH: tl.constexpr, K_ST: tl.constexpr, K_SH: tl.constexpr,
    V_ST: tl.constexpr, V_SH: tl.constexpr, G_ST: tl.constexpr, G_SH: tl.constexpr,
    O_ST: tl.constexpr, O_SH: tl.constexpr,  # row and head strides, in elements
    GROUP: tl.constexpr,  # q heads per kv head
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DEPTH: tl.constexpr,
    HAS_GATE: tl.constexpr,
):
    head = tl.program_id(0)
    tile = tl.program_id(1)
    kv_head = head // GROUP
    seg = tl.load(tiles_ptr + tile * 4)
    row0 = tl.load(tiles_ptr + tile * 4 + 1)
    qpos0 = tl.load(tiles_ptr + tile * 4 + 2)
    count = tl.load(tiles_ptr + tile * 4 + 3)
    if count == 0:  # a padding tile: a bucket's grid holds a small stream's few tiles and many of these
        return
    key_end = qpos0 + count  # keys at or past it are past every query of the tile

    # The tile's rows are the aligned positions [base, base + BLOCK_M); only [qpos0, key_end) are its own.
    # Rows are addressed from the tile's scalar first-row pointer plus int32 offsets (|row - row0| < BLOCK_M).
    base = qpos0 - qpos0 % BLOCK_M
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    qpos = base + offs_m
    q_rows = tl.where((qpos >= qpos0) & (qpos < key_end), qpos - qpos0, 0)  # the fill keeps offsets in range
    q_tile = q_ptr + row0.to(tl.int64) * Q_ST + head * Q_SH
    q = tl.load(q_tile + q_rows[:, None] * Q_ST + offs_d[None, :],
                mask=((qpos >= qpos0) & (qpos < key_end))[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # exp(x) = exp2(x * log2(e))
    k_head = k_ptr + kv_head * K_SH
    v_head = v_ptr + kv_head * V_SH
    k_offs = offs_n[:, None].to(tl.int64) * K_ST + offs_d[None, :]
    v_offs = offs_n[:, None].to(tl.int64) * V_ST + offs_d[None, :]
    # The same key tiles for a query whatever its tile's count: up to the tile's aligned end, in order. Key
    # tiles wholly before `base` ("open": j < num_open) precede every row of the tile and are the tile's own
    # keys (key_end > qpos0 >= base): no mask. They are walked level by level of the path: a tile holding a
    # fork point (level d's first position lo not on a tile boundary) is gathered key by key, and the run of
    # tiles wholly inside level d after it reads consecutive rows from a scalar pointer. Which way a tile is
    # read changes addresses only, never its bits.
    num_key_tiles = tl.cdiv(base + BLOCK_M, BLOCK_N)
    num_open = base // BLOCK_N
    jt = num_open * 0  # the next key tile to walk (a runtime i32 like num_open: the loops carry it)
    for d in range(DEPTH):
        lv = levels_ptr + (seg * DEPTH + d) * 2
        start = tl.load(lv)
        lo = tl.load(lv + 1)  # 2**31 - 1 on padding levels: no tiles
        hi = tl.load(lv + 3, mask=d + 1 < DEPTH, other=2147483647)  # the next level's first position
        js = lo // BLOCK_N
        if (lo % BLOCK_N != 0) & (js >= jt) & (js < num_open):
            m_i, l_i, acc = _gather_tile(q, m_i, l_i, acc, js, k_head, v_head, levels_ptr, seg, qpos, key_end,
                                         qk_scale, K_ST, V_ST, HEAD_DIM, BLOCK_N, DEPTH, False)
            jt = js + 1
        j_end = tl.minimum(hi // BLOCK_N, num_open)
        for j in range(jt, j_end):
            row = (start - lo + j * BLOCK_N).to(tl.int64)  # stream row of the tile's first key
            m_i, l_i, acc = _run_tile(q, m_i, l_i, acc, k_head + row * K_ST, v_head + row * V_ST, k_offs,
                                      v_offs, qk_scale)
        jt = tl.maximum(jt, j_end)
    for j in range(num_open, num_key_tiles):
        m_i, l_i, acc = _gather_tile(q, m_i, l_i, acc, j, k_head, v_head, levels_ptr, seg, qpos, key_end,
                                     qk_scale, K_ST, V_ST, HEAD_DIM, BLOCK_N, DEPTH, True)

    # l_i > 0 at every row of the tile's own (each walks at least its own key); other rows store nothing
    out = acc * (1.0 / tl.where(l_i > 0.0, l_i, 1.0))[:, None]  # a division a row, not an element
    # The output's rows from the tile's fields read again: nothing of the query rows' addressing stays live
    # (in registers or spilled) across the key loops.
    row0 = tl.load(tiles_ptr + tile * 4 + 1)
    qpos0 = tl.load(tiles_ptr + tile * 4 + 2)
    key_end = qpos0 + tl.load(tiles_ptr + tile * 4 + 3)
    qpos = qpos0 - qpos0 % BLOCK_M + offs_m
    qvalid = (qpos >= qpos0) & (qpos < key_end)
    q_rows = tl.where(qvalid, qpos - qpos0, 0)
    if HAS_GATE:
        g_tile = gate_ptr + row0.to(tl.int64) * G_ST + head * G_SH
        g = tl.load(g_tile + q_rows[:, None] * G_ST + offs_d[None, :], mask=qvalid[:, None], other=0.0)
        out = out / (1.0 + tl.exp2(g.to(tl.float32) * -1.4426950408889634))  # sigmoid: 1 / (1 + e^-g)
    o_tile = out_ptr + row0.to(tl.int64) * O_ST + head * O_SH
    tl.store(o_tile + q_rows[:, None] * O_ST + offs_d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=qvalid[:, None])


@dataclass(frozen=True, slots=True)
class AttentionSpec:
    """Everything a fork attention kernel is specialized on: one compiled kernel per spec."""

    dtype: torch.dtype
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    depth: int  # path levels in the table (the bucket's deepest path)
    has_gate: bool
    strides: tuple[tuple[int, int], ...]  # (row, head) strides in elements of q, k, v, gate, out

    @property
    def tiles(self) -> AttentionTiles:
        return TILES[self.head_dim]

    def signature(self) -> dict[str, str]:
        ptr = "*" + DTYPE_NAMES[self.dtype]
        sig = {name: ptr for name in ("q_ptr", "k_ptr", "v_ptr", "gate_ptr", "out_ptr")}
        sig |= {"tiles_ptr": "*i32", "levels_ptr": "*i32", "sm_scale": "fp32"}
        return sig | {name: "constexpr" for name in self.constexprs()}

    def constexprs(self) -> dict[str, int | bool]:
        consts: dict[str, int | bool] = {}
        for op, (st, sh) in zip(_OPERANDS, self.strides, strict=True):
            consts[f"{op}_ST"], consts[f"{op}_SH"] = st, sh
        return consts | {
            "GROUP": self.num_q_heads // self.num_kv_heads,
            "HEAD_DIM": self.head_dim,
            "BLOCK_M": self.tiles.block_m,
            "BLOCK_N": self.tiles.block_n,
            "DEPTH": self.depth,
            "HAS_GATE": self.has_gate,
        }

    def grid(self, num_tiles: int) -> tuple[int, int]:
        # heads first: blocks are dispatched first axis fastest, so the live tiles (they come first) start
        # in the first wave and a bucket's padding tiles return while they run
        return (self.num_q_heads, num_tiles)


def attention_spec(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: torch.Tensor | None,
                   out: torch.Tensor, depth: int) -> AttentionSpec:
    """The spec of a launch on these tensors (checking what the kernel assumes of them)."""
    hq, d = q.shape[1], q.shape[2]
    hkv = k.shape[1]
    if d not in TILES:
        raise ValueError(f"head dim {d} has no tile choice (supported: {sorted(TILES)})")
    if hq % hkv or v.shape[1] != hkv:
        raise ValueError(f"{hq} q heads cannot share {hkv} kv heads")
    operands = (q, k, v, q if gate is None else gate, out)
    for t in operands:
        if t.dtype != q.dtype or t.stride(2) != 1 or t.shape[2] != d:
            raise ValueError("q, k, v, gate and out must share a dtype and a contiguous head dim")
    return AttentionSpec(dtype=q.dtype, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, depth=depth,
                         has_gate=gate is not None,
                         strides=tuple((t.stride(0), t.stride(1)) for t in operands))


def fork_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: StreamMeta,
                   gate: torch.Tensor | None = None, sm_scale: float | None = None,
                   out: torch.Tensor | None = None, num_tiles: int | None = None, depth: int | None = None,
                   num_segments: int | None = None) -> torch.Tensor:
    """Run the kernel eagerly (JIT on CUDA, interpreter on CPU), with the tables padded to a bucket's sizes
    when given. `out` defaults to a NaN-filled tensor, so rows the kernel does not write stay NaN."""
    if out is None:
        out = torch.full_like(q, float("nan"), memory_format=torch.contiguous_format)
    levels = tables.path_levels(meta, depth, num_segments).to(q.device)
    spec = attention_spec(q, k, v, gate, out, levels.shape[1])
    tiles = tables.query_tiles(meta, spec.tiles.block_m, num_tiles).to(q.device)
    scale = 1.0 / math.sqrt(spec.head_dim) if sm_scale is None else sm_scale
    eager.launch(fork_attention_kernel, spec.grid(tiles.shape[0]), q, k, v, out if gate is None else gate,
                 out, tiles, levels, scale, device=q.device, num_warps=spec.tiles.num_warps,
                 num_stages=spec.tiles.num_stages, **spec.constexprs())
    return out
