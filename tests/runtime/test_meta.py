"""build_meta: the stream structure every fork op reads, checked on small hand-made forests and, row by row
against its definition (path_row), on random ones."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tables import segment_forests  # a sibling test module: imported at collection, never mid-test

from flidec.runtime.meta import (
    CHUNK,
    CONV_TAPS,
    Read,
    Segment,
    build_meta,
    linear_stream,
    pad_meta,
)
from flidec.testing.streams import path_row


def forest():
    # instance 0: root [0,100) -> A [100,120) -> B [120,140); root -> C [140,145)
    # instance 1: root2 of 3 tokens at rows 150..153 -> D of 2 tokens
    return (
        Segment(start=0, length=100, pos0=0, parent=-1, level=0),
        Segment(start=100, length=20, pos0=100, parent=0, level=1),
        Segment(start=120, length=20, pos0=120, parent=1, level=2),
        Segment(start=140, length=5, pos0=100, parent=0, level=1),
        Segment(start=150, length=3, pos0=0, parent=-1, level=0),
        Segment(start=153, length=2, pos0=3, parent=4, level=1),
    )


def test_positions_and_segment_ids():
    meta = build_meta(forest(), (Read(139, (7, 8)), Read(154, (9,))), 160)
    assert meta.positions[100:120].tolist() == list(range(100, 120))
    assert meta.positions[140:145].tolist() == list(range(100, 105))
    assert meta.positions[153:155].tolist() == [3, 4]
    assert meta.segment_ids[145:150].tolist() == [-1] * 5  # padding rows
    assert meta.segment_ids[155:].tolist() == [-1] * 5
    assert meta.levels == ((0, 4), (1, 3, 5), (2,))
    assert meta.ancestors[2] == (0, 1)


def test_key_ranges_list_ancestors_root_first_then_self():
    meta = build_meta(forest(), (), 160)
    assert meta.key_ranges[2].tolist() == [[0, 100], [100, 120], [120, 140]]
    assert meta.key_ranges[3].tolist() == [[0, 100], [140, 145], [0, 0]]
    assert meta.key_ranges[5].tolist() == [[150, 153], [153, 155], [0, 0]]


def test_conv_predecessors_cross_fork_points():
    meta = build_meta(forest(), (), 160)
    assert meta.conv_prev[140].tolist() == [97, 98, 99]  # C's first row reads the root's tail
    assert meta.conv_prev[141].tolist() == [98, 99, 140]
    assert meta.conv_prev[120].tolist() == [117, 118, 119]
    assert meta.conv_prev[0].tolist() == [-1, -1, -1]
    assert meta.conv_prev[152].tolist() == [-1, 150, 151]
    assert meta.conv_prev[153].tolist() == [150, 151, 152]


def test_conv_predecessors_are_each_rows_path_positions():
    """Every row's taps, against path_row asked position by position (segments of 0 to 3 tokens included)."""
    segments = forest() + (Segment(155, 0, 5, 5, 2), Segment(155, 1, 5, 5, 2), Segment(156, 2, 6, 7, 3))
    meta = build_meta(segments, (), 160)
    for i, s in enumerate(segments):
        for r in range(s.length):
            p = s.pos0 + r
            want = [path_row(segments, i, p - k) if p - k >= 0 else -1 for k in range(CONV_TAPS - 1, 0, -1)]
            assert meta.conv_prev[s.start + r].tolist() == want, (i, r)


def test_pad_meta_equals_the_meta_of_the_longer_stream():
    reads = (Read(139, (7, 8)), Read(154, (9,)))
    padded, built = pad_meta(build_meta(forest(), reads, 160), 200), build_meta(forest(), reads, 200)
    for name in ("positions", "segment_ids", "key_ranges", "conv_prev", "read_rows", "read_labels"):
        assert torch.equal(getattr(padded, name), getattr(built, name)), name
    assert (padded.segments, padded.reads, padded.levels, padded.gdn_tail) == (
        built.segments, built.reads, built.levels, built.gdn_tail)


def test_gdn_chunk_alignment():
    meta = build_meta(forest(), (), 160)
    assert CHUNK == 64
    # A starts at 100: its chunk [64,128) starts from the root's state at 64, recomputing root rows 64..99
    assert (meta.gdn_chunk0[1], meta.gdn_src[1], meta.gdn_tail[1]) == (64, 0, tuple(range(64, 100)))
    # B starts at 120, same chunk as A's start: the state at 64 is still the root's; its tail crosses A
    assert (meta.gdn_chunk0[2], meta.gdn_src[2]) == (64, 0)
    assert meta.gdn_tail[2] == tuple(range(64, 100)) + tuple(range(100, 120))
    assert (meta.gdn_chunk0[5], meta.gdn_src[5], meta.gdn_tail[5]) == (0, -1, (150, 151, 152))
    assert meta.gdn_tail[0] == () and meta.gdn_src[0] == -1


