"""The meta tables a bucket's kernels read, filled on the host from a stream's StreamMeta at bind time.

Consumes a runtime.meta.StreamMeta (and the stream's token ids) and a Bucket; produces int tensors padded to
the bucket's fixed sizes, so one recorded launch sequence (a CUDA graph) replays any request that fits. A
recording names each meta buffer's rule in its `fill` field (FILL_RULES); `fill_meta` applies the rules into
fresh tensors, `write_meta` into given arrays (a meta stage's host buffers). The one implementation:
codegen's launchers, the recording player and the graph passes import it from here, so the runtime fills
exactly what codegen's player fills; it imports nothing but torch, numpy and flidec.ir/runtime. Relies on
the segment-tree property of StreamMeta (runtime/meta.py; path_levels, state_slots).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from flidec.ir.program import Bucket
from flidec.runtime.meta import CHUNK, CONV_TAPS, StreamMeta, path_chains

# ---- the static meta buffers of a lowered graph ------------------------------------------------------------

SEGMENT_FIELDS = ("start", "length", "pos0", "parent", "level")  # columns of the `segments` table
PADDING_LEVEL = -1  # `level` of a padding row of the segments table: no segment


@dataclass(frozen=True, slots=True)
class MetaBuffer:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype


def meta_buffers(bucket: Bucket) -> tuple[MetaBuffer, ...]:
    """The static meta buffers of a bucket: what the binder writes before each replay (int64, fixed sizes)."""
    i64 = torch.int64
    return (
        MetaBuffer("tokens", (bucket.rows,), i64),
        MetaBuffer("positions", (bucket.rows,), i64),
        MetaBuffer("conv_prev", (bucket.rows, CONV_TAPS - 1), i64),
        MetaBuffer("segments", (bucket.segments, len(SEGMENT_FIELDS)), i64),
        MetaBuffer("read_rows", (bucket.reads,), i64),
        MetaBuffer("read_labels", (bucket.reads, bucket.labels), i64),
        MetaBuffer("read_nlabels", (bucket.reads,), i64),
    )


META_BUFFERS = tuple(b.name for b in meta_buffers(Bucket("", 1, 1, 1, 1, 1)))


def static_tables(tokens: torch.Tensor, meta: StreamMeta, bucket: Bucket) -> dict[str, torch.Tensor]:
    """A stream's meta laid out in the bucket's static buffers; padding is inert (rows: token 0, position 0,
    no conv predecessors; segments: level PADDING_LEVEL; reads: no labels)."""
    out = {b.name: np.empty(b.shape, dtype=np.int64) for b in meta_buffers(bucket)}
    write_static(out, tokens, meta, bucket)
    return {name: torch.from_numpy(a) for name, a in out.items()}


def write_static(out: Mapping[str, np.ndarray], tokens: torch.Tensor, meta: StreamMeta, bucket: Bucket
                 ) -> None:
    """`static_tables` written into `out` (the static buffers it names, each whole, padding included): a
    meta stage's host buffers are written once, with no table allocated and copied on the way."""
    rows, segs, reads = meta.num_rows, len(meta.segments), len(meta.reads)
    lmax = meta.read_labels.shape[1]
    if not bucket.fits(rows, segs, 1, reads, lmax if reads else 0):
        raise ValueError(f"a stream of {rows} rows, {segs} segments, {reads} reads of <= {lmax} labels does "
                         f"not fit bucket {bucket.name}")
    for name, value, pad in (("tokens", tokens, 0), ("positions", meta.positions, 0),
                             ("conv_prev", meta.conv_prev, -1), ("read_rows", meta.read_rows, 0),
                             ("read_nlabels", meta.read_nlabels, 0)):
        if name in out:
            a, n = out[name], value.shape[0]
            a[:n] = value.numpy()
            a[n:] = pad
    if "segments" in out:
        a = out["segments"]
        a[segs:] = _PADDING_SEGMENT
        if segs:
            a[:segs] = [[getattr(s, f) for f in SEGMENT_FIELDS] for s in meta.segments]
    if "read_labels" in out:
        a = out["read_labels"]
        a[reads:] = 0
        a[:reads, lmax:] = 0
        a[:reads, :lmax] = meta.read_labels.numpy()


