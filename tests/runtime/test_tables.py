"""The host tables of the fork kernels: query tiles and path levels on random segment forests, and every table
against its element-by-element definition (the loops the array code replaces)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flidec.runtime import tables
from flidec.runtime.meta import Segment, StreamMeta, build_meta
from flidec.testing.streams import path_row

LENGTHS = st.integers(0, 150)


@st.composite
def segment_forests(draw, max_nodes: int = 8, lengths=LENGTHS, max_gap: int = 5
                    ) -> tuple[tuple[Segment, ...], int]:
    """Random forests laid out in a random segment order with up to `max_gap` padding rows before each
    segment: the segments and the rows they span."""
    n = draw(st.integers(1, max_nodes))
    parents = [-1] + [draw(st.integers(-1, i - 1)) for i in range(1, n)]
    sizes = [draw(lengths) for _ in range(n)]
    pos0, level = [0] * n, [0] * n
    for i, p in enumerate(parents):
        if p >= 0:
            pos0[i], level[i] = pos0[p] + sizes[p], level[p] + 1
    starts, row = [0] * n, 0
    for i in draw(st.permutations(range(n))):
        row += draw(st.integers(0, max_gap))
        starts[i] = row
        row += sizes[i]
    return tuple(Segment(starts[i], sizes[i], pos0[i], parents[i], level[i]) for i in range(n)), row


@st.composite
def forests(draw) -> StreamMeta:
    """Random forests packed in a random segment order, with padding rows between segments."""
    segs, rows = draw(segment_forests())
    return build_meta(segs, (), rows + draw(st.integers(0, 5)))


@settings(max_examples=60, deadline=None)
@given(forests(), st.sampled_from([16, 64]))
def test_query_tiles_cover_each_segment_row_once_in_aligned_tiles(meta: StreamMeta, block_m: int) -> None:
    t = tables.query_tiles(meta, block_m)
    seen: list[int] = []
    for seg, row0, pos0, count in t.tolist():
        s = meta.segments[seg]
        assert count > 0
        assert pos0 // block_m == (pos0 + count - 1) // block_m, "a tile stays inside one aligned block"
        assert s.pos0 <= pos0 and pos0 + count <= s.end
        assert row0 == s.start + pos0 - s.pos0
        seen += range(row0, row0 + count)
    expected = [r for s in meta.segments for r in range(s.start, s.start + s.length)]
    assert sorted(seen) == sorted(expected) and len(seen) == len(set(seen))
    assert len(t) <= tables.max_query_tiles(meta.num_rows, len(meta.segments), block_m)


@settings(max_examples=60, deadline=None)
@given(forests())
def test_path_levels_map_every_path_position_to_its_row(meta: StreamMeta) -> None:
    levels = tables.path_levels(meta, depth=tables.path_depth(meta) + 1, num_segments=len(meta.segments) + 2)
    for i, s in enumerate(meta.segments):
        for p in range(s.end):
            # the kernel's rule: the deepest level whose first position is <= p
            row = 0
            for start, pos0 in levels[i].tolist():
                if p >= pos0:
                    row = start + p - pos0
            assert row == path_row(meta.segments, i, p)
    assert (levels[len(meta.segments):, :, 1] == tables.POS_NONE).all()


def test_tables_pad_to_a_bucket_and_refuse_to_overflow_it() -> None:
    segs = (Segment(0, 70, 0, -1, 0), Segment(70, 10, 70, 0, 1))
    meta = build_meta(segs, (), 80)
    t = tables.query_tiles(meta, 64, num_tiles=6)  # longest first: the tiles of positions 64.. then 0..
    assert t.tolist() == [[0, 64, 64, 6], [1, 70, 70, 10], [0, 0, 0, 64], [0, 0, 0, 0], [0, 0, 0, 0],
                          [0, 0, 0, 0]]
    assert t.dtype == torch.int32
    with pytest.raises(ValueError, match="needs 3 query tiles"):
        tables.query_tiles(meta, 64, num_tiles=2)
    with pytest.raises(ValueError, match="needs depth 2"):
        tables.path_levels(meta, depth=1)


# ---- the tables, element by element: what the array code must equal ----------------------------------------


def _query_tiles(meta: StreamMeta, block_m: int, num_tiles: int) -> list[list[int]]:
    rows = []
    for i, s in enumerate(meta.segments):
        pos = s.pos0
        while pos < s.end:
            count = min((pos // block_m + 1) * block_m, s.end) - pos
            rows.append([i, s.start + pos - s.pos0, pos, count])
            pos += count
    rows.sort(key=lambda r: -(r[2] // block_m))  # longest first (stable: segment order among equals)
    return rows + [[0, 0, 0, 0]] * (num_tiles - len(rows))


def _path_levels(meta: StreamMeta, depth: int, num_segments: int) -> list:
    levels = [[[0, tables.POS_NONE]] * depth for _ in range(num_segments)]
    for i, chain in enumerate(meta.ancestors):
        for d, a in enumerate((*chain, i)):
            levels[i][d] = [meta.segments[a].start, meta.segments[a].pos0]
    return levels


def _gdn_tables(meta: StreamMeta, per_level: int, num_chunks: int) -> tuple[list, list, list]:
    slots = tables.state_slots(meta)
    items = [[0, 0, 0, 0, 0, -1, -1, 0] for _ in range(len(meta.levels) * per_level)]
    tails = [[-1] * 64 for _ in items]
    chunks = [[-1, 0] for _ in range(num_chunks)]
    first = 0
    for lvl, level in enumerate(meta.levels):
        for j, s in enumerate(k for k in level if meta.segments[k].length > 0):
            seg, tail, src = meta.segments[s], meta.gdn_tail[s], meta.gdn_src[s]
            i = lvl * per_level + j
            items[i] = [s, seg.start, seg.length, meta.gdn_chunk0[s], len(tail), slots.get(src, -1),
                        slots.get(s, -1), first]
            tails[i][: len(tail)] = tail
            span = -(-(len(tail) + seg.length) // 64)
            chunks[first : first + span] = [[i, c] for c in range(span)]
            first += span
    return items, tails, chunks


@settings(max_examples=100, deadline=None)
@given(forests(), st.sampled_from([16, 64]), st.integers(0, 3))
def test_tables_are_their_element_by_element_definitions(meta: StreamMeta, block_m: int, spare: int) -> None:
    n, depth = len(meta.segments), tables.path_depth(meta)
    num_tiles = tables.max_query_tiles(meta.num_rows, n, block_m) + spare
    t = tables.query_tiles(meta, block_m, num_tiles)
    assert t.dtype == torch.int32 and t.tolist() == _query_tiles(meta, block_m, num_tiles)
    assert tables.query_tiles(meta, block_m).tolist() == [r for r in _query_tiles(meta, block_m, 0) if r[3]]
    levels = tables.path_levels(meta, depth + spare, n + spare)
    assert levels.dtype == torch.int32 and levels.tolist() == _path_levels(meta, depth + spare, n + spare)
    per_level = max(len(level) for level in meta.levels) + spare
    num_chunks = tables.max_chunks(meta.num_rows, n) + spare
    g = tables.gdn_tables(meta, len(meta.levels), per_level, n, num_chunks)
    items, tails, chunks = _gdn_tables(meta, per_level, num_chunks)
    assert (g.items.tolist(), g.tails.tolist(), g.chunks.tolist()) == (items, tails, chunks)
    assert g.items.dtype == g.tails.dtype == g.chunks.dtype == torch.int32
