"""Forked Gated DeltaNet: the chunked gated delta rule over each segment's path, in three kinds of launch.

Consumes q/k [T, Hk, Dk], v [T, Hv, Dv], the log-decay g and write strength beta [T, Hv] (fp32; or, with the
gate fused, the raw projections a and b in the model dtype plus A_log and dt_bias), the GdnTables of
runtime/tables.py, a ChunkWork scratch (per chunk slot and value head: fp32, but w and ke as bf16 hi and lo
planes with bf16x3 tiles) and a buffer of fp32 state slots [slots, Hv, Dk, Dv]; produces out [T, Hv, Dv] in
v's dtype, written only at segment rows, and the state slots that deeper levels start from.
Work items are segments; an item's chunks are CHUNK absolute positions each, the first gathering the
ancestors' tail rows by index before the segment's own rows, so a branch forking inside a chunk recomputes
only that chunk. The work splits as in flash-linear-attention's chunked kernels (GdnSpec.calls):
- `gdn_prep_kernel`, one launch over every chunk of every level at once, one program per (value head, chunk
  slot): all that does not depend on the state entering the chunk, in fp32 (the reference's WY/UT form):
  q, k L2-normalised (q also scaled), decays from the in-chunk cumulative sum of g, the masked in-chunk
  attention, q e^cum, k e^(last - cum), the chunk's total decay, the unit lower triangular system inverted
  blockwise, and from it w and u, written to the ChunkWork (with bf16x3 tiles, w and ke, the walk's only
  operands that do not depend on the state, already split into bf16 hi and lo planes);
- `gdn_state_kernel`, one launch per tree level, one program per (value head and BLOCK_V value columns, item):
  the state's walk, two dependent products per chunk, from the item's src slot (or zeros), saving the state
  entering each chunk and v_new, and after its last full chunk its dst slot;
- `gdn_out_kernel`, one launch over every chunk slot: out = qe S + attn v_new, independent per chunk; with
  a GdnNorm (passes/fuse_gdn_norm.py), normed by the layer's gated RMS norm with z [T, Hv, Dv] and its
  weight, bit for bit as the norm's own kernel computes it (codegen/pointwise.py).
Relies on (E3): a row's bits depend only on the positions at or before it on its path: every product whose
row index precedes its column index is masked to an exact zero, positions past a segment's end load zeros,
and chunk boundaries are absolute, so a chunk holds the same rows at the same places in a forked stream and
in each path's plain stream and gives identical bits with the same tile choices (TILES) in every bucket.
Value columns are independent: splitting them changes nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from flidec.codegen import eager
from flidec.codegen.pointwise import gated_norm, sum_squares
from flidec.runtime.meta import CHUNK, StreamMeta
from flidec.runtime.reference.ops import L2_EPS
from flidec.runtime.tables import ITEM_FIELDS, GdnTables, gdn_tables


@dataclass(frozen=True, slots=True)
class GdnTiles:
    block_v: int  # state walk: value columns per program (its state block in registers is Dk x block_v)
    wide_v: int  # ... of a level with several live items, whose programs walk items side by side (WALK_SMS)
    state_warps: int
    prep_warps: int  # prep: [CHUNK, CHUNK] products, w and u in blocks of 64 columns
    block_o: int  # outputs: value columns per program
    out_warps: int
    state_stages: int  # software pipelining of the walk's loads (w, ke, u do not depend on the state)
    dot: str  # tl.dot input precision of the fp32 products the state and the WY system depend on
    out_dot: str  # ... and of those only an output row depends on (qe S + attn v_new)


# One tile choice per value head dim, shared by every bucket (E3). The fp32 products the state and the WY
# system depend on run as bf16x3 (each operand split into two bf16 parts, three bf16 tensor-core products:
# about 16 mantissa bits, relative error ~1.5e-5, far under the bf16 rounding of the outputs); "ieee" fp32
# dots fall back to FMA loops that spill badly at Dk = Dv = 128, and tf32x3 measured 2x slower for the whole
# layer. q k^T and k k^T multiply the 16-bit inputs themselves (exact products). The products only an
# output row depends on run as bf16x3 too: on the H200 that was both faster and closer than one tf32 product
# (outputs 0.092 vs 0.104 ms, max error against the fp32 op 2.4e-4 vs 4.9e-4; tf32x3 0.174 ms, ieee 3.2 ms).
# Measured on the H200 (benchmarks/gdn_tiles.py, 2026-11-29, one 0.8B layer, 5,000-token state and 9
# branches): prep 0.21 ms at 4 warps with bf16x3 (0.30 at 8 warps; tf32x3 0.85), state walks 0.47 ms
# (tf32x3 0.65; 32 value columns or 2 pipelining stages no better); fork == plain in every variant. Head dims
# under 128 keep tf32x3: at the tiny test checkpoint's 16 (2 key, 4 value heads) the bf16x3 kernels compiled
# by Triton 3.6 for sm_90 are off by up to 0.5 against the reference on the H200 (gdn_tiles.py --heads
# 2,4,16; fork == plain still holds), tf32x3 is within 2.4e-4; not investigated further, and 128 was checked
# on the hardware. The interpreter computes every precision in fp32 (eager.py runs
# bf16x3 there as ieee), except the explicit bf16 products (the walk's below; since 172cb9a the prep's and
# the outputs' too: _mul), which it multiplies as bf16.
# With dot "bf16x3" the walk does not ask Triton for bf16x3 products (GdnSpec.split): Triton would split
# w and ke [CHUNK, Dk] fp32 into hi = bf16(x) and lo = bf16(x - hi) in every program at every chunk,
# though they do not depend on the state and are the same for all Dv / BLOCK_V programs of a head. The
# prep stores them split instead (bf16 hi and lo planes, the bytes of the fp32 tile), and the walk loads
# the planes as they are and writes Triton's three products itself, lo*hi + hi*lo first, then hi*hi (the
# same terms and the same ~16 bits), splitting only the state [Dk, BLOCK_V] and v_new [CHUNK, BLOCK_V].
# At 0.8B shapes (benchmarks/gdn_spills.py): the walk's loop body (one chunk) 1,102 -> 610 SASS
# instructions, its 48 HGMMA unchanged; the prep 7,440 -> 7,928 instructions (fused gate 7,728 -> 8,240).
# Registers (benchmarks/gdn_spills.py, Triton 3.6, sm_90, 0.8B shapes): prep 255 (fused gate 255), walk 204,
# outputs 182 (255 with the gated norm fused, a program computing both 64-column blocks of its head: 4,008
# SASS instructions against 1,496; one 128-column block spills 16 bytes at 4 warps), none spilling; before
# the kernels were reordered, prep and walk used 255 and spilled 632 and 64 bytes a thread. What that took:
# the prep writes k's and q's outputs before the WY system and computes w and u in 64-column blocks from k
# and v loaded again, so no [CHUNK, 128] fp32 tile lives across the inverse; ChunkWork tiles are addressed
# from a scalar base pointer plus constant int32 offsets (folded into the loads' and stores' immediates).
# Head dims under 128 (tf32x3) still spill in the prep (96 to 176 bytes). Since 172cb9a the prep's and the
# outputs' bf16x3 products split their operands by hand too (_parts, _mul): prep 6,848 SASS instructions
# (fused gate 7,128), outputs 1,272, normed outputs 3,624 at 249 registers; the walk with its loop over items
# (WALK_SMS) 149 registers. The walk with state_stages=2 prefetches the next chunk's w and ke planes and u by
# cp.async (106 registers, 140 KiB of shared memory; the step 544 instructions). Timed on the H200
# (gdn_tiles.py, 2026-11-29, the 5,000-token state with 9 branches): walks 0.26 ms, the layer 0.53 ms (0.48
# and 0.75 with the fp32 operands split in the loop), RACE-like 0.28 ms. With one stage (72 KiB of shared
# memory), and with 8 warps, the split walk made an illegal memory access on the H200 that the interpreter
# does not see: compute-sanitizer places it at an out-of-range shared address in S's update (ke^T v_new), with
# ke as a tl.trans of a loaded tile and also with ke^T loaded transposed (tried 2026-11-29; not investigated
# further). With 3 stages (120 registers, 208 KiB) the walks take 0.208 ms on the 5,000-token state (2:
# 0.253), 0.259 on the RACE-like forest (0.279) and 0.0175 on one 177-row question (0.0149): 3 stages, for the
# long states throughput is made of; like every tile choice here, one count for every bucket (E3).
TILES: dict[int, GdnTiles] = {
    16: GdnTiles(block_v=16, wide_v=16, state_warps=4, state_stages=1, prep_warps=4, block_o=16, out_warps=4,
                 dot="tf32x3", out_dot="tf32x3"),
    32: GdnTiles(block_v=16, wide_v=32, state_warps=4, state_stages=1, prep_warps=4, block_o=32, out_warps=4,
                 dot="tf32x3", out_dot="tf32x3"),
    64: GdnTiles(block_v=16, wide_v=32, state_warps=4, state_stages=1, prep_warps=4, block_o=64, out_warps=4,
                 dot="tf32x3", out_dot="tf32x3"),
    128: GdnTiles(block_v=16, wide_v=32, state_warps=4, state_stages=3, prep_warps=4, block_o=64, out_warps=4,
                  dot="bf16x3", out_dot="bf16x3"),
}
KEY_DIMS = (16, 32, 64, 128)
# bf16x3 products need a key dim of at least 64: on the H200 (2026-11-29, one forest of the tests, fp32
# inputs, Dv = 128) the layer is off the reference by 0.05 at Dk = 16 with bf16x3 for the state and WY
# products (whether the walk's own split products or Triton's), 1e-6 with tf32x3 there; at Dk = 64 and 128
# bf16x3 is within 1.3e-6. Not reduced further; every Qwen3.5 checkpoint has Dk = 128.
BF16X3_KEY_DIM = 64
# The walk's grid is sized for the SMs of an H100 SXM or H200 (sm_90's parts with the most), not for the
# bucket: a level's items are shared among max(1, WALK_SMS // blocks) programs per value-head block (one at
# 0.8B shapes with 16 columns a block, 128 blocks; two with 32), each walking items j, j + walkers, ... up to
# the first padding item (live items come first). A bucket holds up to `segments` items a level (22 at r192,
# 65 from r1024 up in the systemone artifact), few of them live in most streams, and a walk program holds
# 208 KiB of shared memory (224 with both widths), so an SM runs one at a time: a program per (block, item)
# made the empty second level of a one-question instance cost ~10 us a launch on the H200 (r192: 2,816
# programs, all returning at once). The prep and output kernels keep a program per (head block, chunk slot):
# at two programs an SM their padding programs cost ~1 us a launch, and a loop over slots kept their
# loop-invariant masks live (the prep spilled 120 bytes a thread, the normed output 40). Which program walks
# an item does not change its bits (E3). Measured on the H200 (2026-11-29): the replays' walks
# (profile_runtime) r192 458 -> 163 us, r1024 1,675 -> 798, r6144 4,380 -> 3,640; with every item inside the
# loop over items the walks of gdn_tiles.py's 5,000-token forest took 0.245 ms against 0.203 before, so the
# first item is walked outside it (0.199-0.204). One width cannot serve both shapes of level (gdn_tiles.py,
# 2026-11-30, H200): 32 columns walk two items side by side but one long item 15% slower than 16 (0.228
# against 0.198 ms on the QuALITY-like state), so each walk launch holds both (GdnTiles.wide_v): narrow
# programs walk a level with one live item, wide ones a level with several, and the other kind returns at
# once. Walks a layer, narrow only -> both: four packed QuALITY-like instances 0.749 -> 0.542 ms, RACE-like
# forest 0.247 -> 0.173, one QuALITY-like instance 0.197 -> 0.193 (its nine 2-chunk questions), one
# independent question 0.018 -> 0.016; outputs' and fp32 states' digests unchanged in all four. The launch
# compiles both kinds (gdn_spills.py, sm_90): 230 registers, 224 KiB of shared memory (the branches share it),
# the narrow loop body 569 SASS instructions against 565 alone. 64 columns do not fit: 256 KiB of shared
# memory at 3 stages, and spills at 2.
WALK_SMS = 132

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_FIELD = {name: i for i, name in enumerate(ITEM_FIELDS)}


@triton.jit
def _parts(x, SPLIT: tl.constexpr):
    """x as _mul's operand: with SPLIT its bf16 hi and lo parts (_split), else x twice (the second unused).
    An operand used in several products is split once."""
    if SPLIT:
        return _split(x)
    else:
        return x, x


@triton.jit
def _mul(a_hi, a_lo, b_hi, b_lo, acc, DOT: tl.constexpr, SPLIT: tl.constexpr):
    """acc + a @ b in fp32 (acc None: a @ b) from _parts: with SPLIT the three bf16 products of bf16x3,
    lo*hi + hi*lo first, then hi*hi (as the walk multiplies); else a_hi @ b_hi at input precision DOT."""
    if SPLIT:
        return tl.dot(a_hi, b_hi, tl.dot(a_lo, b_hi, tl.dot(a_hi, b_lo, acc)))
    else:
        return tl.dot(a_hi, b_hi, acc, input_precision=DOT)


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
def _chunk_of(chunks_ptr, items_ptr, slot, item, NUM_FIELDS: tl.constexpr, F_ROW0: tl.constexpr,
              F_LENGTH: tl.constexpr, F_TAIL: tl.constexpr):
    """A used chunk slot's chunk index within its item, the item's first row and tail length, and total:
    the positions from the aligned chunk start to the segment's end."""
    fields = items_ptr + item * NUM_FIELDS
    n_tail = tl.load(fields + F_TAIL)
    return (tl.load(chunks_ptr + slot * 2 + 1), tl.load(fields + F_ROW0), n_tail,
            n_tail + tl.load(fields + F_LENGTH))


