"""The meta tables a bucket's kernels read, filled on the host from a stream's StreamMeta at bind time.

Consumes a runtime.meta.StreamMeta (and the stream's token ids) and a Bucket; produces int tensors padded to
the bucket's fixed sizes, so one recorded launch sequence (a CUDA graph) replays any request that fits:
- the static meta buffers every lowered graph reads (`meta_buffers` / `static_tables`: tokens, positions,
  conv_prev, segments, read_rows, read_labels, read_nlabels; int64),
- the fork attention's `query_tiles` and `path_levels`, the fork conv's `conv_taps`, the forked Gated
  DeltaNet's work items, tail rows and chunk slots (`gdn_tables`; int32).
A recording names each meta buffer's rule in its `fill` field ("query_tiles(block_m=64)",
"gdn_items(per_level=8,slots=8,chunks=24)"); `fill_meta` applies the rules. This is the one implementation: the
kernels' launchers (codegen/), the recording player and the graph passes import it from here, so the
runtime fills exactly what codegen's player fills, and imports nothing but torch, numpy and flidec.ir/runtime.
Relies on the segment-tree property of StreamMeta (runtime/meta.py): along a path the levels' first
positions ascend, a child begins at its parent's end, and a descendant starting from a segment's recurrent
state starts at the boundary floor(end / CHUNK) * CHUNK of that segment (so one slot per segment suffices).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch

from flidec.ir.program import Bucket
from flidec.runtime.meta import CHUNK, CONV_TAPS, StreamMeta, path_chains

# ---- the static meta buffers of a lowered graph ---------------------------------------------------------------

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
    rows, segs, reads = meta.num_rows, len(meta.segments), len(meta.reads)
    lmax = meta.read_labels.shape[1]
    if not bucket.fits(rows, segs, 1, reads, lmax if reads else 0):
        raise ValueError(f"a stream of {rows} rows, {segs} segments, {reads} reads of <= {lmax} labels does not "
                         f"fit bucket {bucket.name}")
    t = {b.name: torch.zeros(b.shape, dtype=b.dtype) for b in meta_buffers(bucket)}
    t["tokens"][:rows] = tokens
    t["positions"][:rows] = meta.positions
    t["conv_prev"].fill_(-1)
    t["conv_prev"][:rows] = meta.conv_prev
    t["segments"][:, SEGMENT_FIELDS.index("parent")] = -1
    t["segments"][:, SEGMENT_FIELDS.index("level")] = PADDING_LEVEL
    if segs:
        t["segments"][:segs] = torch.tensor([[getattr(s, f) for f in SEGMENT_FIELDS] for s in meta.segments])
    t["read_rows"][:reads] = meta.read_rows
    t["read_labels"][:reads, :lmax] = meta.read_labels
    t["read_nlabels"][:reads] = meta.read_nlabels
    return t


# ---- fork attention: query tiles and path levels -------------------------------------------------------------
# Tiles are aligned to multiples of `block_m` logical positions (a segment starting mid-tile gets a partial
# first tile), so a query always sits at the same row of its tile and walks the same key tiles, whatever
# stream it is packed in (E3). Padding tiles have count 0 and write nothing.

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
    segs = [(i, s.start, s.pos0, s.end) for i, s in enumerate(meta.segments) if s.length > 0]
    index, start, pos0, end = np.array(segs, dtype=np.int64).reshape(-1, 4).T
    first = pos0 // block_m
    count = (end - 1) // block_m - first + 1  # tiles per segment
    k = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)  # a tile's index in its segment
    tile = np.repeat(first, count) + k
    lo = np.maximum(tile * block_m, np.repeat(pos0, count))
    hi = np.minimum((tile + 1) * block_m, np.repeat(end, count))
    need = len(tile)
    if num_tiles is not None and need > num_tiles:
        raise ValueError(f"stream needs {need} query tiles, the table holds {num_tiles}")
    rows = np.zeros((need if num_tiles is None else num_tiles, len(TILE_FIELDS)), dtype=np.int32)
    rows[:need, 0] = np.repeat(index, count)
    rows[:need, 1] = np.repeat(start - pos0, count) + lo
    rows[:need, 2] = lo
    rows[:need, 3] = hi - lo
    return torch.from_numpy(rows)


def path_depth(meta: StreamMeta) -> int:
    """Number of levels of the deepest path (1 for a stream of roots only)."""
    return 1 + max((len(a) for a in meta.ancestors), default=0)


def path_levels(meta: StreamMeta, depth: int | None = None, num_segments: int | None = None) -> torch.Tensor:
    """[num_segments, depth, 2] int32: per segment, (start row, pos0) of every segment on its path, root
    first and itself last; levels past its own are (0, POS_NONE), segments past the stream's are all
    padding. A logical position p maps to the row `start + p - pos0` of the deepest level with pos0 <= p."""
    need = path_depth(meta)
    depth = need if depth is None else depth
    num_segments = len(meta.segments) if num_segments is None else num_segments
    if need > depth or len(meta.segments) > num_segments:
        raise ValueError(f"stream needs depth {need} and {len(meta.segments)} segments, "
                         f"the table holds depth {depth} and {num_segments} segments")
    levels = np.zeros((num_segments, depth, 2), dtype=np.int32)
    levels[:, :, 1] = POS_NONE
    chain = path_chains(meta.ancestors, depth)
    on = chain >= 0
    firsts = np.array([(s.start, s.pos0) for s in meta.segments], dtype=np.int32).reshape(-1, 2)
    levels[: len(chain)][on] = firsts[chain[on]]
    return torch.from_numpy(levels)


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
    """Slot of each segment whose state at floor(end / CHUNK) * CHUNK some descendant starts from."""
    for src, b in zip(meta.gdn_src, meta.gdn_chunk0):
        assert src < 0 or b == meta.segments[src].end // CHUNK * CHUNK
    return {s: i for i, s in enumerate(sorted({src for src in meta.gdn_src if src >= 0}))}


def gdn_tables(meta: StreamMeta, levels: int | None = None, per_level: int | None = None,
               num_slots: int | None = None, num_chunks: int | None = None) -> GdnTables:
    """The work items of every tree level and their chunks, padded to `levels` x `per_level` items,
    `num_slots` state slots and `num_chunks` chunk slots (defaults: just what this stream needs; a bucket
    passes its depth, segments, segments and max_chunks(rows, segments))."""
    slots = state_slots(meta)
    by_level = [[s for s in level if meta.segments[s].length > 0] for level in meta.levels]
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
    for (i, s), f in zip(at, first.tolist()):
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
    rows = meta.num_rows if rows is None else rows
    if meta.num_rows > rows:
        raise ValueError(f"stream has {meta.num_rows} rows, the table holds {rows}")
    taps = torch.full((rows, CONV_TAPS), -1, dtype=torch.int32)
    own = meta.segment_ids >= 0
    taps[: meta.num_rows, : CONV_TAPS - 1] = torch.where(own[:, None], meta.conv_prev, -1).to(torch.int32)
    taps[: meta.num_rows, CONV_TAPS - 1] = torch.where(own, torch.arange(meta.num_rows), -1).to(torch.int32)
    return taps


# ---- fill rules: a recording's meta buffers by name -----------------------------------------------------------


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


Rule = Callable[[torch.Tensor, StreamMeta, Bucket, FillRequest, dict[str, int], dict], torch.Tensor]


def _gdn(part: str) -> Rule:
    def fill(tokens, meta, bucket, req, params, cache):  # items, tails and chunks come from one gdn_tables call
        key = ("gdn", params["per_level"], params["slots"], params["chunks"])
        if key not in cache:
            cache[key] = gdn_tables(meta, bucket.depth, params["per_level"], params["slots"], params["chunks"])
        return getattr(cache[key], part)
    return fill


FILL_RULES: dict[str, Rule] = {
    "query_tiles": lambda tokens, meta, bucket, req, p, cache: query_tiles(meta, p["block_m"], req.shape[0]),
    "path_levels": lambda tokens, meta, bucket, req, p, cache: path_levels(meta, bucket.depth, bucket.segments),
    "conv_taps": lambda tokens, meta, bucket, req, p, cache: conv_taps(meta, bucket.rows),
    "gdn_items": _gdn("items"),
    "gdn_tails": _gdn("tails"),
    "gdn_chunks": _gdn("chunks"),
}


def fill_meta(requests: Iterable[FillRequest], tokens: torch.Tensor, meta: StreamMeta, bucket: Bucket
              ) -> dict[str, torch.Tensor]:
    """The contents of every requested meta buffer for one stream (host tensors, by buffer name); the
    static buffers (META_BUFFERS) by `static_tables`, the others by their rule. ValueError for a stream that
    does not fit or a rule this runtime does not know."""
    static = static_tables(tokens, meta, bucket)
    out: dict[str, torch.Tensor] = {}
    cache: dict = {}
    for req in requests:
        if req.name in static:
            out[req.name] = static[req.name]
            continue
        rule, params = parse_fill(req.fill)
        if rule not in FILL_RULES:
            raise ValueError(f"no fill rule {req.fill!r} for meta buffer {req.name} (this runtime knows "
                             f"{', '.join(sorted(FILL_RULES))})")
        out[req.name] = FILL_RULES[rule](tokens, meta, bucket, req, params, cache)
    return out
