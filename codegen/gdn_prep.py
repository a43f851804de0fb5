"""The forked Gated DeltaNet's prep kernel: all of a chunk that does not depend on the state entering it.

Consumes q/k [T, Hk, Dk], v [T, Hv, Dv] (the model dtype or fp32), the log-decay g and write strength beta [T,
Hv] (fp32; or, with the gate fused, the raw projections a and b plus A_log and dt_bias) and the items, tails
and chunks tables of runtime/tables.py; produces per (chunk slot, value head) the ChunkWork of codegen/gdn.py:
L2-normed, decayed q and k (qe, ke), the masked in-chunk attention, the chunk's total decay and, from the unit
lower triangular WY system inverted blockwise, w and u (w and ke as bf16 hi and lo planes with bf16x3 tiles).
One launch covers every chunk of every tree level, one program per (value head, chunk slot). Relies on
codegen/gdn_common.py for the bf16x3 products and on absolute chunk boundaries (E3).
"""

from __future__ import annotations

import triton
import triton.language as tl

from flidec.codegen.gdn_common import _chunk_of, _mul, _parts, _split


@triton.jit
def _unit_lower_inverse(a, CHUNK: tl.constexpr, BLOCK: tl.constexpr, DOT: tl.constexpr, SPLIT: tl.constexpr):
    """(I + a)^-1 of a strictly lower triangular [CHUNK, CHUNK] a, through BLOCK x BLOCK diagonal blocks,
    returned as _parts.

    With a = a_d + l (a_d its diagonal blocks, l the rest): I + a = (I + a_d)(I + d l) for d = (I + a_d)^-1.
    a_d is nilpotent of order BLOCK = 16, so d = (I - a_d)(I + a_d^2)(I + a_d^4)(I + a_d^8): 6 products
    whose longest chain is 4, where forward substitution takes 15 dependent steps. n = d l is nilpotent of
    order CHUNK / BLOCK = 4, so (I + a)^-1 = (I - n)(I + n^2) d. Every factor is lower triangular with exact
    zeros above its diagonal, so row i depends on rows at or before i only. In fp32 the products' relative
    error stays near 1e-5 for nearly parallel keys (against 1e-7 for substitution); the model's bf16
    activations round at 4e-3. With SPLIT each factor is split into bf16 parts once, however many products
    use it: Triton's bf16x3 splits both operands of every product and adds a compare and a select an element
    to each split (the prep's FSETP and FSEL went 1,117 -> 251 in sm_90 SASS without them).
    """
    tl.static_assert(CHUNK == 4 * BLOCK)
    tl.static_assert(BLOCK == 16)
    offs = tl.arange(0, CHUNK)
    rows, cols = offs[:, None], offs[None, :]
    same_block = rows // BLOCK == cols // BLOCK
    eye = tl.where(rows == cols, 1.0, 0.0)
    a_d = tl.where(same_block, a, 0.0)
    ad_h, ad_l = _parts(a_d, SPLIT)
    a2 = _mul(ad_h, ad_l, ad_h, ad_l, None, DOT, SPLIT)
    a2_h, a2_l = _parts(a2, SPLIT)
    a4 = _mul(a2_h, a2_l, a2_h, a2_l, None, DOT, SPLIT)
    a4_h, a4_l = _parts(a4, SPLIT)
    x_h, x_l = _parts(eye - a_d, SPLIT)
    y_h, y_l = _parts(eye + a2, SPLIT)
    d = _mul(x_h, x_l, y_h, y_l, None, DOT, SPLIT)
    x_h, x_l = _parts(d, SPLIT)
    y_h, y_l = _parts(eye + a4, SPLIT)
    d = _mul(x_h, x_l, y_h, y_l, None, DOT, SPLIT)
    x_h, x_l = _parts(d, SPLIT)
    y_h, y_l = _parts(eye + _mul(a4_h, a4_l, a4_h, a4_l, None, DOT, SPLIT), SPLIT)
    d = _mul(x_h, x_l, y_h, y_l, None, DOT, SPLIT)
    d_h, d_l = _parts(d, SPLIT)
    y_h, y_l = _parts(tl.where(same_block, 0.0, a), SPLIT)
    n = _mul(d_h, d_l, y_h, y_l, None, DOT, SPLIT)
    n_h, n_l = _parts(n, SPLIT)
    x_h, x_l = _parts(eye - n, SPLIT)
    y_h, y_l = _parts(eye + _mul(n_h, n_l, n_h, n_l, None, DOT, SPLIT), SPLIT)
    x_h, x_l = _parts(_mul(x_h, x_l, y_h, y_l, None, DOT, SPLIT), SPLIT)
    return _parts(_mul(x_h, x_l, d_h, d_l, None, DOT, SPLIT), SPLIT)


@triton.jit
def _store_planes(at, x, PLANE: tl.constexpr, SPLIT: tl.constexpr):
    """x at `at`: as is, or with SPLIT its bf16 hi there and its lo a PLANE further (_split)."""
    if SPLIT:
        hi, lo = _split(x)
        tl.store(at, hi)
        tl.store(at + PLANE, lo)
    else:
        tl.store(at, x)