@triton.jit
def _split(x):
    """x (fp32) as bf16 hi = bf16(x) and lo = bf16(x - hi): hi + lo holds about 16 bits of x's mantissa."""
    hi = x.to(tl.bfloat16)
    return hi, (x - hi.to(tl.float32)).to(tl.bfloat16)


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
    # in the fp32 accumulator, so one bf16 product is as accurate as tf32x3 on normalised fp32 copies
    k = tl.load(k_ptr + row[:, None] * K_ST + hk * K_SH + offs_k[None, :], mask=valid[:, None], other=0.0)
    kk = tl.dot(k, tl.trans(k), input_precision=DOT)
    kf = k.to(tl.float32)
    r_k = tl.rsqrt(tl.sum(kf * kf, 1) + EPS)
    ke_at = ke_ptr + at * (PLANES * CHUNK * DK) + by_k
    _store_planes(ke_at, (kf * r_k[:, None]) * tl.exp(cum_last - cum)[:, None], CHUNK * DK, SPLIT)
    q = tl.load(q_ptr + row[:, None] * Q_ST + hk * Q_SH + offs_k[None, :], mask=valid[:, None], other=0.0)
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


@triton.jit
def _item_total(items_ptr, item, live, NUM_FIELDS: tl.constexpr, F_LENGTH: tl.constexpr,
                F_TAIL: tl.constexpr):
    """Positions an item walks (tail + length); 0 for a padding item, and where `live` is false."""
    fields = items_ptr + item * NUM_FIELDS
    return tl.load(fields + F_TAIL, mask=live, other=0) + tl.load(fields + F_LENGTH, mask=live, other=0)