# a row of the segments table past the stream's segments
_PADDING_SEGMENT = tuple({"parent": -1, "level": PADDING_LEVEL}.get(f, 0) for f in SEGMENT_FIELDS)


# ---- fork attention: query tiles and path levels -----------------------------------------------------------
# Tiles are aligned to multiples of `block_m` logical positions (a segment starting mid-tile gets a partial
# first tile), so a query always sits at the same row of its tile and walks the same key tiles, whatever
# stream it is packed in (E3). Padding tiles have count 0 and write nothing.
# Live tiles come longest first: a tile walks the key tiles up to its aligned end, so its work grows with its
# logical tile index, and the GPU starts programs in grid order (one per SM at head dim 256: 192 KiB of
# shared memory). In segment order a long state's last tiles and its questions' tiles (they walk the whole
# state) start last and run on while the other SMs idle; a table longest first is the classic largest-job-
# first schedule. A tile's bits do not depend on where it sits in the table.

TILE_FIELDS = ("segment", "row0", "pos0", "count")  # columns of a query tile row
POS_NONE = 2**31 - 1  # first position of a padding level: above every real position


def max_query_tiles(num_rows: int, num_segments: int, block_m: int) -> int:
    """An upper bound on `len(query_tiles(...))` for any stream of these sizes (a bucket's grid size).

    A segment of length L starting at offset a < block_m into its first tile spans ceil((a + L) / block_m)
    <= ceil(L / block_m) + 1 tiles, and summing ceil(L / block_m) over segments is <= T / block_m + S.
    """
    return -(-num_rows // block_m) + 2 * num_segments


def query_tiles(meta: StreamMeta, block_m: int, num_tiles: int | None = None) -> torch.Tensor:
    """[num_tiles, 4] int32 rows (segment, row0, pos0, count): `count` queries of `segment` from logical
    position `pos0` at stream row `row0`, inside the aligned tile [pos0 - pos0 % block_m, + block_m)."""
    columns = _tile_columns(meta, block_m)
    out = np.empty((len(columns[0]) if num_tiles is None else num_tiles, len(TILE_FIELDS)), dtype=np.int32)
    _write_tiles(out, columns)
    return torch.from_numpy(out)


def write_query_tiles(out: np.ndarray, meta: StreamMeta, block_m: int) -> None:
    """`query_tiles(meta, block_m, len(out))` written into `out`."""
    _write_tiles(out, _tile_columns(meta, block_m))


def _tile_columns(meta: StreamMeta, block_m: int) -> tuple[np.ndarray, ...]:
    """The TILE_FIELDS columns of every tile the stream needs, the ones furthest into their paths first (by
    aligned tile index; segment order among equals)."""
    segs = [(i, s.start, s.pos0, s.end) for i, s in enumerate(meta.segments)
            if s.length > 0 and i not in meta.stored]  # a stored segment has no queries
    index, start, pos0, end = np.array(segs, dtype=np.int64).reshape(-1, 4).T
    first = pos0 // block_m
    count = (end - 1) // block_m - first + 1  # tiles per segment
    k = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)  # a tile's index in its segment
    tile = np.repeat(first, count) + k
    lo = np.maximum(tile * block_m, np.repeat(pos0, count))
    hi = np.minimum((tile + 1) * block_m, np.repeat(end, count))
    columns = (np.repeat(index, count), np.repeat(start - pos0, count) + lo, lo, hi - lo)
    order = np.argsort(-tile, kind="stable")
    return tuple(c[order] for c in columns)


def _write_tiles(out: np.ndarray, columns: tuple[np.ndarray, ...]) -> None:
    need = len(columns[0])
    if need > len(out):
        raise ValueError(f"stream needs {need} query tiles, the table holds {len(out)}")
    for k, column in enumerate(columns):
        out[:need, k] = column
    out[need:] = 0


def path_depth(meta: StreamMeta) -> int:
    """Number of levels of the deepest path (1 for a stream of roots only)."""
    return 1 + max((len(a) for a in meta.ancestors), default=0)


