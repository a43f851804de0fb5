"""The forked Gated DeltaNet's state walk: the recurrent state carried chunk by chunk along each work item.

Consumes the ChunkWork the prep kernel wrote (w, ke, u, decay), the items table of runtime/tables.py and the
fp32 state slots [slots, Hv, Dk, Dv]; produces v_new (in u's place), the state entering each chunk and, after
an item's last full chunk, the state in its dst slot, which deeper levels start from. One launch per tree
level, two dependent products per chunk. With bf16x3 tiles w and ke arrive split into bf16 planes, so the
sequential loop splits only the state and v_new. Which program walks an item does not change its bits (E3).
"""

from __future__ import annotations

import triton
import triton.language as tl

from flidec.codegen.gdn_common import _mul, _split


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
