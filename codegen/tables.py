"""Host-side constant tables that tell the generated fork kernels a stream's structure.

Consumes a runtime.meta.StreamMeta; produces small int32 tensors a kernel reads by program id:
- `query_tiles`: the fork attention grid's query tiles. Tiles are aligned to multiples of `block_m` logical
  positions (a segment starting mid-tile gets a partial first tile), so a query always sits at the same row
  of its tile and walks the same key tiles, whatever stream it is packed in (E3).
- `path_levels`: per segment, the (start row, first logical position) of each segment on its path, root
  first, then itself; unused levels are padded with POS_NONE so a kernel never selects them.
Relies on the segment-tree property of StreamMeta: along a path the levels' first positions ascend, and a
logical position p maps to the row `start + p - pos0` of the deepest level with pos0 <= p.
Tables can be padded to a bucket's fixed sizes; padding tiles have count 0 and write nothing.
"""

from __future__ import annotations

import torch
from flidec.runtime.meta import StreamMeta

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
    rows: list[tuple[int, int, int, int]] = []
    for i, s in enumerate(meta.segments):
        pos = s.pos0
        while pos < s.end:
            tile_end = (pos // block_m + 1) * block_m
            count = min(tile_end, s.end) - pos
            rows.append((i, s.start + pos - s.pos0, pos, count))
            pos += count
    if num_tiles is not None:
        if len(rows) > num_tiles:
            raise ValueError(f"stream needs {len(rows)} query tiles, the table holds {num_tiles}")
        rows += [(0, 0, 0, 0)] * (num_tiles - len(rows))
    return torch.tensor(rows, dtype=torch.int32).reshape(-1, len(TILE_FIELDS))


def path_depth(meta: StreamMeta) -> int:
    """Number of levels of the deepest path (1 for a stream of roots only)."""
    return 1 + max((len(a) for a in meta.ancestors), default=0)


def path_levels(meta: StreamMeta, depth: int | None = None, num_segments: int | None = None) -> torch.Tensor:
    """[num_segments, depth, 2] int32: per segment, (start row, pos0) of every segment on its path, root
    first and itself last; levels past its own are (0, POS_NONE), segments past the stream's are all
    padding."""
    need = path_depth(meta)
    depth = need if depth is None else depth
    num_segments = len(meta.segments) if num_segments is None else num_segments
    if need > depth or len(meta.segments) > num_segments:
        raise ValueError(f"stream needs depth {need} and {len(meta.segments)} segments, "
                         f"the table holds depth {depth} and {num_segments} segments")
    levels = torch.zeros(num_segments, depth, 2, dtype=torch.int32)
    levels[:, :, 1] = POS_NONE
    for i, chain in enumerate(meta.ancestors):
        for d, a in enumerate(chain + (i,)):
            levels[i, d, 0] = meta.segments[a].start
            levels[i, d, 1] = meta.segments[a].pos0
    return levels
