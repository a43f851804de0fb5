"""Triton helpers the three forked Gated DeltaNet kernels share (gdn_prep.py, gdn_walk.py, gdn_out.py).

Consumes fp32 tiles and the int32 chunks and items tables of runtime/tables.py; produces bf16x3 operands and
products written out by hand (`_split`, `_parts`, `_mul`: three bf16 tensor-core products carrying about 16
mantissa bits, each operand split once however many products use it) and a chunk slot's chunk index, first
row, tail length and total positions (`_chunk_of`). Relies on tl.dot of bf16 operands accumulating in fp32.
"""

from __future__ import annotations

import triton
import triton.language as tl


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
