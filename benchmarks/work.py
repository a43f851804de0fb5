"""A workload as every engine sees it: token ids, bound once by flidec's binder and format.

Consumes a Workload (benchmarks/workloads.py), its verified tree and a BindFormat (flidec's NextTokenFormat:
the System One reading of API.md); produces a Work: per instance its segment forest (parent, token ids) in
tree order, and per read (one per question) its instance, its whole prompt's ids, the length of the shared
state piece it starts with, its label ids and its kind. Engines get nothing else, so every engine runs the
same prompts. Also the token counts the metrics need: tokens as a plain engine computes them (every
prompt whole), as a one-level forking engine does (the state once, each question's rest), and as the tree
is packed (every segment once). Relies on the binder's layout: roots in instance order, parents first.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.workloads import Workload
from flidec.ir.tree import Tree
from flidec.runtime.binder import BindFormat, bind

Forest = tuple[tuple[int, tuple[int, ...]], ...]  # (parent index in the forest or -1, token ids), tree order


@dataclass(frozen=True)
class Read:
    instance: int
    path: tuple[int, ...]  # the whole prompt's ids (chat template included)
    root: int  # tokens of the instance's root segment (its state piece), shared by all its reads
    labels: tuple[int, ...]
    kind: str  # noul, choice or score
    segment: int  # index of its ask segment in its instance's forest


@dataclass(frozen=True)
class Work:
    name: str
    forests: tuple[Forest, ...]  # per instance
    reads: tuple[Read, ...]
    reads_of: tuple[tuple[int, ...], ...]  # per instance: its reads' indices, in read order
    bind_s: float
    # the spec, tree and instance JSON the ids were bound from (engines that bind themselves)
    source: Workload

    @property
    def instances(self) -> int:
        return len(self.forests)

    def read_ids(self, instances: Sequence[int]) -> list[int]:
        return [r for i in instances for r in self.reads_of[i]]

    def spans(self, instances: Sequence[int], computes: str) -> list[tuple[int, int]]:
        """(first logical position, length) of every token span an engine computes for these instances:
        "tree" every segment once, "one-level" each state once and each question's rest, "solo" every
        prompt whole."""
        out: list[tuple[int, int]] = []
        for i in instances:
            reads = [self.reads[r] for r in self.reads_of[i]]
            if computes == "tree":
                forest = self.forests[i]
                out += [(p, len(ids)) for p, (_, ids) in zip(segment_positions(forest), forest, strict=True)]
            elif computes == "one-level":
                out += [(0, reads[0].root)] if reads else []
                out += [(r.root, len(r.path) - r.root) for r in reads]
            elif computes == "solo":
                out += [(0, len(r.path)) for r in reads]
            else:
                raise ValueError(f"unknown computes {computes!r}")
        return out

    def tokens(self, instances: Sequence[int], computes: str) -> int:
        return sum(n for _, n in self.spans(instances, computes))

    def labels(self, instances: Sequence[int]) -> int:
        return sum(len(self.reads[r].labels) for r in self.read_ids(instances))


def prepare_work(workload: Workload, tree: Tree, fmt: BindFormat) -> Work:
    """Bind every instance (checking each prompt's pieces against its whole tokenization) into a Work."""
    t0 = time.perf_counter()
    bound = bind(tree, workload.instances, fmt)
    bind_s = time.perf_counter() - t0
    if bound.errors:
        i, err = next(iter(bound.errors.items()))
        raise ValueError(f"workload {workload.name}: instance {i} does not bind: {err}")
    meta = bound.stream.meta
    tokens = bound.stream.tokens.tolist()
    segments = meta.segments
    roots = [s for s, seg in enumerate(segments) if seg.parent < 0]  # one per instance, in instance order
    owner = {r: k for k, r in enumerate(roots)}
    local: dict[int, int] = {}
    forests: list[list[tuple[int, tuple[int, ...]]]] = [[] for _ in roots]
    for s, seg in enumerate(segments):
        k = owner[(meta.ancestors[s] + (s,))[0]]
        local[s] = len(forests[k])
        forests[k].append(
            (local[seg.parent] if seg.parent >= 0 else -1, tuple(tokens[seg.start : seg.start + seg.length]))
        )
    reads, reads_of = [], [[] for _ in roots]
    for read, site in zip(meta.reads, bound.sites, strict=True):
        s = int(meta.segment_ids[read.row])
        chain = meta.ancestors[s] + (s,)
        path = tuple(
            t for a in chain for t in tokens[segments[a].start : segments[a].start + segments[a].length]
        )
        k = owner[chain[0]]
        reads_of[k].append(len(reads))
        reads.append(Read(k, path, segments[chain[0]].length, tuple(read.labels), site.piece.kind, local[s]))
    return Work(
        workload.name,
        tuple(tuple(f) for f in forests),
        tuple(reads),
        tuple(tuple(r) for r in reads_of),
        bind_s,
        workload,
    )


def segment_positions(forest: Forest) -> list[int]:
    """Each segment's first logical position (its parent's end)."""
    pos0: list[int] = []
    for parent, _ids in forest:
        pos0.append(0 if parent < 0 else pos0[parent] + len(forest[parent][1]))
    return pos0