def path_levels(meta: StreamMeta, depth: int | None = None, num_segments: int | None = None) -> torch.Tensor:
    """[num_segments, depth, 2] int32: per segment, (start row, pos0) of every segment on its path, root
    first and itself last; levels past its own are (0, POS_NONE), segments past the stream's are all
    padding. A logical position p maps to the row `start + p - pos0` of the deepest level with pos0 <= p
    (along a path the levels' pos0 ascend, and a child begins at its parent's end)."""
    depth = path_depth(meta) if depth is None else depth
    num_segments = len(meta.segments) if num_segments is None else num_segments
    out = np.empty((num_segments, depth, 2), dtype=np.int32)
    write_path_levels(out, meta)
    return torch.from_numpy(out)


def write_path_levels(out: np.ndarray, meta: StreamMeta) -> None:
    """`path_levels` written into `out` ([num_segments, depth, 2])."""
    need = path_depth(meta)
    num_segments, depth = out.shape[:2]
    if need > depth or len(meta.segments) > num_segments:
        raise ValueError(f"stream needs depth {need} and {len(meta.segments)} segments, "
                         f"the table holds depth {depth} and {num_segments} segments")
    out[:, :, 0] = 0
    out[:, :, 1] = POS_NONE
    chain = path_chains(meta.ancestors, depth)
    on = chain >= 0
    firsts = np.array([(s.start, s.pos0) for s in meta.segments], dtype=np.int32).reshape(-1, 2)
    out[: len(chain)][on] = firsts[chain[on]]


# ---- forked Gated DeltaNet and fork conv -------------------------------------------------------------------
# `GdnTables.items` [levels * per_level, len(ITEM_FIELDS)]: block `l` (rows l * per_level ...) holds the work
# items of tree level l, one per non-empty segment, then padding items (length 0, no tail, slots -1) that do
# nothing; the scan launch for level l reads the block from `item_base = l * per_level`. Fields: segment,
# row0 (stream row of the segment's first token), length, chunk0 (logical position of its first, possibly
# straddling, chunk: a multiple of CHUNK), tail (how many of its ancestors' positions [chunk0, pos0) it
# recomputes, < CHUNK), src (slot holding the fp32 state at chunk0; -1: zeros), dst (slot that receives its
# state at its last full chunk boundary; -1: none needed), first (the chunk slot of its first chunk; its
# chunks take consecutive slots). The kernels read row0, length, tail, src, dst and first; segment and
# chunk0 are there for inspection and tests. `GdnTables.tails` [levels * per_level, CHUNK]: per item, the
# stream rows of its tail positions in order, -1 past `tail`. `GdnTables.chunks` [num_chunks, 2]: per chunk
# slot, (item row in `items`, chunk index within the item), (-1, 0) for an unused slot: the prep launch's
# programs. `conv_taps` [rows, CONV_TAPS]: per stream row, the rows of the CONV_TAPS - 1 positions before it
# on its path (oldest first, -1 before position 0) and then the row itself; -1 everywhere for a padding row.
# Slots are numbered in segment order among the segments some descendant needs.

ITEM_FIELDS = ("segment", "row0", "length", "chunk0", "tail", "src", "dst", "first")


@dataclass(frozen=True, slots=True)
class GdnTables:
    items: torch.Tensor  # int32 [levels * per_level, len(ITEM_FIELDS)]
    tails: torch.Tensor  # int32 [levels * per_level, CHUNK]
    chunks: torch.Tensor  # int32 [num_chunks, 2]
    per_level: int  # items per level: the grid of each level's scan launch
    num_slots: int  # state slots the launch sequence needs storage for

    @property
    def num_levels(self) -> int:
        return self.items.shape[0] // self.per_level

    @property
    def num_chunks(self) -> int:
        return self.chunks.shape[0]


def max_chunks(rows: int, segments: int) -> int:
    """Chunk slots enough for any stream of `rows` rows and `segments` segments: an item of length n with a
    tail (< CHUNK) spans at most n // CHUNK + 2 chunks."""
    return rows // CHUNK + 2 * segments


def state_slots(meta: StreamMeta) -> dict[int, int]:
    """Slot of each segment whose state at floor(end / CHUNK) * CHUNK some descendant starts from. One slot
    a segment suffices: a descendant starting from a segment's recurrent state starts at that boundary of
    that segment (asserted)."""
    for src, b in zip(meta.gdn_src, meta.gdn_chunk0, strict=True):
        assert src < 0 or b == meta.segments[src].end // CHUNK * CHUNK
    return {s: i for i, s in enumerate(sorted({src for src in meta.gdn_src if src >= 0}))}


