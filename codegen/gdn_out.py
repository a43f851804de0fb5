"""The forked Gated DeltaNet's output kernel: out = qe S + attn v_new for every chunk slot, independently.

Consumes the ChunkWork after every level's state walk and the chunks and items tables of runtime/tables.py;
produces out [T, Hv, Dv] in v's dtype at each item's own rows. With NORM (passes/fuse_gdn_norm.py) the output
is normed by the layer's gated RMS norm with z [T, Hv, Dv] and its weight, through codegen/pointwise.py's
sum_squares and gated_norm, bit for bit as the norm's own kernel computes it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from flidec.codegen.gdn_common import _chunk_of, _mul, _parts
from flidec.codegen.pointwise import gated_norm, sum_squares


@triton.jit
def _out_block(qe_ptr, attn_ptr, u_ptr, states_ptr, at, offs_c, offs_k, offs_v, DK: tl.constexpr,
               DV: tl.constexpr, CHUNK: tl.constexpr, DOT_OUT: tl.constexpr):
    """One chunk's outputs qe S + attn v_new [CHUNK, len(offs_v)] at value columns offs_v, fp32."""
    SPLIT: tl.constexpr = DOT_OUT == "bf16x3"  # split by hand, as the prep's products are
    a_h, a_l = _parts(tl.load(qe_ptr + at * (CHUNK * DK) + offs_c[:, None] * DK + offs_k[None, :]), SPLIT)
    b_h, b_l = _parts(tl.load(states_ptr + at * (DK * DV) + offs_k[:, None] * DV + offs_v[None, :]), SPLIT)
    o = _mul(a_h, a_l, b_h, b_l, None, DOT_OUT, SPLIT)
    attn = tl.load(attn_ptr + at * (CHUNK * CHUNK) + offs_c[:, None] * CHUNK + offs_c[None, :])
    a_h, a_l = _parts(attn, SPLIT)
    b_h, b_l = _parts(tl.load(u_ptr + at * (CHUNK * DV) + offs_c[:, None] * DV + offs_v[None, :]), SPLIT)
    return _mul(a_h, a_l, b_h, b_l, o, DOT_OUT, SPLIT)


@triton.jit
def gdn_out_kernel(
    qe_ptr, attn_ptr, u_ptr, states_ptr,  # ChunkWork parts after every level's state walk (u holds v_new)
    out_ptr,
    items_ptr,  # int32 [items, NUM_FIELDS] (runtime/tables.py)
    chunks_ptr,  # int32 [chunks, 2]: (item, chunk of the item) per chunk slot; item -1: nothing to do
    z_ptr, norm_w_ptr,  # with NORM: the gated norm's z [T, Hv, Dv] and weight [Dv]
    eps,  # fp32: the gated norm's epsilon (read only with NORM)
    O_ST: tl.constexpr, O_SH: tl.constexpr,  # out's row and head strides, in elements
    Z_ST: tl.constexpr, Z_SH: tl.constexpr,  # z's
    HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BLOCK_O: tl.constexpr, CHUNK: tl.constexpr,
    NUM_FIELDS: tl.constexpr, F_ROW0: tl.constexpr, F_LENGTH: tl.constexpr, F_TAIL: tl.constexpr,
    DOT_OUT: tl.constexpr,
    NORM: tl.constexpr,  # out = gated_rms_norm(o, z, norm_w, eps) instead of o
    F32_O: tl.constexpr,  # fp32 q, k, v: o is fp32 as the unfused kernel would store it, not out's dtype
):
    """One chunk's outputs for one value head and BLOCK_O value columns: out = qe S + attn v_new, at the
    item's own rows (tail rows are the ancestors': they wrote them themselves). With NORM, one program
    computes all Dv columns of its head (one or two blocks of BLOCK_O), rounds o to the dtype it is stored in
    without NORM (q's: out's, or fp32 with F32_O), and writes Qwen3_5RMSNormGated(o) * silu(z) computed as
    gated_rms_norm_kernel does (pointwise.sum_squares over the blocks, then pointwise.gated_norm): the same
    bits as the two launches."""
    BLOCKS: tl.constexpr = DV // BLOCK_O
    slot = tl.program_id(1)
    if NORM:
        tl.static_assert(BLOCKS <= 2)
        hv = tl.program_id(0)
        block = 0
    else:
        hv = tl.program_id(0) // BLOCKS
        block = tl.program_id(0) % BLOCKS
    item = tl.load(chunks_ptr + slot * 2)
    if item < 0:
        return
    c, row0, n_tail, total = _chunk_of(chunks_ptr, items_ptr, slot, item, NUM_FIELDS, F_ROW0, F_LENGTH,
                                       F_TAIL)

    offs_c = tl.arange(0, CHUNK)
    offs_k = tl.arange(0, DK)
    offs_v = block * BLOCK_O + tl.arange(0, BLOCK_O)
    at = slot.to(tl.int64) * HV + hv
    o = _out_block(qe_ptr, attn_ptr, u_ptr, states_ptr, at, offs_c, offs_k, offs_v, DK, DV, CHUNK, DOT_OUT)
    pos = c * CHUNK + offs_c
    own = (pos < total) & (pos >= n_tail)
    row = (row0 + pos - n_tail).to(tl.int64)
    out_at = out_ptr + row[:, None] * O_ST + hv * O_SH
    dtype: tl.constexpr = out_ptr.dtype.element_ty
    o_dtype: tl.constexpr = tl.float32 if F32_O else dtype  # what the unfused kernel would store o in
    if NORM:
        z_at = z_ptr + row[:, None] * Z_ST + hv * Z_SH
        o = o.to(o_dtype).to(tl.float32)  # the values the unfused kernel stores and the norm loads
        if BLOCKS == 1:
            ss = sum_squares(o, BLOCK_O)
        else:  # the second block's o before either is written: the norm needs every column's square
            offs_v1 = BLOCK_O + offs_v
            o1 = _out_block(qe_ptr, attn_ptr, u_ptr, states_ptr, at, offs_c, offs_k, offs_v1, DK, DV, CHUNK,
                            DOT_OUT).to(o_dtype).to(tl.float32)
            ss = sum_squares(o, BLOCK_O) + sum_squares(o1, BLOCK_O)
            z = tl.load(z_at + offs_v1[None, :], mask=own[:, None], other=0.0).to(tl.float32)
            w = tl.load(norm_w_ptr + offs_v1).to(tl.float32)
            tl.store(out_at + offs_v1[None, :], gated_norm(o1, ss, z, w, eps, DV, o_dtype).to(dtype),
                     mask=own[:, None])
        z = tl.load(z_at + offs_v[None, :], mask=own[:, None], other=0.0).to(tl.float32)
        w = tl.load(norm_w_ptr + offs_v).to(tl.float32)
        o = gated_norm(o, ss, z, w, eps, DV, o_dtype)
    tl.store(out_at + offs_v[None, :], o.to(dtype), mask=own[:, None])
