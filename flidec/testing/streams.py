"""Stream helpers for tests and tools: one instance bound or refused, the plain pass of each read, padding.

The runtime never pads a stream (the meta stage writes the padding rows' inert tables itself) and never
needs a read's plain single-sequence pass; the exactness tests (E1, E3) and the benchmarks do.
"""

from __future__ import annotations

import torch

from flidec.ir.tree import Tree
from flidec.runtime.binder import BindFormat, BoundStream, bind
from flidec.runtime.meta import Segment, Stream, linear_stream, pad_meta


def bind_one(tree: Tree, instance: object, fmt: BindFormat, *, rows: int | None = None,
             validate: bool = True, verify: bool = True) -> BoundStream:
    """One instance bound into a stream; its InstanceError is raised."""
    bound = bind(tree, [instance], fmt, rows=rows, validate=validate, verify=verify)
    if bound.errors:
        raise bound.errors[0]
    return bound


def plain_streams(bound: BoundStream) -> tuple[Stream, ...]:
    """Per read, the plain single-sequence stream of its whole path, read at its last token (for E3)."""
    meta = bound.stream.meta
    out = []
    for read in meta.reads:
        seg = int(meta.segment_ids[read.row])
        rows = [r for s in (*meta.ancestors[seg], seg)
                for r in range(meta.segments[s].start, meta.segments[s].start + meta.segments[s].length)]
        tokens = bound.stream.tokens[rows].tolist()
        out.append(linear_stream(tokens, {len(tokens) - 1: read.labels}))
    return tuple(out)


def padded(stream: Stream, rows: int) -> Stream:
    """The same stream with inert padding rows (no segment, token 0) up to `rows`."""
    meta = stream.meta
    if meta.num_rows == rows:
        return stream
    tokens = torch.zeros(rows, dtype=torch.int64)
    tokens[: meta.num_rows] = stream.tokens
    return Stream(tokens, pad_meta(meta, rows))


def path_row(segments: tuple[Segment, ...], seg: int, pos: int) -> int:
    """Stream row of logical position `pos` on the path that ends in segment `seg` (pos < its end)."""
    s = segments[seg]
    while pos < s.pos0:
        seg = s.parent
        s = segments[seg]
    return s.start + (pos - s.pos0)
