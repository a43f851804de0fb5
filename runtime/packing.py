"""Packing: consecutive pieces (whole instances or sub-plans of one) gathered into streams, each stream cut
where it costs least per used row and run in the smallest bucket that holds it.

FIXED_ROWS is a replay's fixed cost expressed in bucket rows: the cut minimizes (bucket rows + FIXED_ROWS) /
used rows. The value comes from fits of replay time against bucket and used rows on the H200
(BENCHMARKS.md); the workloads there pack into the same streams for any value in the range those fits give.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from functools import reduce
from itertools import accumulate, chain

from flidec.ir.program import Bucket, TreeProgram
from flidec.ir.template import Sizes
from flidec.runtime.binder import Plan
from flidec.runtime.split import combine, fits
from flidec.runtime.tables import MAX_SAVED

FIXED_ROWS = 1024


@dataclass(frozen=True)
class Piece:
    """One stream's share of a run's requests: one request's whole plan, a sub-plan of it, or the plans of
    several requests forked from one shared root (runtime/sharing.py)."""

    plan: Plan
    sizes: Sizes
    owners: tuple[tuple[int, int], ...]  # per read of the plan, in order: (request index, its read index)
    whole: bool = False  # the plan is its one request's whole plan
    saver: int = -1  # the request whose session keeps the point the plan saves (-1: none)


def _saved_fit(pieces: list[Piece]) -> bool:
    """At most MAX_SAVED stored roots and as many saved points in one stream (a bucket stages that many)."""
    held = sum(getattr(p.plan, "held", None) is not None for p in pieces)
    saves = sum(getattr(p.plan, "save", 0) > 0 for p in pieces)
    return held <= MAX_SAVED and saves <= MAX_SAVED


def pack_streams(pieces: Iterable[Piece], ladder: TreeProgram) -> Iterator[tuple[list[Piece], Bucket | None]]:
    """The pieces in streams, in order, each stream in the smallest bucket that holds it. Consecutive pieces
    are gathered while together they fit the largest bucket; once the next one would not (or none is left),
    a stream takes the prefix of the gathered pieces that costs least per used row, (its bucket's rows +
    FIXED_ROWS) / its rows, the longer on a tie, and the rest stay gathered. A stream takes at most
    MAX_SAVED stored roots and MAX_SAVED saved points (runtime/tables.py). Taking them all would often land
    just past a rung of the ladder: six QuALITY-like instances of 6,106 rows (36,636) pad r49152 by a quarter
    where four fill r24576. A piece that fits no bucket (reference engine only) goes alone (bucket None).
    Only the gathered pieces are held, so each piece is planned just before the stream that needs it."""
    group: list[Piece] = []
    for p in chain(pieces, [None]):  # None: the end, which sends whatever is gathered
        while group and (p is None or not fits(need([*group, p]), ladder.largest)
                         or not _saved_fit([*group, p])):
            k, bucket = cheapest_prefix(group, ladder)
            yield group[:k], bucket
            group = group[k:]
        if p is not None and not fits(p.sizes, ladder.largest):
            yield [p], None
        elif p is not None:
            group.append(p)


def need(pieces: list[Piece]) -> Sizes:
    return reduce(combine, (p.sizes for p in pieces))


def cheapest_prefix(group: list[Piece], ladder: TreeProgram) -> tuple[int, Bucket]:
    """The length of the prefix of `group` (all of which fits the largest bucket) with the least
    (bucket rows + FIXED_ROWS) / used rows, the longest of those, and its bucket."""
    needs = list(accumulate((p.sizes for p in group), combine))
    buckets = [ladder.bucket_for(n) for n in needs]
    cost = [Fraction(b.rows + FIXED_ROWS, n.rows)  # type: ignore[union-attr]
            for b, n in zip(buckets, needs, strict=True)]
    k = min(range(len(group)), key=lambda k: (cost[k], -k))
    return k + 1, buckets[k]  # type: ignore[return-value]
