"""Host tables of the forked Gated DeltaNet and the fork conv kernels, derived from a StreamMeta.

Consumes a runtime.meta.StreamMeta; produces int32 tensors, padded to a bucket's capacities so one recorded
launch sequence (a CUDA graph) replays any request that fits:
- `GdnTables.items` [levels * per_level, len(ITEM_FIELDS)]: block `l` (rows l * per_level ...) holds the work
  items of tree level l, one per non-empty segment, then padding items (length 0, no tail, slots -1) that do
  nothing. The kernel's launch for level l reads the block from `item_base = l * per_level`. Fields:
  segment, row0 (stream row of the segment's first token), length, chunk0 (logical position of its first,
  possibly straddling, chunk: a multiple of CHUNK), tail (how many of its ancestors' positions [chunk0,
  pos0) it recomputes, < CHUNK), src (slot holding the fp32 state at chunk0; -1: zeros), dst (slot that
  receives its state at its last full chunk boundary; -1: none needed). The kernel reads row0, length,
  tail, src and dst; segment and chunk0 are there for inspection and tests.
- `GdnTables.tails` [levels * per_level, CHUNK]: per item, the stream rows of its tail positions in order,
  -1 past `tail`.
- `conv_taps` [rows, CONV_TAPS]: per stream row, the rows of the CONV_TAPS - 1 positions before it on its
  path (oldest first, -1 before position 0) and then the row itself; -1 everywhere for a padding row.
Relies on the segment-tree property of StreamMeta: a descendant starting from a segment's state starts at the
boundary floor(end / CHUNK) * CHUNK of that segment (a deeper segment would own any later boundary), so one
slot per segment suffices; slots are numbered in segment order among the segments some descendant needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from flidec.runtime.meta import CHUNK, CONV_TAPS, StreamMeta

ITEM_FIELDS = ("segment", "row0", "length", "chunk0", "tail", "src", "dst")


@dataclass(frozen=True, slots=True)
class GdnTables:
    items: torch.Tensor  # int32 [levels * per_level, len(ITEM_FIELDS)]
    tails: torch.Tensor  # int32 [levels * per_level, CHUNK]
    per_level: int  # items per level: the grid of each level's launch
    num_slots: int  # state slots the launch sequence needs storage for

    @property
    def num_levels(self) -> int:
        return self.items.shape[0] // self.per_level


def state_slots(meta: StreamMeta) -> dict[int, int]:
    """Slot of each segment whose state at floor(end / CHUNK) * CHUNK some descendant starts from."""
    sources = sorted({src for src in meta.gdn_src if src >= 0})
    for s in sources:
        seg = meta.segments[s]
        assert all(b == seg.end // CHUNK * CHUNK for src, b in zip(meta.gdn_src, meta.gdn_chunk0) if src == s)
    return {s: i for i, s in enumerate(sources)}


def gdn_tables(meta: StreamMeta, levels: int | None = None, per_level: int | None = None,
               num_slots: int | None = None) -> GdnTables:
    """The work items of every tree level, padded to `levels` x `per_level` items and `num_slots` slots
    (defaults: just what this stream needs; a bucket passes its depth, segments and segments)."""
    slots = state_slots(meta)
    by_level = [[s for s in level if meta.segments[s].length > 0] for level in meta.levels]
    levels = len(by_level) if levels is None else levels
    per_level = max((len(b) for b in by_level), default=0) if per_level is None else per_level
    per_level = max(per_level, 1)  # a grid of zero programs is not launchable
    num_slots = len(slots) if num_slots is None else num_slots
    if len(by_level) > levels or any(len(b) > per_level for b in by_level) or len(slots) > num_slots:
        raise ValueError(f"stream needs {len(by_level)} levels of up to {max(map(len, by_level), default=0)} "
                         f"segments and {len(slots)} state slots; the tables hold {levels} levels of "
                         f"{per_level} and {num_slots} slots")
    items = torch.zeros(levels * per_level, len(ITEM_FIELDS), dtype=torch.int32)
    items[:, ITEM_FIELDS.index("src")] = -1
    items[:, ITEM_FIELDS.index("dst")] = -1
    tails = torch.full((levels * per_level, CHUNK), -1, dtype=torch.int32)
    for lvl, segs in enumerate(by_level):
        for j, s in enumerate(segs):
            seg, tail = meta.segments[s], meta.gdn_tail[s]
            src = meta.gdn_src[s]
            i = lvl * per_level + j
            items[i] = torch.tensor([s, seg.start, seg.length, meta.gdn_chunk0[s], len(tail),
                                     -1 if src < 0 else slots[src], slots.get(s, -1)], dtype=torch.int32)
            tails[i, : len(tail)] = torch.tensor(tail, dtype=torch.int32)
    return GdnTables(items=items, tails=tails, per_level=per_level, num_slots=num_slots)


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
