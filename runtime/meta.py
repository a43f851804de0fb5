"""Stream meta: what the fork ops need to know about a packed stream, derived from its segments.

The binder produces a Stream (token ids + segments + reads); `build_meta` derives the rest, on the host, so
that every consumer (the reference executor, generated kernels, tests) reads the same structure:
positions, each segment's ancestor key ranges, the conv predecessors of every row across fork points, and
for Gated DeltaNet the chunk-aligned start of each segment (the state it starts from and the ancestor rows
it recomputes). Relies on the segment-tree property: a child begins at its parent's end (its fork point),
so every ancestor segment is a whole prefix of a child's path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

CHUNK = 64  # Gated DeltaNet chunk length, aligned to absolute (logical) positions: E3 depends on it
CONV_TAPS = 4  # depthwise causal conv kernel; a row reads the CONV_TAPS - 1 rows before it on its path


@dataclass(frozen=True, slots=True)
class Segment:
    """One node's tokens in the stream: rows [start, start + length), logical positions from pos0."""

    start: int
    length: int
    pos0: int
    parent: int  # index into the stream's segments; -1 for a root (an instance's state)
    level: int  # 0 for roots

    @property
    def end(self) -> int:
        """Logical position one past the last token: the fork point of this segment's children."""
        return self.pos0 + self.length


@dataclass(frozen=True, slots=True)
class Read:
    """A row whose final hidden state meets the answer head, and the label token ids it is read at."""

    row: int
    labels: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StreamMeta:
    segments: tuple[Segment, ...]
    reads: tuple[Read, ...]
    levels: tuple[tuple[int, ...], ...]  # segment indices per tree level, roots first
    ancestors: tuple[tuple[int, ...], ...]  # per segment: its ancestors, root first (itself excluded)
    positions: torch.Tensor  # [T] int64 logical position of each row
    segment_ids: torch.Tensor  # [T] int64
    key_ranges: torch.Tensor  # [S, D, 2] int64 stream row ranges [lo, hi): ancestors root first, then itself
    conv_prev: torch.Tensor  # [T, CONV_TAPS-1] int64 rows of positions p-3, p-2, p-1 on the path; -1 before 0
    gdn_chunk0: tuple[int, ...]  # per segment: logical start of its first (possibly straddling) chunk
    gdn_src: tuple[int, ...]  # per segment: the segment that computed the state at gdn_chunk0; -1: zeros
    gdn_tail: tuple[tuple[int, ...], ...]  # per segment: rows of positions [gdn_chunk0, pos0) on its path
    read_rows: torch.Tensor  # [R] int64
    read_labels: torch.Tensor  # [R, Lmax] int64 label token ids, padded with 0
    read_nlabels: torch.Tensor  # [R] int64
    # roots whose positions a saved state holds (runtime/saved): their rows, after every computed row, are
    # never computed; the fork ops read their keys, values, conv window and GDN state from the saved point
    stored: tuple[int, ...] = ()
    # saved points the stream makes: (segment, positions) of each, the first `positions` positions of the
    # path ending in that segment (a multiple of CHUNK, past its stored ancestor's, before its end)
    captures: tuple[tuple[int, int], ...] = ()

    @property
    def live_rows(self) -> int:
        """Rows the model computes: all of them, less the stored segments' (which come last)."""
        return min((self.segments[s].start for s in self.stored), default=self.num_rows)

    @property
    def num_rows(self) -> int:
        return int(self.positions.numel())

    def to(self, device: torch.device | str) -> StreamMeta:
        moved = {
            name: getattr(self, name).to(device)
            for name in ("positions", "segment_ids", "key_ranges", "conv_prev", "read_rows", "read_labels",
                         "read_nlabels")
        }
        return replace(self, **moved)


