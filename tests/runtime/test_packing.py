"""runtime/packing.pack_streams on synthetic pieces and ladders: a stream takes the prefix of the greedily
gathered pieces with the least (bucket rows + FIXED_ROWS) / used rows (the longer on a tie), in the
smallest bucket that holds it; pieces keep their order, a piece over every bucket goes alone with no
bucket, and pieces are pulled only as far as the gathering that is being cut."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from hypothesis import given
from hypothesis import strategies as st

from flidec.ir.program import Bucket, Rung, TreeProgram
from flidec.ir.template import Sizes
from flidec.runtime.packing import FIXED_ROWS, Piece, pack_streams
from flidec.runtime.split import combine, fits


def ladder(most: int = 65536) -> list[int]:
    """64, 128, 192, 256, 384, ... (2^k and 3 * 2^k) up to `most`: the ladder of a tree without hints."""
    rows, k = [64], 128
    while k <= most:
        rows += [r for r in (k, 3 * k // 2) if r <= most]
        k *= 2
    return rows


def runtime(rows: Sequence[int], segments: int = 65, reads: int = 64) -> TreeProgram:
    # packing reads only the bucket ladder: no tree or template needed
    rungs = tuple(Rung(Bucket(f"r{r}", r, min(segments, r), 2, reads, 255), 0.0) for r in rows)
    return TreeProgram(None, None, rungs, "bounds")  # type: ignore[arg-type]


def pieces(rows: Sequence[int], segments: int = 1, reads: int = 1) -> list[Piece]:
    return [Piece(None, Sizes(r, segments, 2, reads, 4), ((i, 0),)) for i, r in enumerate(rows)]  # type: ignore


def shape(groups: Iterator[tuple[list[Piece], Bucket | None]]) -> list[tuple[int, str | None]]:
    return [(len(g), b.name if b else None) for g, b in groups]


def greedy(ps: list[Piece], t: TreeProgram) -> list[tuple[int, str | None]]:
    """The rule before: every gathering whole."""
    out, group = [], []
    for p in ps:
        if group and not fits(combine(need(group), p.sizes), t.largest):
            out.append(group)
            group = []
        group.append(p)
    return shape((g, t.bucket_for(need(g))) for g in [*out, group])


def need(group: list[Piece]) -> Sizes:
    n = group[0].sizes
    for p in group[1:]:
        n = combine(n, p.sizes)
    return n


def test_quality_like_pieces_fill_r24576_not_r49152() -> None:
    # 10 segments an instance: a 65-segment bucket gathers 6 (36,600 rows: r49152, a quarter empty); 4 fill
    # r24576 (24,400 rows): (24,576 + 1,024) / 24,400 = 1.049 against 1.371 for all 6
    t, ps = runtime(ladder()), pieces([6100] * 24, segments=10, reads=9)
    assert shape(pack_streams(ps, t)) == [(4, "r24576")] * 6
    assert greedy(ps, t) == [(6, "r49152")] * 4


def test_without_the_segment_cap_eight_fill_r49152() -> None:
    # 10 gathered (61,000 rows, r65536: 1.091); 8 cost 1.028 in r49152; the 2 left start the next gathering
    t, ps = runtime(ladder()), pieces([6100] * 24)
    assert shape(pack_streams(ps, t)) == [(8, "r49152")] * 3
    assert greedy(ps, t) == [(10, "r65536"), (10, "r65536"), (4, "r24576")]


def test_a_gathering_one_row_past_a_rung_takes_one_more() -> None:
    # 4 x 6,148 = 24,592 rows, just past r24576; 5 (30,740) fill r32768 better than 4, 3 or all 6 (r49152)
    t = runtime(ladder())
    assert shape(pack_streams(pieces([6148] * 12, segments=10), t)) == [
        (5, "r32768"), (5, "r32768"), (2, "r16384")]


def test_pieces_that_fill_the_largest_bucket_exactly_share_it() -> None:
    t = runtime(ladder())
    assert shape(pack_streams(pieces([1024] * 128), t)) == [(64, "r65536")] * 2
    assert shape(pack_streams(pieces([64] * 3), t)) == [(3, "r192")]


def test_a_tie_goes_to_the_longer_prefix() -> None:
    # 1 piece: (1,024 + 1,024) / 1,024 = 2; 2 pieces in r3072: (3,072 + 1,024) / 2,048 = 2 as well
    t = runtime([1024, 3072], segments=2)
    assert FIXED_ROWS == 1024
    assert shape(pack_streams(pieces([1024] * 4), t)) == [(2, "r3072")] * 2


def test_a_piece_over_every_bucket_goes_alone_in_order() -> None:
    t = runtime(ladder(4096))
    ps = pieces([1000, 1000, 5000, 1000, 9000, 9000, 64])
    groups = list(pack_streams(ps, t))
    assert [[p.owners[0][0] for p in g] for g, _ in groups] == [[0, 1], [2], [3], [4], [5], [6]]
    assert shape(iter(groups)) == [(2, "r2048"), (1, None), (1, "r1024"), (1, None), (1, None), (1, "r64")]


def test_pieces_are_pulled_only_as_far_as_the_gathering() -> None:
    pulled = []

    def source() -> Iterator[Piece]:
        for p in pieces([6100] * 24, segments=10):
            pulled.append(p.owners[0][0])
            yield p

    groups = pack_streams(source(), runtime(ladder()))
    assert len(next(groups)[0]) == 4 and len(pulled) == 7  # the 6 gathered and the one that did not fit
    assert len(next(groups)[0]) == 4 and len(pulled) == 11  # 2 left, the 7th, 3 more and the one over
    assert sum(len(g) for g, _ in groups) == 16 and len(pulled) == 24


@given(st.lists(st.tuples(st.integers(1, 9000), st.integers(1, 20)), max_size=40))
def test_every_piece_once_in_order_each_stream_in_its_smallest_bucket(drawn: list[tuple[int, int]]) -> None:
    t = runtime(ladder(8192), segments=40)
    ps = [Piece(None, Sizes(r, s, 2, 1, 4), ((i, 0),)) for i, (r, s) in enumerate(drawn)]  # type: ignore
    groups = list(pack_streams(ps, t))
    assert [p for g, _ in groups for p in g] == ps
    for g, bucket in groups:
        assert bucket == t.bucket_for(need(g))
        assert bucket is not None or len(g) == 1
