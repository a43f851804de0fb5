"""Fork attention: causal GQA attention over each query's path in a packed stream, one Triton kernel.

Consumes q [T, Hq, D], k/v [T, Hkv, D] (rows of the stream, head dim contiguous), an optional output gate
[T, Hq, D], and two tables from codegen/tables.py (query tiles, path levels); produces out [T, Hq, D] in
q's dtype (out * sigmoid(gate) when gated), written only at segment rows.
One program per (q head, query tile). A query tile is block_m consecutive logical positions of one
segment, aligned to multiples of block_m; it walks its path's keys in tiles of block_n logical positions
aligned to multiples of block_n, mapping each key position to its stream row through the path levels (a key
tile may straddle a fork point), with an online softmax in fp32.
Relies on (E3): every quantity a query's result depends on is a function of its path and its logical
position alone (its row inside the query tile, the key tiles it walks, the column of each key inside them),
so a forked stream and the plain single-sequence stream of the same path give identical bits, provided the
tile choices (TILES) are the same in every bucket.
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
    256: AttentionTiles(block_m=64, block_n=64, num_warps=4, num_stages=2),
}
# Head dim 256 measured on the H200 (benchmarks/attention_tiles.py, 2026-11-29, 8 query and 2 kv heads, a
# 5,000-token state with 9 branches): 0.63 ms at 4 warps, 0.81 at 8; 3 stages 0.74 (8 warps); 32-key tiles
# 1.07; 128-query tiles with 32-key tiles and 1 stage 0.71 (64-key tiles at 128 queries: out of shared memory).

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_OPERANDS = ("Q", "K", "V", "G", "O")


@triton.jit
def _key_tile(q, m_i, l_i, acc, j, k_ptr, v_ptr, levels_ptr, seg, kv_head, qpos, key_end, qk_scale,
              K_ST: tl.constexpr, K_SH: tl.constexpr, V_ST: tl.constexpr, V_SH: tl.constexpr,
              HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, DEPTH: tl.constexpr, MASKED: tl.constexpr):
    """One key tile of the online softmax. MASKED: the tile may hold keys past a query (causal) or past the
    tile's own keys; without it every key precedes every query row, and the mask would keep them all: the
    same bits, without the compare and select."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kpos = j * BLOCK_N + offs_n
    # Stream row of each key position: the deepest path level that starts at or before it.
    krow = tl.zeros([BLOCK_N], tl.int32)
    for d in tl.static_range(DEPTH):
        start = tl.load(levels_ptr + (seg * DEPTH + d) * 2)
        pos0 = tl.load(levels_ptr + (seg * DEPTH + d) * 2 + 1)
        krow = tl.where(kpos >= pos0, start + kpos - pos0, krow)
    krow64 = krow.to(tl.int64)
    k_off = krow64[:, None] * K_ST + kv_head * K_SH + offs_d[None, :]
    v_off = krow64[:, None] * V_ST + kv_head * V_SH + offs_d[None, :]
    if MASKED:
        kvalid = kpos < key_end
        k = tl.load(k_ptr + k_off, mask=kvalid[:, None], other=0.0)
        v = tl.load(v_ptr + v_off, mask=kvalid[:, None], other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision="ieee")
        causal = (kpos[None, :] <= qpos[:, None]) & kvalid[None, :]
        s = tl.where(causal, qk * qk_scale, float("-inf"))
    else:
        k = tl.load(k_ptr + k_off)
        v = tl.load(v_ptr + v_off)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision="ieee")
    return m_new, l_i, acc


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
    base = qpos0 - qpos0 % BLOCK_M
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    qpos = base + offs_m
    qvalid = (qpos >= qpos0) & (qpos < key_end)
    qrow = (row0 + qpos - qpos0).to(tl.int64)
    q = tl.load(q_ptr + qrow[:, None] * Q_ST + head * Q_SH + offs_d[None, :], mask=qvalid[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # exp(x) = exp2(x * log2(e))
    # The same key tiles for a query whatever its tile's count: up to the tile's aligned end. Key tiles wholly
    # before `base` precede every row of the tile and are the tile's own keys (key_end > qpos0 >= base): no
    # mask.
    num_key_tiles = tl.cdiv(base + BLOCK_M, BLOCK_N)
    num_open = base // BLOCK_N
    for j in range(num_open):
        m_i, l_i, acc = _key_tile(q, m_i, l_i, acc, j, k_ptr, v_ptr, levels_ptr, seg, kv_head, qpos, key_end,
                                  qk_scale, K_ST, K_SH, V_ST, V_SH, HEAD_DIM, BLOCK_N, DEPTH, False)
    for j in range(num_open, num_key_tiles):
        m_i, l_i, acc = _key_tile(q, m_i, l_i, acc, j, k_ptr, v_ptr, levels_ptr, seg, kv_head, qpos, key_end,
                                  qk_scale, K_ST, K_SH, V_ST, V_SH, HEAD_DIM, BLOCK_N, DEPTH, True)

    # l_i > 0 at every row of the tile's own (each walks at least its own key); other rows store nothing
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    if HAS_GATE:
        g = tl.load(gate_ptr + qrow[:, None] * G_ST + head * G_SH + offs_d[None, :], mask=qvalid[:, None],
                    other=0.0).to(tl.float32)
        out = out / (1.0 + tl.exp(-g))
    tl.store(out_ptr + qrow[:, None] * O_ST + head * O_SH + offs_d[None, :], out.to(out_ptr.dtype.element_ty),
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
        ptr = "*" + _DTYPES[self.dtype]
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
    eager.launch(fork_attention_kernel, spec.grid(tiles.shape[0]), q, k, v, out if gate is None else gate, out,
                 tiles, levels, scale, device=q.device, num_warps=spec.tiles.num_warps,
                 num_stages=spec.tiles.num_stages, **spec.constexprs())
    return out