def check_segments(segments: tuple[Segment, ...], num_rows: int, stored: tuple[int, ...] = ()) -> None:
    """The structural invariants every consumer relies on; a violation is a binder bug, so it asserts."""
    if stored:
        first = min(segments[s].start for s in stored)
        for i, s in enumerate(segments):
            held = i in stored
            assert not held or (s.parent < 0 and s.length > 0 and s.length % CHUNK == 0), \
                f"stored segment {i} must be a root of a whole number of chunks"
            assert held == (s.start >= first and s.length > 0) or s.length == 0, \
                f"segment {i}: stored segments' rows come after every computed row"
    covered = 0
    for i, s in enumerate(segments):
        assert s.length >= 0 and s.start >= 0 and s.start + s.length <= num_rows, f"segment {i} out of rows"
        if s.parent < 0:
            assert s.pos0 == 0 and s.level == 0, f"root segment {i} must start at position 0, level 0"
        else:
            assert s.parent < i, f"segment {i}: parents come before children"
            p = segments[s.parent]
            assert s.pos0 == p.end, f"segment {i} must start at its parent's end"
            assert s.level == p.level + 1, f"segment {i}: level must be its parent's plus one"
        covered += s.length
    assert covered <= num_rows


def _rows_before(segments: tuple[Segment, ...], seg: int, lo: int) -> list[int]:
    """Stream rows of the logical positions [lo, pos0) on the path that ends in segment `seg`: its
    ancestors' rows, oldest first (a range of rows per ancestor: each ancestor ends where the next begins)."""
    ranges = []
    s = segments[seg]
    hi = s.pos0
    while hi > lo:
        s = segments[s.parent]
        a = max(lo, s.pos0)
        ranges.append(range(s.start + a - s.pos0, s.start + hi - s.pos0))
        hi = a
    return [r for rs in reversed(ranges) for r in rs]


def path_chains(ancestors: Sequence[tuple[int, ...]], depth: int) -> np.ndarray:
    """[segments, depth] int64: each segment's path (its ancestors root first, then itself), -1 after it."""
    chain = np.full((len(ancestors), depth), -1, dtype=np.int64)
    for i, a in enumerate(ancestors):
        chain[i, : len(a) + 1] = (*a, i)
    return chain