@triton.jit
def gdn_prep_kernel(
    q_ptr, k_ptr, v_ptr,
    g_ptr, beta_ptr,  # fp32 g and beta [T, Hv]; with FUSED_GATE the raw projections a and b
    a_log_ptr, dt_bias_ptr,  # [Hv], read only with FUSED_GATE
    items_ptr,  # int32 [items, NUM_FIELDS] (runtime/tables.py)
    tails_ptr,  # int32 [items, CHUNK]
    chunks_ptr,  # int32 [chunks, 2]: (item, chunk of the item) per chunk slot; item -1: nothing to do
    w_ptr, u_ptr, qe_ptr, ke_ptr, attn_ptr, decay_ptr,  # per (chunk slot, value head): see below
    scale,  # fp32: q's scale after its L2 norm
    Q_ST: tl.constexpr, Q_SH: tl.constexpr, K_ST: tl.constexpr, K_SH: tl.constexpr,
    V_ST: tl.constexpr, V_SH: tl.constexpr, G_ST: tl.constexpr, B_ST: tl.constexpr,
    HV: tl.constexpr, GROUP: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, CHUNK: tl.constexpr,
    NUM_FIELDS: tl.constexpr, F_ROW0: tl.constexpr, F_LENGTH: tl.constexpr, F_TAIL: tl.constexpr,
    FUSED_GATE: tl.constexpr, EPS: tl.constexpr,
    DOT: tl.constexpr,  # tl.dot input precision of the fp32 products (GdnTiles.dot)
    SPLIT: tl.constexpr,  # w and ke as bf16 hi and lo planes (GdnSpec.split), else fp32
    SPLIT_QK: tl.constexpr,  # fp32 q and k under SPLIT: their products as bf16x3 of split copies
):
    """Everything of one chunk that does not depend on the state entering it, for one value head: with
    cum the in-chunk cumulative log-decay, w = T (beta k e^cum) and u = T (beta v) (T the inverse of the unit
    lower triangular WY system), qe = q e^cum, ke = k e^(cum_last - cum), attn = (q k^T) * e^(cum_i - cum_j)
    masked to j <= i, and decay = e^cum_last. All fp32 but w and ke with SPLIT: [2, CHUNK, Dk] bf16 each,
    the hi plane then the lo plane."""
    hv = tl.program_id(0)
    slot = tl.program_id(1)
    hk = hv // GROUP
    item = tl.load(chunks_ptr + slot * 2)
    if item < 0:
        return
    c, row0, n_tail, total = _chunk_of(chunks_ptr, items_ptr, slot, item, NUM_FIELDS, F_ROW0, F_LENGTH,
                                       F_TAIL)

    offs_c = tl.arange(0, CHUNK)
    offs_k = tl.arange(0, DK)
    later = offs_c[:, None] < offs_c[None, :]  # (i, j) with j after i: exact zeros in every product
    pos = c * CHUNK + offs_c  # relative to the aligned chunk start
    in_tail = pos < n_tail
    tail_row = tl.load(tails_ptr + item * CHUNK + pos, mask=in_tail, other=0)
    row = tl.where(in_tail, tail_row, row0 + pos - n_tail).to(tl.int64)
    valid = pos < total
    g = tl.load(g_ptr + row * G_ST + hv, mask=valid, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + row * B_ST + hv, mask=valid, other=0.0).to(tl.float32)
    if FUSED_GATE:
        neg_a = -tl.exp(tl.load(a_log_ptr + hv).to(tl.float32))
        dt_bias = tl.load(dt_bias_ptr + hv).to(tl.float32)
        x = g + dt_bias
        # softplus with torch's threshold 20; below -15, log(1 + e^x) rounds 1 + e^x and e^x is closer
        e_x = tl.exp(tl.minimum(x, 20.0))
        softplus = tl.where(x > 20.0, x, tl.where(x < -15.0, e_x, tl.log(1.0 + e_x)))
        g = tl.where(valid, neg_a * softplus, 0.0)
        beta = tl.where(valid, 1.0 / (1.0 + tl.exp(-beta)), 0.0)
    cum = tl.cumsum(g, 0)
    cum_last = tl.sum(tl.where(offs_c == CHUNK - 1, cum, 0.0), 0)
    at = slot.to(tl.int64) * HV + hv
    PLANES: tl.constexpr = 2 if SPLIT else 1  # w's and ke's tiles per (chunk slot, value head)
    # ChunkWork tiles as one scalar base pointer each plus constant int32 offsets: ptxas folds those into
    # the stores' immediates instead of keeping a 64-bit address per vector live
    by_k = offs_c[:, None] * DK + offs_k[None, :]
    tl.store(decay_ptr + at, tl.exp(cum_last))

    # k first (ke written, k k^T and the norms kept), then q (qe and attn written): q's tiles die before
    # the WY system's are live, and k's fp32 copy before q is loaded.
    # q k^T and k k^T multiply the loaded values and normalise after: products of 16-bit inputs are exact
    # in the fp32 accumulator, so one bf16 product is as accurate as tf32x3 on normalised fp32 copies; fp32
    # inputs (SPLIT_QK) are split into bf16 hi and lo once and multiplied as bf16x3
    k = tl.load(k_ptr + row[:, None] * K_ST + hk * K_SH + offs_k[None, :], mask=valid[:, None], other=0.0)
    if SPLIT_QK:
        k_h, k_l = _split(k)
        kk = _mul(k_h, k_l, tl.trans(k_h), tl.trans(k_l), None, DOT, True)
    else:
        kk = tl.dot(k, tl.trans(k), input_precision=DOT)
    kf = k.to(tl.float32)
    r_k = tl.rsqrt(tl.sum(kf * kf, 1) + EPS)
    ke_at = ke_ptr + at * (PLANES * CHUNK * DK) + by_k
    _store_planes(ke_at, (kf * r_k[:, None]) * tl.exp(cum_last - cum)[:, None], CHUNK * DK, SPLIT)
    q = tl.load(q_ptr + row[:, None] * Q_ST + hk * Q_SH + offs_k[None, :], mask=valid[:, None], other=0.0)
    if SPLIT_QK:
        q_h, q_l = _split(q)
        qk = _mul(q_h, q_l, tl.trans(k_h), tl.trans(k_l), None, DOT, True)
    else:
        qk = tl.dot(q, tl.trans(k), input_precision=DOT)
    qf = q.to(tl.float32)
    r_q = tl.rsqrt(tl.sum(qf * qf, 1) + EPS) * scale
    tl.store(qe_ptr + at * (CHUNK * DK) + by_k, (qf * r_q[:, None]) * tl.exp(cum)[:, None])
    decay = tl.exp(tl.where(later, float("-inf"), cum[:, None] - cum[None, :]))  # exactly 0 when later
    tl.store(attn_ptr + at * (CHUNK * CHUNK) + offs_c[:, None] * CHUNK + offs_c[None, :],
             qk * r_q[:, None] * r_k[None, :] * decay)

    system = kk * (beta * r_k)[:, None] * r_k[None, :] * decay
    system = tl.where(offs_c[:, None] > offs_c[None, :], system, 0.0)  # strictly lower: the unit diagonal
    inv_h, inv_l = _unit_lower_inverse(system, CHUNK, CHUNK // 4, DOT, SPLIT)
    # w = T (k_beta e^cum) and u = T (beta v) in blocks of at most 64 columns, from k and v loaded again
    # (L2 hits; all blocks' loads issued together): no [CHUNK, Dk] fp32 tile lives across the inverse, and
    # one block's operand and product at a time after it
    WB: tl.constexpr = DK // 2 if DK > 64 else DK
    UB: tl.constexpr = DV // 2 if DV > 64 else DV
    offs_w = tl.arange(0, WB)
    offs_u = tl.arange(0, UB)
    k_at = k_ptr + row[:, None] * K_ST + hk * K_SH + offs_w[None, :]
    v_at = v_ptr + row[:, None] * V_ST + hv * V_SH + offs_u[None, :]
    k0 = tl.load(k_at, mask=valid[:, None], other=0.0)
    v0 = tl.load(v_at, mask=valid[:, None], other=0.0)
    if DK > WB:
        k1 = tl.load(k_at + WB, mask=valid[:, None], other=0.0)
    if DV > UB:
        v1 = tl.load(v_at + UB, mask=valid[:, None], other=0.0)
    e_cum = tl.exp(cum)
    w_at = w_ptr + at * (PLANES * CHUNK * DK) + offs_c[:, None] * DK + offs_w[None, :]
    u_at = u_ptr + at * (CHUNK * DV) + offs_c[:, None] * DV + offs_u[None, :]
    b_h, b_l = _parts((k0.to(tl.float32) * r_k[:, None]) * beta[:, None] * e_cum[:, None], SPLIT)
    _store_planes(w_at, _mul(inv_h, inv_l, b_h, b_l, None, DOT, SPLIT), CHUNK * DK, SPLIT)
    if DK > WB:
        b_h, b_l = _parts((k1.to(tl.float32) * r_k[:, None]) * beta[:, None] * e_cum[:, None], SPLIT)
        _store_planes(w_at + WB, _mul(inv_h, inv_l, b_h, b_l, None, DOT, SPLIT), CHUNK * DK, SPLIT)
    b_h, b_l = _parts(v0.to(tl.float32) * beta[:, None], SPLIT)
    tl.store(u_at, _mul(inv_h, inv_l, b_h, b_l, None, DOT, SPLIT))
    if DV > UB:
        b_h, b_l = _parts(v1.to(tl.float32) * beta[:, None], SPLIT)
        tl.store(u_at + UB, _mul(inv_h, inv_l, b_h, b_l, None, DOT, SPLIT))
