"""Forests of token segments packed into one stream, and the plain pass of each path: the E1/E3 harness.

Consumes nodes (parent index, token ids) in tree order (a parent before its children) and a placement order
for their rows; produces the packed Stream (positions continuing at fork points, optional padding rows
between segments) and, per node, the plain single-sequence Stream of its path (runtime.meta.linear_stream).
The exactness tests of the reference ops, the model and the executor compare the two row by row.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from flidec.runtime.meta import Read, Segment, Stream, build_meta, linear_stream

Node = tuple[int, Sequence[int]]  # (parent node index or -1, token ids)


def path_nodes(nodes: Sequence[Node], node: int) -> list[int]:
    """Node indices from the root down to `node`."""
    chain = []
    while node >= 0:
        chain.append(node)
        node = nodes[node][0]
    return chain[::-1]


def pack_forest(
    nodes: Sequence[Node],
    placement: Sequence[int] | None = None,
    gap: int = 0,
    reads: dict[int, tuple[int, ...]] | None = None,
    pad_token: int = 0,
) -> Stream:
    """Pack `nodes` into one stream: segment i is node i; rows are laid out in `placement` order (default
    tree order) with `gap` padding rows before each segment and at the end. `reads` maps a node to the labels
    read at its last token (nodes without tokens cannot be read)."""
    placement = list(range(len(nodes))) if placement is None else list(placement)
    assert sorted(placement) == list(range(len(nodes))), "placement must be a permutation of the nodes"
    starts, row = {}, 0
    for i in placement:
        row += gap
        starts[i] = row
        row += len(nodes[i][1])
    num_rows = row + gap
    tokens = torch.full((num_rows,), pad_token, dtype=torch.int64)
    segments: list[Segment] = []
    for i, (parent, toks) in enumerate(nodes):
        assert parent < i, "nodes must come in tree order"
        pos0 = 0 if parent < 0 else segments[parent].end
        level = 0 if parent < 0 else segments[parent].level + 1
        segments.append(Segment(start=starts[i], length=len(toks), pos0=pos0, parent=parent, level=level))
        tokens[starts[i] : starts[i] + len(toks)] = torch.tensor(list(toks), dtype=torch.int64)
    read_list = tuple(
        Read(row=segments[i].start + segments[i].length - 1, labels=labels)
        for i, labels in (reads or {}).items()
    )
    return Stream(tokens, build_meta(tuple(segments), read_list, num_rows))


def path_stream(nodes: Sequence[Node], node: int, labels: tuple[int, ...] | None = None) -> Stream:
    """The plain single-sequence pass of the path ending at `node`, read at its last token if `labels`."""
    toks = [t for i in path_nodes(nodes, node) for t in nodes[i][1]]
    return linear_stream(toks, {len(toks) - 1: labels} if labels else {})