def build_meta(segments: tuple[Segment, ...], reads: tuple[Read, ...], num_rows: int,
               stored: tuple[int, ...] = (), captures: tuple[tuple[int, int], ...] = ()) -> StreamMeta:
    """Derive the full meta of a stream of `num_rows` rows (rows outside every segment are padding);
    `stored`, `captures`: the roots a saved state holds and the saved points to make (StreamMeta).
    Per-row tables are numpy expressions over all segments at once; only the few rows per segment that
    reach back into its ancestors (conv taps, the GDN tail) are looked up segment by segment."""
    segments = tuple(segments)
    check_segments(segments, num_rows, stored)
    ancestors: list[tuple[int, ...]] = []
    for s in segments:
        ancestors.append(() if s.parent < 0 else ancestors[s.parent] + (s.parent,))
    depth = 1 + max((len(a) for a in ancestors), default=0)
    starts = np.array([s.start for s in segments], dtype=np.int64)
    lengths = np.array([s.length for s in segments], dtype=np.int64)

    # every segment row: its stream row, its segment and its offset in the segment
    seg_of = np.repeat(np.arange(len(segments), dtype=np.int64), lengths)
    before = np.cumsum(lengths) - lengths  # rows of the segments before each, in segment order
    offset = np.arange(len(seg_of), dtype=np.int64) - np.repeat(before, lengths)
    rows = np.repeat(starts, lengths) + offset
    # the binder packs segments back to back from row 0: their rows are a slice, written without a scatter
    at = slice(0, len(rows)) if np.array_equal(starts, before) else rows
    positions = np.zeros(num_rows, dtype=np.int64)
    positions[at] = np.repeat(np.array([s.pos0 for s in segments], dtype=np.int64), lengths) + offset
    segment_ids = np.full(num_rows, -1, dtype=np.int64)
    segment_ids[at] = seg_of
    conv_prev = np.full((num_rows, CONV_TAPS - 1), -1, dtype=np.int64)
    for k in range(1, CONV_TAPS):  # k or more rows into its segment, position p - k is k rows back in it
        conv_prev[at, CONV_TAPS - 1 - k] = np.where(offset >= k, rows - k, -1)  # a column: ~2x a [rows, 3] op
    for i, s in enumerate(segments):  # a segment's first rows reach back into its ancestors
        if s.length > 0 and s.pos0 > 0:
            back = _rows_before(segments, i, max(0, s.pos0 - (CONV_TAPS - 1)))  # the positions before pos0
            for r in range(min(CONV_TAPS - 1, s.length)):
                for k in range(r + 1, min(CONV_TAPS, r + len(back) + 1)):  # p - k < pos0, and p - k >= 0
                    conv_prev[s.start + r, CONV_TAPS - 1 - k] = back[r - k]

    # key_ranges: the row range of each segment on the path, root first, then zeros
    chain = path_chains(ancestors, depth)
    key_ranges = np.zeros((len(segments), depth, 2), dtype=np.int64)
    on = chain >= 0
    key_ranges[on, 0] = starts[chain[on]]
    key_ranges[on, 1] = starts[chain[on]] + lengths[chain[on]]

    chunk0, src, tail = [], [], []
    for i, s in enumerate(segments):
        b = (s.pos0 // CHUNK) * CHUNK
        owner = -1
        for a in reversed(ancestors[i]):
            if (segments[a].pos0 // CHUNK) * CHUNK < b:
                owner = a
                break
        assert owner >= 0 or b == 0
        chunk0.append(b)
        src.append(owner)
        tail.append(tuple(_rows_before(segments, i, b)) if s.parent >= 0 else ())

    levels: dict[int, list[int]] = {}
    for i, s in enumerate(segments):
        levels.setdefault(s.level, []).append(i)

    read_rows = np.array([r.row for r in reads], dtype=np.int64)
    on_segment = (read_rows >= 0) & (read_rows < num_rows)  # in the stream, and then on a segment's row
    on_segment[on_segment] = segment_ids[read_rows[on_segment]] >= 0
    assert on_segment.all(), f"read {np.flatnonzero(~on_segment)[0]} is not on a segment row"
    width = max(1, max((len(r.labels) for r in reads), default=0))
    read_labels = np.array([[*r.labels] + [0] * (width - len(r.labels)) for r in reads],
                           dtype=np.int64).reshape(len(reads), width)  # numpy: ~3x torch.tensor on lists

    return StreamMeta(
        segments=segments,
        reads=tuple(reads),
        levels=tuple(tuple(levels[k]) for k in sorted(levels)),
        ancestors=tuple(ancestors),
        positions=torch.from_numpy(positions),
        segment_ids=torch.from_numpy(segment_ids),
        key_ranges=torch.from_numpy(key_ranges),
        conv_prev=torch.from_numpy(conv_prev),
        gdn_chunk0=tuple(chunk0),
        gdn_src=tuple(src),
        gdn_tail=tuple(tail),
        read_rows=torch.from_numpy(read_rows),
        read_labels=torch.from_numpy(read_labels),
        read_nlabels=torch.from_numpy(np.array([len(r.labels) for r in reads], dtype=np.int64)),
        stored=tuple(stored),
        captures=tuple(captures),
    )


def pad_meta(meta: StreamMeta, num_rows: int) -> StreamMeta:
    """`meta` with padding rows appended up to `num_rows`: what build_meta gives for the same segments and
    reads in a longer stream, without deriving the rest again."""
    extra = num_rows - meta.num_rows
    assert extra >= 0, "padding cannot remove rows"
    return replace(
        meta,
        positions=torch.cat([meta.positions, torch.zeros(extra, dtype=torch.int64)]),
        segment_ids=torch.cat([meta.segment_ids, torch.full((extra,), -1, dtype=torch.int64)]),
        conv_prev=torch.cat([meta.conv_prev, torch.full((extra, CONV_TAPS - 1), -1, dtype=torch.int64)]),
    )


@dataclass(frozen=True, slots=True)
class Stream:
    """One forward pass: token ids of every packed segment (padding rows hold token 0) and their meta."""

    tokens: torch.Tensor  # [T] int64
    meta: StreamMeta


def linear_stream(tokens: list[int], read_positions: dict[int, tuple[int, ...]]) -> Stream:
    """The plain single-sequence pass of one path: one root segment, reads at the given positions."""
    seg = (Segment(start=0, length=len(tokens), pos0=0, parent=-1, level=0),)
    reads = tuple(Read(row=p, labels=labels) for p, labels in sorted(read_positions.items()))
    return Stream(torch.tensor(tokens, dtype=torch.int64), build_meta(seg, reads, len(tokens)))
