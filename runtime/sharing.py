"""Shared states: the requests of one run whose roots begin with the same tokens, forked from one root.

Consumes a run's pieces (runtime/packing.Piece); produces the same reads in fewer rows: pieces whose whole
plans have one root and whose roots share at least MIN_SHARED leading ids become one piece whose plan is
their radix tree (each common prefix one segment, each request's rest of its root a child, its own segments
below). This is the compiler's prefix dedup applied at run time: every read keeps its path's ids and
positions and gains only fork points, which by E1 never change its bits. Pieces that resume from a saved
point share only with pieces resuming from the same point; a saved point is made from the shared root only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import groupby

from flidec.ir.program import Bucket
from flidec.runtime.binder import Plan
from flidec.runtime.packing import Piece
from flidec.runtime.saved.keys import BLOCK
from flidec.runtime.split import fits, plan_sizes

MIN_SHARED = BLOCK  # fewer common ids save less than the fork costs (a straddling GDN chunk recomputed)


def common(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _root(p: Piece) -> list[int]:
    return p.plan.ids[0]


def _eligible(p: Piece) -> bool:
    return p.whole and p.plan.parents.count(-1) == 1 and bool(p.plan.ids[0])


def share(pieces: list[Piece], largest: Bucket, counted: dict[int, int] | None = None) -> list[Piece]:
    """The pieces with each group that shares a prefix merged (order: merged groups where their first member
    was). `counted`, if given, gets per request index the positions of its root computed once for the group
    (a group's shared prefix, past what its saved point held)."""
    groups: dict[tuple[int, tuple[int, ...]], list[int]] = defaultdict(list)
    for i, p in enumerate(pieces):
        if _eligible(p) and len(_root(p)) >= MIN_SHARED:
            groups[id(p.plan.held), tuple(_root(p)[:MIN_SHARED])].append(i)
    replaced: dict[int, Piece | None] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        for merged, used in _merged([pieces[i] for i in members], largest, counted):
            for k, i in enumerate(used):
                replaced[members[i]] = merged if k == 0 else None
    out = []
    for i, p in enumerate(pieces):
        got = replaced.get(i, p)
        if got is not None:
            out.append(got)
    return out


def _merged(group: list[Piece], largest: Bucket, counted: dict[int, int] | None
            ) -> list[tuple[Piece, list[int]]]:
    """Merged pieces of `group` (members sharing their first MIN_SHARED ids and saved point) that fit
    `largest`, with the group indices each holds; a part that does not fit is halved (in root order)."""
    order = sorted(range(len(group)), key=lambda i: _root(group[i]))
    out: list[tuple[Piece, list[int]]] = []
    todo = [order]
    while todo:
        part = todo.pop()
        if len(part) < 2:
            continue
        while True:  # a member whose saved point lies past the shared root runs apart and makes it
            top = common(_root(group[part[0]]), _root(group[part[-1]]))
            keep = [i for i in part if group[i].plan.save <= top]
            if len(keep) == len(part) or len(keep) < 2:
                break
            part = keep
        if len(keep) < 2:
            continue
        members = [group[i] for i in part]
        made = _tree(members)
        if made is not None and fits(made[0].sizes, largest):
            out.append((made[0], part))
            if counted is not None:
                counted.update(made[1])
        elif made is not None:
            todo += [part[: len(part) // 2], part[len(part) // 2 :]]
    return out


def _tree(members: list[Piece]) -> tuple[Piece, dict[int, int]] | None:
    """One piece holding `members` (sorted by root) as a radix tree of their roots, and per request the
    positions it shares; None when their shared prefix would leave a resumed root nothing to compute."""
    held = members[0].plan.held
    top = common(_root(members[0]), _root(members[-1]))  # sorted: the first and last share what all share
    if held is not None and top <= held.length:
        return None
    plan = Plan()
    owners: list[tuple[int, int]] = []
    shared: dict[int, int] = {}

    def attach(p: Piece, start: int, parent: int) -> None:
        """p's plan under `parent`, its root's ids from `start` on (nothing left: its children and reads
        hang off `parent`, whose last id is its root's last)."""
        at: list[int] = []
        for j, up in enumerate(p.plan.parents):
            ids = p.plan.ids[j][start:] if j == 0 else p.plan.ids[j]
            under = at[up] if up >= 0 else parent
            at.append(under if j == 0 and not ids else plan.segment(ids, under))
        for r, (seg, piece, path) in enumerate(p.plan.reads):
            plan.reads.append((at[seg], piece, path))
            owners.append(p.owners[r])

    def build(group: list[Piece], start: int, end: int, parent: int) -> None:
        """`group` shares ids [0, end); [start, end) becomes one segment under `parent`."""
        seg = plan.segment(_root(group[0])[start:end], parent)
        for p in group:
            shared[p.owners[0][0]] = end
        for _, sub in groupby(group, key=lambda p: _root(p)[end] if len(_root(p)) > end else None):
            sub = list(sub)
            deeper = common(_root(sub[0]), _root(sub[-1])) if len(sub) > 1 else end
            if deeper - end >= MIN_SHARED:
                build(sub, end, deeper, seg)
            else:
                for p in sub:
                    attach(p, end, seg)

    build(members, 0, top, -1)
    # the point to save: the furthest one that lies in the shared root, with the session that asked for it
    saves = [p for p in members if 0 < p.plan.save <= top]
    saver = max(saves, key=lambda p: p.plan.save, default=None)
    plan.held = held
    if saver is not None:
        plan.save, plan.save_key = saver.plan.save, saver.plan.save_key
    base = 0 if held is None else held.length
    piece = Piece(plan, plan_sizes(plan), tuple(owners), saver=-1 if saver is None else saver.saver)
    return piece, {k: n - base for k, n in shared.items()}