def gdn_levels(meta: StreamMeta) -> list[list[int]]:
    """The segments each state walk launch takes, level by level: the non-empty computed ones. A stored root
    is not walked (its state comes from its saved point), and its subtree is walked a level up: a resumed
    root with the other instances' roots, so resuming adds no walk launch."""
    if not meta.stored:
        return [[s for s in level if meta.segments[s].length > 0] for level in meta.levels]
    out: list[list[int]] = [[] for _ in meta.levels]
    for s, seg in enumerate(meta.segments):
        if seg.length > 0 and s not in meta.stored:
            up = bool(meta.ancestors[s]) and meta.ancestors[s][0] in meta.stored
            out[seg.level - up].append(s)
    while out and not out[-1]:
        out.pop()
    return out


def gdn_tables(meta: StreamMeta, levels: int | None = None, per_level: int | None = None,
               num_slots: int | None = None, num_chunks: int | None = None) -> GdnTables:
    """The work items of every tree level and their chunks, padded to `levels` x `per_level` items,
    `num_slots` state slots and `num_chunks` chunk slots (defaults: just what this stream needs; a bucket
    passes its depth, segments, segments and max_chunks(rows, segments))."""
    slots = state_slots(meta)
    by_level = gdn_levels(meta)
    levels = len(by_level) if levels is None else levels
    per_level = max((len(b) for b in by_level), default=0) if per_level is None else per_level
    per_level = max(per_level, 1)  # a grid of zero programs is not launchable
    num_slots = len(slots) if num_slots is None else num_slots
    spans = {s: -(-(len(meta.gdn_tail[s]) + meta.segments[s].length) // CHUNK) for b in by_level for s in b}
    needed = sum(spans.values())
    num_chunks = max(needed, 1) if num_chunks is None else num_chunks
    if (len(by_level) > levels or any(len(b) > per_level for b in by_level) or len(slots) > num_slots
            or needed > num_chunks):
        raise ValueError(f"stream needs {len(by_level)} levels of up to {max(map(len, by_level), default=0)} "
                         f"segments, {len(slots)} state slots and {needed} chunks; the tables hold {levels} "
                         f"levels of {per_level}, {num_slots} slots and {num_chunks} chunks")
    items = np.zeros((levels * per_level, len(ITEM_FIELDS)), dtype=np.int32)
    items[:, ITEM_FIELDS.index("src")] = -1
    items[:, ITEM_FIELDS.index("dst")] = -1
    tails = np.full((levels * per_level, CHUNK), -1, dtype=np.int32)
    chunks = np.zeros((num_chunks, 2), dtype=np.int32)
    chunks[:, 0] = -1
    # (item row, segment) of every item, level by level
    at = [(lvl * per_level + j, s) for lvl, segs in enumerate(by_level) for j, s in enumerate(segs)]
    span = np.array([spans[s] for _, s in at], dtype=np.int64)
    first = np.cumsum(span) - span  # each item's first chunk slot: the items' chunks in item order
    fields = []
    for (i, s), f in zip(at, first.tolist(), strict=True):
        seg, tail, src = meta.segments[s], meta.gdn_tail[s], meta.gdn_src[s]
        fields.append((s, seg.start, seg.length, meta.gdn_chunk0[s], len(tail), -1 if src < 0 else slots[src],
                       slots.get(s, -1), f))
        tails[i, : len(tail)] = tail
    item = np.array([i for i, _ in at], dtype=np.int64)
    items[item] = np.array(fields, dtype=np.int32).reshape(-1, len(ITEM_FIELDS))
    chunks[:needed, 0] = np.repeat(item, span)
    chunks[:needed, 1] = np.arange(needed) - np.repeat(first, span)
    return GdnTables(items=torch.from_numpy(items), tails=torch.from_numpy(tails),
                     chunks=torch.from_numpy(chunks), per_level=per_level, num_slots=num_slots)


def conv_taps(meta: StreamMeta, rows: int | None = None) -> torch.Tensor:
    """[rows, CONV_TAPS] int32: each row's predecessors on its path and itself; padding rows all -1."""
    out = np.empty((meta.num_rows if rows is None else rows, CONV_TAPS), dtype=np.int32)
    write_conv_taps(out, meta)
    return torch.from_numpy(out)


def write_conv_taps(out: np.ndarray, meta: StreamMeta) -> None:
    """`conv_taps(meta, len(out))` written into `out`."""
    n, rows = meta.num_rows, len(out)
    if n > rows:
        raise ValueError(f"stream has {n} rows, the table holds {rows}")
    own = meta.segment_ids.numpy() >= 0
    prev = meta.conv_prev.numpy()
    for j in range(CONV_TAPS - 1):  # a column at a time: faster than one [rows, 3] where
        out[:n, j] = np.where(own, prev[:, j], -1)
    out[:n, CONV_TAPS - 1] = np.where(own, np.arange(n), -1)
    out[n:] = -1


def live_rows(meta: StreamMeta) -> int:
    """Rows up to the end of the stream's last computed segment: the rows a row-wise kernel must compute.
    Padding rows after them (a padded stream's, pad_meta) do not count, so a stream fills the same tables
    padded or not; nor do stored segments' rows (StreamMeta.stored), which come after every computed row."""
    return max((s.start + s.length for i, s in enumerate(meta.segments) if i not in meta.stored), default=0)


# ---- saved points: the rows the recorded copies move (runtime/saved) --------------------------------------
# A recording restores a stream's stored roots (StreamMeta.stored) and captures its saved points
# (StreamMeta.captures) with row copies between the arena and staging buffers outside it
# (codegen/saved_rows.py). Each table maps staging row i to an arena row (-1: nothing), in meta.stored or
# meta.captures order: `*_rows` the keys and values of every position, `*_windows` the conv windows (the
# CONV_TAPS - 1 positions before each point's end), `*_states` the GDN state (`per` rows of the state slots
# or chunk states, viewed as rows of the value dim). At most MAX_SAVED stored roots and as many captures a
# stream: the staging of windows and states holds that many.

MAX_SAVED = 4


def path_rows_to(meta: StreamMeta, seg: int, n: int) -> np.ndarray:
    """Stream rows of positions [0, n) on the path ending in segment `seg` (n <= its end)."""
    ranges = meta.key_ranges[seg, : len(meta.ancestors[seg]) + 1].tolist()
    rows = np.concatenate([np.arange(lo, hi) for lo, hi in ranges])
    return rows[:n]


def _check_saved(meta: StreamMeta) -> None:
    if len(meta.stored) > MAX_SAVED or len(meta.captures) > MAX_SAVED:
        raise ValueError(f"stream resumes {len(meta.stored)} and saves {len(meta.captures)} points; a bucket "
                         f"stages at most {MAX_SAVED} of each")


def _fill_rows(out: np.ndarray, rows: list[np.ndarray]) -> None:
    flat = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    if len(flat) > len(out):
        raise ValueError(f"saved points need {len(flat)} staged rows, the table holds {len(out)}")
    out[: len(flat)] = flat
    out[len(flat):] = -1


def write_stored_rows(out: np.ndarray, meta: StreamMeta) -> None:
    _check_saved(meta)
    _fill_rows(out, [np.arange(meta.segments[s].start, meta.segments[s].start + meta.segments[s].length)
                     for s in meta.stored])


def write_capture_rows(out: np.ndarray, meta: StreamMeta) -> None:
    _check_saved(meta)
    _fill_rows(out, [path_rows_to(meta, seg, n) for seg, n in meta.captures])


def write_stored_windows(out: np.ndarray, meta: StreamMeta) -> None:
    _check_saved(meta)
    ends = [meta.segments[s].start + meta.segments[s].length for s in meta.stored]
    _fill_rows(out, [np.arange(end - (CONV_TAPS - 1), end) for end in ends])


def write_capture_windows(out: np.ndarray, meta: StreamMeta) -> None:
    _check_saved(meta)
    _fill_rows(out, [path_rows_to(meta, seg, n)[n - (CONV_TAPS - 1):] for seg, n in meta.captures])


def write_stored_states(out: np.ndarray, meta: StreamMeta, per: int) -> None:
    """Rows of each stored root's state slot (tables.state_slots numbers them): where it is restored."""
    _check_saved(meta)
    slots = state_slots(meta)
    _fill_rows(out, [slots[s] * per + np.arange(per) for s in meta.stored])


def write_capture_states(out: np.ndarray, meta: StreamMeta, gdn: GdnTables, per: int) -> None:
    """Rows of the chunk state entering the chunk that starts at each capture's end (the state walk writes
    every chunk's entering state): the GDN state at the saved length."""
    _check_saved(meta)
    items = gdn.items.numpy()
    segment, first = ITEM_FIELDS.index("segment"), ITEM_FIELDS.index("first")
    live = items[:, ITEM_FIELDS.index("length")] > 0
    rows = []
    for seg, n in meta.captures:
        (item,) = np.flatnonzero(live & (items[:, segment] == seg))
        chunk = items[item, first] + (n - meta.gdn_chunk0[seg]) // CHUNK
        rows.append(chunk * per + np.arange(per))
    _fill_rows(out, rows)


# ---- fill rules: a recording's meta buffers by name --------------------------------------------------------
# A recording's `fill` names a rule and its parameters ("query_tiles(block_m=64)",
# "gdn_items(per_level=8,slots=8,chunks=24)"); the static buffers are int64, every ruled table int32.


@dataclass(frozen=True, slots=True)
class FillRequest:
    """One meta buffer of a recording to fill: its name, its rule (`fill`) and its shape."""

    name: str
    fill: str
    shape: tuple[int, ...]


def parse_fill(fill: str) -> tuple[str, dict[str, int]]:
    """("query_tiles", {"block_m": 64}) from "query_tiles(block_m=64)"; a bare rule has no parameters."""
    rule, _, rest = fill.partition("(")
    params: dict[str, int] = {}
    if rest:
        for item in rest.rstrip(")").split(","):
            key, _, value = item.partition("=")
            params[key.strip()] = int(value)
    return rule, params


@dataclass(frozen=True, slots=True)
class FillRule:
    """How one kind of meta buffer is filled: the table's shape and dtype for a bucket (what a recording
    must have allocated), and the writer that fills all of it from a stream's meta."""

    shape: Callable[[Bucket, FillRequest, dict[str, int]], tuple[int, ...]]
    write: Callable[[np.ndarray, StreamMeta, Bucket, dict[str, int], dict], None]
    dtype: type = np.int32


def _cached_gdn(meta: StreamMeta, bucket: Bucket, params: dict[str, int], cache: dict) -> GdnTables:
    key = ("gdn", params["per_level"], params["slots"], params["chunks"])
    if key not in cache:
        cache[key] = gdn_tables(meta, bucket.depth, params["per_level"], params["slots"], params["chunks"])
    return cache[key]


def path_table_depth(bucket: Bucket) -> int:
    """Levels of a bucket's path-level table: its depth and a stored root's level above a resumed root (a
    bucket's depth counts walked levels, runtime/split.plan_sizes)."""
    return bucket.depth + 1


def _gdn(part: str) -> FillRule:
    def write(out, meta, bucket, params, cache):  # items, tails and chunks come from one gdn_tables call
        out[...] = getattr(_cached_gdn(meta, bucket, params, cache), part).numpy()

    def shape(bucket, req, params):
        items = bucket.depth * max(params["per_level"], 1)
        return {"items": (items, len(ITEM_FIELDS)), "tails": (items, CHUNK),
                "chunks": (params["chunks"], 2)}[part]
    return FillRule(shape, write)


FILL_RULES: dict[str, FillRule] = {
    "query_tiles": FillRule(lambda bucket, req, p: (req.shape[0], len(TILE_FIELDS)),
                            lambda out, meta, bucket, p, cache: write_query_tiles(out, meta, p["block_m"])),
    "path_levels": FillRule(lambda bucket, req, p: (bucket.segments, path_table_depth(bucket), 2),
                            lambda out, meta, bucket, p, cache: write_path_levels(out, meta)),
    "conv_taps": FillRule(lambda bucket, req, p: (bucket.rows, CONV_TAPS),
                          lambda out, meta, bucket, p, cache: write_conv_taps(out, meta)),
    # how many rows of a launch over the bucket's rows (stream=1) or read rows (reads=1) hold the stream's:
    # the GEMMs' bound (codegen/gemm.py ROWS); both when the two counts are equal and rows can be either
    "live_rows": FillRule(lambda bucket, req, p: (1,),
                          lambda out, meta, bucket, p, cache: out.fill(max(live_rows(meta) * p["stream"],
                                                                           len(meta.reads) * p["reads"]))),
    "stored_rows": FillRule(lambda bucket, req, p: (bucket.rows,),
                            lambda out, meta, bucket, p, cache: write_stored_rows(out, meta)),
    "capture_rows": FillRule(lambda bucket, req, p: (bucket.rows,),
                             lambda out, meta, bucket, p, cache: write_capture_rows(out, meta)),
    "stored_windows": FillRule(lambda bucket, req, p: (MAX_SAVED * (CONV_TAPS - 1),),
                               lambda out, meta, bucket, p, cache: write_stored_windows(out, meta)),
    "capture_windows": FillRule(lambda bucket, req, p: (MAX_SAVED * (CONV_TAPS - 1),),
                                lambda out, meta, bucket, p, cache: write_capture_windows(out, meta)),
    "stored_states": FillRule(lambda bucket, req, p: (MAX_SAVED * p["per"],),
                              lambda out, meta, bucket, p, cache: write_stored_states(out, meta, p["per"])),
    "capture_states": FillRule(lambda bucket, req, p: (MAX_SAVED * p["per"],),
                               lambda out, meta, bucket, p, cache: write_capture_states(
                                   out, meta, _cached_gdn(meta, bucket, p, cache), p["per"])),
    "gdn_items": _gdn("items"),
    "gdn_tails": _gdn("tails"),
    "gdn_chunks": _gdn("chunks"),
}


@functools.lru_cache(maxsize=1024)
def _rule(fill: str, name: str) -> tuple[FillRule, tuple[tuple[str, int], ...]]:
    """A meta buffer's fill rule and its parameters, parsed once per distinct `fill` (a fill runs per
    stream)."""
    rule, params = parse_fill(fill)
    if rule not in FILL_RULES:
        raise ValueError(f"no fill rule {fill!r} for meta buffer {name} (this runtime knows "
                         f"{', '.join(sorted(FILL_RULES))})")
    return FILL_RULES[rule], tuple(params.items())


def table_layout(req: FillRequest, bucket: Bucket) -> tuple[tuple[int, ...], type]:
    """The shape and numpy dtype of the table `req`'s rule fills for `bucket` (ValueError: no such rule)."""
    if req.name in META_BUFFERS:
        return next(b.shape for b in meta_buffers(bucket) if b.name == req.name), np.int64
    rule, params = _rule(req.fill, req.name)
    return rule.shape(bucket, req, dict(params)), rule.dtype


def check_requests(requests: Iterable[FillRequest], bucket: Bucket) -> None:
    """ValueError unless every request names a known rule whose table has the request's shape: what a
    meta stage checks once, so that its fills write into the recording's buffers without checks."""
    for req in requests:
        shape = table_layout(req, bucket)[0]
        if shape != req.shape:
            raise ValueError(f"meta buffer {req.name}: the {req.fill} rule gives {list(shape)}, the "
                             f"recording has {list(req.shape)}")


def fill_meta(requests: Iterable[FillRequest], tokens: torch.Tensor, meta: StreamMeta, bucket: Bucket
              ) -> dict[str, torch.Tensor]:
    """The contents of every requested meta buffer for one stream (host tensors, by buffer name); the
    static buffers (META_BUFFERS) by `static_tables`, the others by their rule. ValueError for a stream that
    does not fit or a rule this runtime does not know."""
    requests = tuple(requests)
    out = {}
    for req in requests:
        shape, dtype = table_layout(req, bucket)
        out[req.name] = np.empty(shape, dtype=dtype)
    write_meta(requests, out, tokens, meta, bucket)
    return {name: torch.from_numpy(a) for name, a in out.items()}


def write_meta(requests: Sequence[FillRequest], out: Mapping[str, np.ndarray], tokens: torch.Tensor,
               meta: StreamMeta, bucket: Bucket) -> None:
    """`fill_meta` written into `out` (per request, an array of its table's shape; any integer dtype), every
    element of every table: a meta stage's host buffers hold the last stream's tables until then."""
    write_static({r.name: out[r.name] for r in requests if r.name in META_BUFFERS}, tokens, meta, bucket)
    cache: dict = {}
    for req in requests:
        if req.name not in META_BUFFERS:
            rule, params = _rule(req.fill, req.name)
            rule.write(out[req.name], meta, bucket, dict(params), cache)