def test_state_owner_is_the_ancestor_that_crossed_the_boundary():
    segs = (
        Segment(0, 70, 0, -1, 0),  # crosses 64
        Segment(70, 100, 70, 0, 1),  # [70,170): crosses 128
        Segment(170, 10, 170, 1, 2),  # chunk0 = 128, computed by segment 1
    )
    meta = build_meta(segs, (), 180)
    assert (meta.gdn_chunk0[2], meta.gdn_src[2]) == (128, 1)
    assert meta.gdn_tail[2] == tuple(range(70 + 58, 170))
    assert path_row(segs, 2, 10) == 10 and path_row(segs, 2, 100) == 100


def test_reads_pad_labels():
    meta = build_meta(forest(), (Read(139, (7, 8)), Read(154, (9,))), 160)
    assert meta.read_rows.tolist() == [139, 154]
    assert meta.read_labels.tolist() == [[7, 8], [9, 0]]
    assert meta.read_nlabels.tolist() == [2, 1]


@pytest.mark.parametrize(
    "bad",
    [
        (Segment(0, 10, 0, -1, 0), Segment(10, 5, 9, 0, 1)),  # child not at its parent's end
        (Segment(0, 10, 3, -1, 0),),  # root not at position 0
        (Segment(0, 10, 0, -1, 0), Segment(10, 5, 10, 0, 2)),  # wrong level
    ],
)
def test_malformed_forests_are_refused(bad):
    with pytest.raises(AssertionError):
        build_meta(bad, (), 20)


def test_linear_stream_is_one_root():
    s = linear_stream([5, 6, 7, 8], {3: (1, 2)})
    assert s.tokens.tolist() == [5, 6, 7, 8]
    assert len(s.meta.segments) == 1 and s.meta.read_rows.tolist() == [3]
    assert torch.equal(s.meta.positions, torch.arange(4))


@st.composite
def streams(draw) -> tuple[tuple[Segment, ...], tuple[Read, ...], int]:
    """Random forests in a random row order with padding between segments, and reads on segment rows."""
    lengths = st.sampled_from([0, 1, 2, 3, 63, 64, 65]) | st.integers(0, 150)
    segs, row = draw(segment_forests(max_nodes=10, lengths=lengths, max_gap=3))
    on = [s.start + k for s in segs for k in range(s.length)]
    rows = draw(st.lists(st.sampled_from(on), max_size=5)) if on else []
    reads = tuple(Read(r, tuple(draw(st.lists(st.integers(0, 9999), max_size=4)))) for r in rows)
    return segs, reads, row + draw(st.integers(0, 3))


@settings(max_examples=200, deadline=None)
@given(streams())
def test_meta_is_its_definition_row_by_row(stream) -> None:
    segs, reads, num_rows = stream
    meta = build_meta(segs, reads, num_rows)
    positions, segment_ids = [0] * num_rows, [-1] * num_rows
    conv_prev = [[-1] * (CONV_TAPS - 1)] * num_rows
    for i, s in enumerate(segs):
        for r in range(s.length):
            p = s.pos0 + r
            positions[s.start + r], segment_ids[s.start + r] = p, i
            taps = [p - k for k in range(CONV_TAPS - 1, 0, -1)]
            conv_prev[s.start + r] = [path_row(segs, i, q) if q >= 0 else -1 for q in taps]
    assert torch.equal(meta.positions, torch.tensor(positions, dtype=torch.int64))
    assert torch.equal(meta.segment_ids, torch.tensor(segment_ids, dtype=torch.int64))
    want = torch.tensor(conv_prev, dtype=torch.int64).view(num_rows, CONV_TAPS - 1)
    assert torch.equal(meta.conv_prev, want)
    depth = meta.key_ranges.shape[1]
    for i, s in enumerate(segs):
        path = (*meta.ancestors[i], i)
        want = ([[segs[a].start, segs[a].start + segs[a].length] for a in path]
                + [[0, 0]] * (depth - len(path)))
        assert meta.key_ranges[i].tolist() == want
        tail = tuple(path_row(segs, i, p) for p in range(meta.gdn_chunk0[i], s.pos0))
        assert meta.gdn_tail[i] == (tail if s.parent >= 0 else ())
    width = max([1] + [len(r.labels) for r in reads])
    labels = [[*r.labels] + [0] * (width - len(r.labels)) for r in reads]
    assert torch.equal(meta.read_labels, torch.tensor(labels, dtype=torch.int64).view(len(reads), width))
    assert meta.read_rows.tolist() == [r.row for r in reads] and meta.read_rows.dtype == torch.int64
    assert meta.read_nlabels.tolist() == [len(r.labels) for r in reads]


def test_a_read_off_every_segment_is_refused():
    with pytest.raises(AssertionError, match="read 1 is not on a segment row"):
        build_meta(forest(), (Read(0, (1,)), Read(147, (2,)), Read(500, ())), 160)