@triton.jit
def gdn_state_kernel(
    w_ptr, u_ptr, ke_ptr, decay_ptr, states_ptr,  # ChunkWork parts (u becomes v_new)
    items_ptr,  # int32 [items, NUM_FIELDS] (runtime/tables.py)
    slots_ptr,  # fp32 [slots, HV, DK, DV]
    item_base,  # i32: this level's first item
    level_items,  # i32: this level's items, live ones first (then padding: total 0)
    HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BLOCK_V: tl.constexpr, WIDE_V: tl.constexpr,
    CHUNK: tl.constexpr, NUM_FIELDS: tl.constexpr, F_LENGTH: tl.constexpr, F_TAIL: tl.constexpr,
    F_SRC: tl.constexpr, F_DST: tl.constexpr, F_FIRST: tl.constexpr,
    DOT: tl.constexpr,  # tl.dot input precision of the products without SPLIT (GdnTiles.dot)
    SPLIT: tl.constexpr,  # w and ke are bf16 hi and lo planes: three explicit bf16 products each (bf16x3)
):
    """The state's walk along its level's items (_walk_items). With WIDE_V == BLOCK_V, program p walks value
    block p % blocks and items p // blocks, + programs // blocks, ...; else the first HV * DV / BLOCK_V
    programs (narrow: one a block) walk a level with one live item, and the rest (wide: WIDE_V columns, the
    items shared among a block's programs as above) a level with several (GdnTiles.wide_v)."""
    pid = tl.program_id(0)
    NARROW: tl.constexpr = HV * (DV // BLOCK_V)
    if WIDE_V == BLOCK_V:
        _walk_items(w_ptr, u_ptr, ke_ptr, decay_ptr, states_ptr, items_ptr, slots_ptr, item_base, level_items,
                    pid % NARROW, pid // NARROW, tl.num_programs(0) // NARROW, HV, DK, DV, BLOCK_V, CHUNK,
                    NUM_FIELDS, F_LENGTH, F_TAIL, F_SRC, F_DST, F_FIRST, DOT, SPLIT)
    else:
        several = _item_total(items_ptr, item_base + 1, level_items > 1, NUM_FIELDS, F_LENGTH, F_TAIL) > 0
        if pid < NARROW:
            if not several:
                _walk_items(w_ptr, u_ptr, ke_ptr, decay_ptr, states_ptr, items_ptr, slots_ptr, item_base,
                            level_items, pid, 0, 1, HV, DK, DV, BLOCK_V, CHUNK, NUM_FIELDS, F_LENGTH, F_TAIL,
                            F_SRC, F_DST, F_FIRST, DOT, SPLIT)
        elif several:
            WIDE: tl.constexpr = HV * (DV // WIDE_V)
            q = pid - NARROW
            _walk_items(w_ptr, u_ptr, ke_ptr, decay_ptr, states_ptr, items_ptr, slots_ptr, item_base,
                        level_items, q % WIDE, q // WIDE, (tl.num_programs(0) - NARROW) // WIDE, HV, DK, DV,
                        WIDE_V, CHUNK, NUM_FIELDS, F_LENGTH, F_TAIL, F_SRC, F_DST, F_FIRST, DOT, SPLIT)


@triton.jit
def _walk_items(w_ptr, u_ptr, ke_ptr, decay_ptr, states_ptr, items_ptr, slots_ptr, item_base, level_items,
                block, j, step, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BLOCK_V: tl.constexpr,
                CHUNK: tl.constexpr, NUM_FIELDS: tl.constexpr, F_LENGTH: tl.constexpr, F_TAIL: tl.constexpr,
                F_SRC: tl.constexpr, F_DST: tl.constexpr, F_FIRST: tl.constexpr, DOT: tl.constexpr,
                SPLIT: tl.constexpr):
    """Value block `block` (BLOCK_V columns) of the level's items j, j + step, ... up to the first padding
    item (WALK_SMS)."""
    total = _item_total(items_ptr, item_base + j, j < level_items, NUM_FIELDS, F_LENGTH, F_TAIL)
    # the first item outside the loop over items: every level's first (at 0.8B shapes often its only) walk
    # then runs as a kernel-level loop, which the H200 ran faster than the same loop inside the while
    if total > 0:
        _walk_item(w_ptr, u_ptr, ke_ptr, decay_ptr, states_ptr, items_ptr + (item_base + j) * NUM_FIELDS,
                   slots_ptr, total, block, HV, DK, DV, BLOCK_V, CHUNK, F_SRC, F_DST, F_FIRST, DOT, SPLIT)
    j += step
    total = _item_total(items_ptr, item_base + j, j < level_items, NUM_FIELDS, F_LENGTH, F_TAIL)
    while total > 0:
        _walk_item(w_ptr, u_ptr, ke_ptr, decay_ptr, states_ptr, items_ptr + (item_base + j) * NUM_FIELDS,
                   slots_ptr, total, block, HV, DK, DV, BLOCK_V, CHUNK, F_SRC, F_DST, F_FIRST, DOT, SPLIT)
        j += step
        total = _item_total(items_ptr, item_base + j, j < level_items, NUM_FIELDS, F_LENGTH, F_TAIL)


@triton.jit
def _walk_item(w_ptr, u_ptr, ke_ptr, decay_ptr, states_ptr, fields, slots_ptr, total, block,
               HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BLOCK_V: tl.constexpr,
               CHUNK: tl.constexpr, F_SRC: tl.constexpr, F_DST: tl.constexpr, F_FIRST: tl.constexpr,
               DOT: tl.constexpr, SPLIT: tl.constexpr):
    """One item's walk (`fields` its row of the items table, `total` its positions), two dependent products
    per chunk: states[chunk] = S, v_new = u - w S (written over u), S <- decay S + ke^T v_new (full chunks
    only); then its dst slot. `block` is the value head and BLOCK_V columns the program walks."""
    hv = block // (DV // BLOCK_V)
    src = tl.load(fields + F_SRC)
    dst = tl.load(fields + F_DST)
    first = tl.load(fields + F_FIRST)
    n_full = total // CHUNK
    PLANES: tl.constexpr = 2 if SPLIT else 1

    offs_c = tl.arange(0, CHUNK)
    offs_k = tl.arange(0, DK)
    offs_v = (block % (DV // BLOCK_V)) * BLOCK_V + tl.arange(0, BLOCK_V)
    state_at = (hv * DK + offs_k[:, None]) * DV + offs_v[None, :]
    slot_size = HV * DK * DV
    state = tl.load(slots_ptr + tl.maximum(src, 0).to(tl.int64) * slot_size + state_at,
                    mask=(offs_k[:, None] >= 0) & (src >= 0), other=0.0)

    for c in range(tl.cdiv(total, CHUNK)):
        chunk = (first + c).to(tl.int64)
        at = chunk * HV + hv
        # scalar chunk base pointers and constant int32 tile offsets: no 64-bit address per vector stays
        # live across the loop (64 bytes of spills a thread at Dk = Dv = 128 with int64 offset tiles)
        by_k = offs_c[:, None] * DK + offs_k[None, :]
        by_v = offs_c[:, None] * DV + offs_v[None, :]
        w_c = w_ptr + at * (PLANES * CHUNK * DK)
        ke_c = ke_ptr + at * (PLANES * CHUNK * DK)
        u_c = u_ptr + at * (CHUNK * DV)
        tl.store(states_ptr + chunk * slot_size + state_at, state)
        if SPLIT:
            # every load first, where loading each plane next to its product issues them one round trip
            # after another (TILES[128] runs 3 stages: these loads are then fetched chunks ahead)
            w_hi = tl.load(w_c + by_k)
            w_lo = tl.load(w_c + CHUNK * DK + by_k)
            ke_hi = tl.trans(tl.load(ke_c + by_k))
            ke_lo = tl.trans(tl.load(ke_c + CHUNK * DK + by_k))
            u = tl.load(u_c + by_v)
            decay = tl.load(decay_ptr + at)
            s_hi, s_lo = _split(state)
            v_new = u - _mul(w_hi, w_lo, s_hi, s_lo, None, DOT, SPLIT)
            tl.store(u_c + by_v, v_new)
            v_hi, v_lo = _split(v_new)
            moved = state * decay + _mul(ke_hi, ke_lo, v_hi, v_lo, None, DOT, SPLIT)
        else:
            v_new = tl.load(u_c + by_v) - tl.dot(tl.load(w_c + by_k), state, input_precision=DOT)
            tl.store(u_c + by_v, v_new)
            moved = state * tl.load(decay_ptr + at) + tl.dot(tl.trans(tl.load(ke_c + by_k)), v_new,
                                                              input_precision=DOT)
        # Only full chunks move the state on: a partial last chunk is recomputed by the children it ends at.
        state = tl.where(c < n_full, moved, state)

    # the state at floor(end / CHUNK) * CHUNK, where the segment's children's chunks begin
    tl.store(slots_ptr + tl.maximum(dst, 0).to(tl.int64) * slot_size + state_at, state,
             mask=(offs_k[:, None] >= 0) & (dst >= 0))


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
):
    """One chunk's outputs for one value head and BLOCK_O value columns: out = qe S + attn v_new, at the
    item's own rows (tail rows are the ancestors': they wrote them themselves). With NORM, one program
    computes all Dv columns of its head (one or two blocks of BLOCK_O), rounds o to out's dtype as it is
    stored without NORM, and writes Qwen3_5RMSNormGated(o) * silu(z) computed as gated_rms_norm_kernel does
    (pointwise.sum_squares over the blocks, then pointwise.gated_norm): the same bits as the two launches."""
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
    if NORM:
        z_at = z_ptr + row[:, None] * Z_ST + hv * Z_SH
        o = o.to(dtype).to(tl.float32)  # the values the unfused kernel stores and the norm loads
        if BLOCKS == 1:
            ss = sum_squares(o, BLOCK_O)
        else:  # the second block's o before either is written: the norm needs every column's square
            offs_v1 = BLOCK_O + offs_v
            o1 = _out_block(qe_ptr, attn_ptr, u_ptr, states_ptr, at, offs_c, offs_k, offs_v1, DK, DV, CHUNK,
                            DOT_OUT).to(dtype).to(tl.float32)
            ss = sum_squares(o, BLOCK_O) + sum_squares(o1, BLOCK_O)
            z = tl.load(z_at + offs_v1[None, :], mask=own[:, None], other=0.0).to(tl.float32)
            w = tl.load(norm_w_ptr + offs_v1).to(tl.float32)
            tl.store(out_at + offs_v1[None, :], gated_norm(o1, ss, z, w, eps, DV, dtype).to(dtype),
                     mask=own[:, None])
        z = tl.load(z_at + offs_v[None, :], mask=own[:, None], other=0.0).to(tl.float32)
        w = tl.load(norm_w_ptr + offs_v).to(tl.float32)
        o = gated_norm(o, ss, z, w, eps, DV, dtype)
    tl.store(out_at + offs_v[None, :], o.to(dtype), mask=own[:, None])


@dataclass(frozen=True, slots=True)
class GdnNorm:
    """The gated RMS norm fused into the output kernel: z's and the weight's dtypes, z's row and head
    strides."""

    z_dtype: torch.dtype
    weight_dtype: torch.dtype
    z_strides: tuple[int, int]


@dataclass(frozen=True, slots=True)
class GdnSpec:
    """Everything a forked Gated DeltaNet layer's launches are specialized on: one compiled prep, state walk
    and output kernel per spec."""

    dtype: torch.dtype  # q, k, v
    gate_dtype: torch.dtype  # g and beta (fp32), or a and b when fused (the model dtype)
    out_dtype: torch.dtype
    num_k_heads: int
    num_v_heads: int
    key_dim: int
    value_dim: int
    fused_gate: bool
    strides: tuple[tuple[int, int], ...]  # (row, head) strides in elements of q, k, v, g, beta, out
    norm: GdnNorm | None = None  # the output kernel applies the layer's gated RMS norm (gdn_out_kernel NORM)

    @property
    def tiles(self) -> GdnTiles:
        """TILES of the value dim, with tf32x3 products under BF16X3_KEY_DIM key dims."""
        t = TILES[self.value_dim]
        if self.key_dim < BF16X3_KEY_DIM and "bf16x3" in (t.dot, t.out_dot):
            return dataclasses.replace(t, dot="tf32x3", out_dot="tf32x3")
        return t

    @property
    def split(self) -> bool:
        """The prep stores w and ke as bf16 hi and lo planes and the walk multiplies them explicitly: with
        bf16x3 tiles (TILES comment)."""
        return self.tiles.dot == "bf16x3"

    def _work(self, parts: tuple[str, ...]) -> dict[str, str]:
        dtypes = dict(zip(ChunkWork.PARTS, ChunkWork.dtypes(self.split), strict=True))
        return {name: "*" + _DTYPES[dtypes[name]] for name in parts}

    def _fields(self) -> dict[str, int]:
        return {"NUM_FIELDS": len(ITEM_FIELDS), "F_ROW0": _FIELD["row0"], "F_LENGTH": _FIELD["length"],
                "F_TAIL": _FIELD["tail"]}

    def prep_signature(self) -> dict[str, str]:
        sig = {name: "*" + _DTYPES[self.dtype] for name in ("q_ptr", "k_ptr", "v_ptr")}
        gate = "*" + _DTYPES[self.gate_dtype]
        sig |= {name: gate for name in ("g_ptr", "beta_ptr", "a_log_ptr", "dt_bias_ptr")}
        sig |= {"items_ptr": "*i32", "tails_ptr": "*i32", "chunks_ptr": "*i32"}
        sig |= self._work(ChunkWork.PREP_PARTS)
        sig |= {"scale": "fp32"}
        return sig | {name: "constexpr" for name in self.prep_constexprs()}

    def prep_constexprs(self) -> dict[str, int | bool | float | str]:
        (q_st, q_sh), (k_st, k_sh), (v_st, v_sh), (g_st, _), (b_st, _), _ = self.strides
        return {
            "Q_ST": q_st, "Q_SH": q_sh, "K_ST": k_st, "K_SH": k_sh, "V_ST": v_st, "V_SH": v_sh,
            "G_ST": g_st, "B_ST": b_st, "HV": self.num_v_heads, "GROUP": self.num_v_heads // self.num_k_heads,
            "DK": self.key_dim, "DV": self.value_dim, "CHUNK": CHUNK, **self._fields(),
            "FUSED_GATE": self.fused_gate, "EPS": L2_EPS, "DOT": self.tiles.dot, "SPLIT": self.split,
        }

    def state_signature(self) -> dict[str, str]:
        sig = self._work(ChunkWork.STATE_PARTS)
        sig |= {"items_ptr": "*i32", "slots_ptr": "*fp32", "item_base": "i32", "level_items": "i32"}
        return sig | {name: "constexpr" for name in self.state_constexprs()}

    def state_constexprs(self) -> dict[str, int | str]:
        fields = {f"F_{name.upper()}": _FIELD[name] for name in ("length", "tail", "src", "dst", "first")}
        return {"HV": self.num_v_heads, "DK": self.key_dim, "DV": self.value_dim,
                "BLOCK_V": self.tiles.block_v, "WIDE_V": self.tiles.wide_v, "CHUNK": CHUNK,
                "NUM_FIELDS": len(ITEM_FIELDS), **fields, "DOT": self.tiles.dot, "SPLIT": self.split}

    def out_signature(self) -> dict[str, str]:
        sig = self._work(ChunkWork.OUT_PARTS)
        out = "*" + _DTYPES[self.out_dtype]
        sig |= {"out_ptr": out, "items_ptr": "*i32", "chunks_ptr": "*i32"}
        norm = self.norm  # without a norm, out fills the z and weight slots (never read)
        sig |= {"z_ptr": "*" + _DTYPES[norm.z_dtype] if norm else out,
                "norm_w_ptr": "*" + _DTYPES[norm.weight_dtype] if norm else out, "eps": "fp32"}
        return sig | {name: "constexpr" for name in self.out_constexprs()}

    def out_constexprs(self) -> dict[str, int | str | bool]:
        o_st, o_sh = self.strides[-1]
        z_st, z_sh = self.norm.z_strides if self.norm else (0, 0)
        return {"O_ST": o_st, "O_SH": o_sh, "Z_ST": z_st, "Z_SH": z_sh, "HV": self.num_v_heads,
                "DK": self.key_dim, "DV": self.value_dim, "BLOCK_O": self.tiles.block_o, "CHUNK": CHUNK,
                **self._fields(),
                "DOT_OUT": self.tiles.out_dot, "NORM": self.norm is not None}

    # Heads (and value blocks) are the grid's first axis, work slots its second: blocks are dispatched first
    # axis fastest, so a stream's few live slots (they come first) start in the first wave, and the padding
    # slots a bucket's grid is sized for return while those run instead of queueing ahead of them.
    def prep_grid(self, num_chunks: int) -> tuple[int, int]:
        return (self.num_v_heads, num_chunks)

    def state_grid(self, per_level: int) -> tuple[int, int]:
        """One program per narrow value-head block, then per wide block the programs that share a level's
        items (gdn_state_kernel, WALK_SMS); with one width, per block the programs that share them."""
        t = self.tiles
        narrow = self.num_v_heads * (self.value_dim // t.block_v)
        if t.wide_v == t.block_v:
            return (narrow * self.walkers(per_level), 1)
        wide = self.num_v_heads * (self.value_dim // t.wide_v)
        return (narrow + (wide * self.walkers(per_level) if per_level > 1 else 0), 1)

    def walkers(self, per_level: int) -> int:
        """Programs per value-head block that share a level's items: of the wide walk, or of the one width."""
        return min(per_level, max(1, WALK_SMS // (self.num_v_heads * (self.value_dim // self.tiles.wide_v))))

    def out_grid(self, num_chunks: int) -> tuple[int, int]:
        """With the norm, a program holds every value column of its head (the norm reduces over them)."""
        blocks = 1 if self.norm else self.value_dim // self.tiles.block_o
        return (self.num_v_heads * blocks, num_chunks)

    def calls(self, num_chunks: int, levels: int, per_level: int, q, k, v, g, beta, a_log, dt_bias, items,
              tails, chunks, work: ChunkWork, out, slots, z=None, norm_weight=None, eps: float = 0.0
              ) -> list[GdnCall]:
        """The launches of one layer in order: the prep over every chunk slot, one state walk per tree level
        (roots first), then the outputs of every chunk slot (with the spec's norm: normed by z, norm_weight
        and eps). Arguments are tensors (or stand-ins for them)."""
        t = self.tiles
        prep = GdnCall(gdn_prep_kernel, self.prep_grid(num_chunks),
                       (q, k, v, g, beta, a_log, dt_bias, items, tails, chunks,
                        *work.parts(ChunkWork.PREP_PARTS), self.key_dim**-0.5),
                       self.prep_signature(), self.prep_constexprs(), t.prep_warps)
        walks = [GdnCall(gdn_state_kernel, self.state_grid(per_level),
                         (*work.parts(ChunkWork.STATE_PARTS), items, slots, level * per_level, per_level),
                         self.state_signature(), self.state_constexprs(), t.state_warps, t.state_stages)
                 for level in range(levels)]
        if self.norm is None:
            z = norm_weight = out
        outs = GdnCall(gdn_out_kernel, self.out_grid(num_chunks),
                       (*work.parts(ChunkWork.OUT_PARTS), out, items, chunks, z, norm_weight, float(eps)),
                       self.out_signature(), self.out_constexprs(), t.out_warps)
        return [prep, *walks, outs]


@dataclass(frozen=True, slots=True)
class GdnCall:
    kernel: object  # a @triton.jit kernel of this module
    grid: tuple[int, int]
    args: tuple
    signature: dict[str, str]
    constexprs: dict[str, object]
    num_warps: int
    num_stages: int = 1


@dataclass(frozen=True, slots=True)
class ChunkWork:
    """The prep kernel's output, fp32, per (chunk slot, value head): w, qe, ke [CHUNK, Dk], u [CHUNK, Dv]
    (v_new after the state walk), attn [CHUNK, CHUNK] and decay (one value); and the state walk's: the state
    entering the chunk [Dk, Dv]. With `split` (GdnSpec.split) w and ke are [2, CHUNK, Dk] bf16 instead: the
    hi and lo planes of the fp32 values, in the same bytes; only the walk reads them."""

    PARTS = ("w_ptr", "u_ptr", "qe_ptr", "ke_ptr", "attn_ptr", "decay_ptr", "states_ptr")
    PREP_PARTS = ("w_ptr", "u_ptr", "qe_ptr", "ke_ptr", "attn_ptr", "decay_ptr")
    STATE_PARTS = ("w_ptr", "u_ptr", "ke_ptr", "decay_ptr", "states_ptr")
    OUT_PARTS = ("qe_ptr", "attn_ptr", "u_ptr", "states_ptr")
    w: torch.Tensor
    u: torch.Tensor
    qe: torch.Tensor
    ke: torch.Tensor
    attn: torch.Tensor
    decay: torch.Tensor
    states: torch.Tensor

    @staticmethod
    def shapes(num_chunks: int, num_v_heads: int, key_dim: int, value_dim: int, split: bool
               ) -> tuple[tuple[int, ...], ...]:
        n, h = max(num_chunks, 1), num_v_heads
        planes = (n, h, 2, CHUNK, key_dim) if split else (n, h, CHUNK, key_dim)
        return (planes, (n, h, CHUNK, value_dim), (n, h, CHUNK, key_dim), planes, (n, h, CHUNK, CHUNK),
                (n, h), (n, h, key_dim, value_dim))

    @staticmethod
    def dtypes(split: bool) -> tuple[torch.dtype, ...]:
        f32, planes = torch.float32, torch.bfloat16 if split else torch.float32
        return (planes, f32, f32, planes, f32, f32, f32)

    @classmethod
    def empty(cls, num_chunks: int, spec: GdnSpec, device: torch.device | str) -> ChunkWork:
        """NaN-filled: a kernel reading a chunk slot no earlier kernel wrote gets NaN outputs."""
        shapes = cls.shapes(num_chunks, spec.num_v_heads, spec.key_dim, spec.value_dim, spec.split)
        return cls(*(torch.full(s, float("nan"), dtype=dtype, device=device)
                     for s, dtype in zip(shapes, cls.dtypes(spec.split), strict=True)))

    def parts(self, names: tuple[str, ...]) -> tuple:
        return tuple(getattr(self, name.removesuffix("_ptr")) for name in names)


def gdn_spec(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
             out: torch.Tensor, fused_gate: bool, z: torch.Tensor | None = None,
             norm_weight: torch.Tensor | None = None) -> GdnSpec:
    """The spec of a launch on these tensors (checking what the kernels assume of them); with z and
    norm_weight, the outputs are normed by the gated RMS norm."""
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
    norm = None
    if (z is None) != (norm_weight is None):
        raise ValueError("to fuse the gated norm pass both z and its weight")
    if z is not None:
        if (z.shape != v.shape or z.stride(2) != 1 or norm_weight.shape != (dv,)
                or norm_weight.stride(0) != 1):
            raise ValueError(f"the gated norm needs z like v {tuple(v.shape)} with a contiguous head dim and "
                             f"a contiguous weight [{dv}], got z {tuple(z.shape)} and weight "
                             f"{tuple(norm_weight.shape)}")
        if dv // TILES[dv].block_o > 2:
            raise ValueError(f"head dim {dv}: the fused norm holds at most two output blocks a program")
        norm = GdnNorm(z.dtype, norm_weight.dtype, (z.stride(0), z.stride(1)))
    strides = tuple((t.stride(0), t.stride(1)) for t in (q, k, v, g, beta, out))
    return GdnSpec(dtype=q.dtype, gate_dtype=g.dtype, out_dtype=out.dtype, num_k_heads=hk, num_v_heads=hv,
                   key_dim=dk, value_dim=dv, fused_gate=fused_gate, strides=strides, norm=norm)


def slot_buffer(num_slots: int, num_v_heads: int, key_dim: int, value_dim: int,
                device: torch.device | str) -> torch.Tensor:
    """A NaN-filled slot buffer: a level reading a slot no earlier level wrote gets NaN outputs, not zeros."""
    return torch.full((max(num_slots, 1), num_v_heads, key_dim, value_dim), float("nan"), device=device)


def launch_all(spec: GdnSpec, tables: GdnTables, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               g: torch.Tensor, beta: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor,
               out: torch.Tensor, work: ChunkWork, slots: torch.Tensor,
               norm: tuple[torch.Tensor, torch.Tensor, float] | None = None) -> None:
    """A layer's launches (GdnSpec.calls), eagerly; `norm` = (z, weight, eps) of a spec with a norm."""
    device = q.device
    items, tails, chunks = (t.to(device) for t in (tables.items, tables.tails, tables.chunks))
    for call in spec.calls(tables.num_chunks, tables.num_levels, tables.per_level, q, k, v, g, beta, a_log,
                           dt_bias, items, tails, chunks, work, out, slots, *(norm or ())):
        eager.launch(call.kernel, call.grid, *call.args, device=device, num_warps=call.num_warps,
                     num_stages=call.num_stages, **call.constexprs)


def fork_gdn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
             meta: StreamMeta, a_log: torch.Tensor | None = None, dt_bias: torch.Tensor | None = None,
             out: torch.Tensor | None = None, slots: torch.Tensor | None = None, levels: int | None = None,
             per_level: int | None = None, num_slots: int | None = None, num_chunks: int | None = None,
             norm: tuple[torch.Tensor, torch.Tensor, float] | None = None) -> torch.Tensor:
    """Run the kernels eagerly (JIT on CUDA, interpreter on CPU), tables padded to a bucket's sizes if given.

    With `a_log` and `dt_bias`, g and beta are the raw projections a and b and the prep kernel computes
    g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b) itself. `out` defaults to a NaN-filled
    tensor, so rows the kernels do not write stay NaN; `slots` (see `slot_buffer`) receives the states at
    the chunk boundaries deeper segments start from, in the slots of tables.state_slots. With `norm` = (z,
    weight, eps) the output is gated_rms_norm(out, z, weight, eps), computed in the output kernel.
    """
    fused = a_log is not None
    if fused != (dt_bias is not None) or (fused and {a_log.dtype, dt_bias.dtype} != {g.dtype}):
        raise ValueError("to fuse the gate pass both a_log and dt_bias, in the dtype of the projections a, b")
    if out is None:
        out = torch.full(v.shape, float("nan"), dtype=v.dtype, device=v.device)
    spec = gdn_spec(q, k, v, g, beta, out, fused, *(norm[:2] if norm else ()))
    tables = gdn_tables(meta, levels, per_level, num_slots, num_chunks)
    if slots is None:
        slots = slot_buffer(tables.num_slots, spec.num_v_heads, spec.key_dim, spec.value_dim, q.device)
    work = ChunkWork.empty(tables.num_chunks, spec, q.device)
    if fused:
        launch_all(spec, tables, q, k, v, g, beta, a_log, dt_bias, out, work, slots, norm)
    else:
        launch_all(spec, tables, q, k, v, g, beta, g, g, out, work, slots, norm)  # a_log, dt_bias unread
    return out
