"""Sizes and splitting: what a plan or a stream needs of a bucket, and a plan too large for the largest
bucket split at tree boundaries into sub-plans that each fit.

A sub-plan keeps the whole ancestor path of each read it holds, so a read's tokens, positions and fork points
are the same as in the whole plan and, by E1, so are its bits.
"""

from __future__ import annotations

from flidec.ir.errors import InstanceError
from flidec.ir.program import Bucket
from flidec.ir.template import Sizes
from flidec.runtime.binder import Plan
from flidec.runtime.meta import Stream


def plan_sizes(plan: Plan) -> Sizes:
    """What the plan needs of a bucket. Held positions (Plan.held) still take rows (a stored root's rows are
    the bucket's) and a segment, not a level: a bucket's depth counts the levels the GDN walks, and a
    resumed root is walked at its stored parent's level (runtime/tables.gdn_tables)."""
    levels: list[int] = []
    for parent in plan.parents:
        levels.append(0 if parent < 0 else levels[parent] + 1)
    return Sizes(rows=sum(map(len, plan.ids)), segments=len(plan.ids) + (plan.held is not None),
                 depth=1 + max(levels, default=0), reads=len(plan.reads),
                 labels=max((len(p.labels) for _, p, _ in plan.reads), default=0))


def combine(a: Sizes, b: Sizes) -> Sizes:
    """The needs of two instances packed into one stream (or of two disjoint parts of one plan)."""
    return Sizes(a.rows + b.rows, a.segments + b.segments, max(a.depth, b.depth), a.reads + b.reads,
                 max(a.labels, b.labels))


def stream_sizes(stream: Stream) -> Sizes:
    meta = stream.meta
    depth = 1 + max((len(a) for a in meta.ancestors), default=0)
    labels = max((len(r.labels) for r in meta.reads), default=0)
    return Sizes(meta.num_rows, len(meta.segments), depth, len(meta.reads), labels)


def fits(need: Sizes, bucket: Bucket) -> bool:
    return bucket.fits(need.rows, need.segments, need.depth, need.reads, need.labels)


def misfit(need: Sizes, bucket: Bucket) -> str:
    """What of `need` the bucket does not hold, in words: "300 rows; the largest bucket (r256) holds 256
    rows"."""
    caps = {"rows": bucket.rows, "segments": bucket.segments, "levels": bucket.depth, "reads": bucket.reads,
            "labels per read": bucket.labels}
    needs = dict(zip(caps, (need.rows, need.segments, need.depth, need.reads, need.labels), strict=True))
    over = [k for k in caps if needs[k] > caps[k]]
    return (f"{', '.join(f'{needs[k]} {k}' for k in over)}; the largest bucket ({bucket.name}) holds "
            f"{', '.join(f'{caps[k]} {k}' for k in over)}")


def split_plan(plan: Plan, bucket: Bucket) -> list[tuple[Plan, tuple[int, ...]]]:
    """Split a plan that does not fit `bucket` at tree boundaries: sub-plans that each fit it, with the plan's
    read indices each one holds (every read in exactly one). A sub-plan keeps the whole ancestor path of the
    segments it holds plus a run of whole subtrees, packed greedily in plan order; a subtree too large even
    alone with its path is split the same way one level down; subtrees with no read are left out. A read's
    path (tokens, positions, fork points) is the same in its sub-plan as in the plan, so by E1 its bits are
    too. InstanceError when the path of some read does not fit on its own (naming it and what is over)."""
    n = len(plan.ids)
    children: list[list[int]] = [[] for _ in range(n)]
    level = [0] * n
    for j, p in enumerate(plan.parents):
        if p >= 0:
            children[p].append(j)
            level[j] = level[p] + 1
    own_reads: list[list[int]] = [[] for _ in range(n)]
    for r, (seg, _, _) in enumerate(plan.reads):
        own_reads[seg].append(r)

    def labels(reads: list[int]) -> int:
        return max((len(plan.reads[r][1].labels) for r in reads), default=0)

    subtree = [Sizes(len(plan.ids[j]), 1, level[j] + 1, len(own_reads[j]), labels(own_reads[j]))
               for j in range(n)]
    for j in reversed(range(n)):  # children come after their parents
        if plan.parents[j] >= 0:
            subtree[plan.parents[j]] = combine(subtree[plan.parents[j]], subtree[j])

    def members(j: int) -> tuple[list[int], list[int]]:  # the segments and reads of j's subtree
        segs, reads, todo = [], [], [j]
        while todo:
            k = todo.pop()
            segs.append(k)
            reads += own_reads[k]
            todo += children[k]
        return segs, reads

    out: list[tuple[Plan, tuple[int, ...]]] = []

    def emit(segs: list[int], reads: list[int]) -> None:
        if not reads:
            return
        segs, reads = sorted(segs), sorted(reads)
        local = {s: k for k, s in enumerate(segs)}
        sub = Plan([plan.ids[s] for s in segs], [local.get(plan.parents[s], -1) for s in segs],
                   [(local[plan.reads[r][0]], plan.reads[r][1], plan.reads[r][2]) for r in reads])
        out.append((sub, tuple(reads)))

    def visit(j: int, path: list[int], above: Sizes) -> None:  # j's subtree with its path does not fit
        own = path + [j]
        base = Sizes(above.rows + len(plan.ids[j]), above.segments + 1, level[j] + 1, 0, 0)
        need = combine(base, Sizes(0, 0, 0, len(own_reads[j]), labels(own_reads[j])))
        if not fits(need, bucket):
            first = own_reads[j][0] if own_reads[j] else min(members(j)[1])
            problem = f"{plan.reads[first][2]}: its path alone needs {misfit(need, bucket)}"
            raise InstanceError([problem])
        segs, reads = list(own), list(own_reads[j])
        for c in children[j]:
            if subtree[c].reads == 0:
                continue  # no read needs it
            more = combine(need, subtree[c])
            if fits(more, bucket):
                cs, cr = members(c)
                segs, reads, need = segs + cs, reads + cr, more
            elif fits(combine(base, subtree[c]), bucket):
                emit(segs, reads)
                cs, cr = members(c)
                segs, reads, need = own + cs, cr, combine(base, subtree[c])
            else:
                visit(c, own, base)
        emit(segs, reads)

    for root in (j for j in range(n) if plan.parents[j] < 0):
        if subtree[root].reads == 0:
            continue
        if fits(subtree[root], bucket):
            emit(*members(root))
        else:
            visit(root, [], Sizes(0, 0, 0, 0, 0))
    return out
