"""The segment-template IR: a tree's stream segments with every spec- or format-fixed piece pre-tokenized.

Produced by passes/fold_prompt_text.py (from the tree IR, a format and a tokenizer), reshaped by
passes/dedup_prefixes.py, consumed by the bucketing and layout passes and by runtime/templates.py, which
binds instances from it. Pure data (token ids, instance keys, ask paths): printable and parsable by
./program_printer.py. A segment is a run of pieces, each constant token ids or a slot the instance fills
(with an enforced token bound, so worst cases are exact); `Repeat` multiplies its body per instance (a
fork's branches, a keyed set of asks) and opens the branch's scope for instance keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SlotKind = Literal["state", "text", "question"]
RepeatKind = Literal["fork", "questions"]


@dataclass(frozen=True, slots=True)
class Const:
    ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Slot:
    """Ids the instance fills in: `state` (the root text under `key`; the format's root piece minus its
    `head` constant ids), `text` (a bound text under `key`, "text" for a branch's leading text) or
    `question` (the ask at path `key`: its block's ids minus `head` leading and `tail` trailing constant
    ids). At most `max_tokens` ids: the binder refuses an instance that needs more."""

    kind: SlotKind
    key: str
    max_tokens: int
    head: int = 0
    tail: int = 0


Piece = Const | Slot


@dataclass(frozen=True, slots=True)
class ReadTemplate:
    """An ask read at its segment's last token. `ask`: its path in the tree (fork names, then the ask's
    name, dot-separated); `labels`: its label ids when the spec fixes them, else (); `max_labels`."""

    ask: str
    labels: tuple[int, ...]
    max_labels: int


@dataclass(frozen=True, slots=True)
class SegmentTemplate:
    pieces: tuple[Piece, ...]
    reads: tuple[ReadTemplate, ...] = ()
    children: tuple[Child, ...] = ()


@dataclass(frozen=True, slots=True)
class Repeat:
    """`body` once per item of the instance's `key`: a fork's branch objects, or a keyed set's questions."""

    kind: RepeatKind
    key: str
    lo: int
    hi: int
    body: tuple[Child, ...]


Child = SegmentTemplate | Repeat


@dataclass(frozen=True, slots=True)
class TreeTemplate:
    """A tree's segments from its root; `buckets`: the tree's bucket hints (row counts), carried along."""

    tree: str
    root: SegmentTemplate
    buckets: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Templates:
    trees: tuple[TreeTemplate, ...]


@dataclass(frozen=True, slots=True)
class Sizes:
    """An instance's (or a worst case's) stream needs: rows, segments, path depth, reads, labels per read."""

    rows: int
    segments: int
    depth: int
    reads: int
    labels: int


def segments_preorder(root: SegmentTemplate) -> list[tuple[SegmentTemplate, int]]:
    """(segment, level) in pre-order: a segment, its pieces' children in order; ids in dumps and layouts."""
    out: list[tuple[SegmentTemplate, int]] = []

    def seg(s: SegmentTemplate, level: int) -> None:
        out.append((s, level))
        children(s.children, level + 1)

    def children(cs: tuple[Child, ...], level: int) -> None:
        for c in cs:
            if isinstance(c, Repeat):
                children(c.body, level)
            else:
                seg(c, level)

    seg(root, 0)
    return out


def max_tokens(s: SegmentTemplate) -> int:
    return sum(len(p.ids) if isinstance(p, Const) else p.max_tokens for p in s.pieces)


def const_tokens(s: SegmentTemplate) -> int:
    return sum(len(p.ids) for p in s.pieces if isinstance(p, Const))


def level_rows(t: TreeTemplate, worst: bool = True) -> list[int]:
    """Rows per level at the most (worst) or fewest (slots empty, repeats at their least) an instance has."""
    levels: list[int] = []

    def add(level: int, n: int) -> None:
        levels.extend([0] * (level + 1 - len(levels)))
        levels[level] += n

    def seg(s: SegmentTemplate, level: int, copies: int) -> None:
        add(level, copies * (max_tokens(s) if worst else const_tokens(s)))
        children(s.children, level + 1, copies)

    def children(cs: tuple[Child, ...], level: int, copies: int) -> None:
        for c in cs:
            if isinstance(c, Repeat):
                children(c.body, level, copies * (c.hi if worst else c.lo))
            else:
                seg(c, level, copies)

    seg(t.root, 0, 1)
    return levels


def worst_sizes(t: TreeTemplate) -> Sizes:
    """The most any instance within the tree's declared bounds needs (exact: slots are enforced)."""
    segs = reads = labels = 0
    per_read_max = 0

    def walk(cs: tuple[Child, ...], copies: int) -> None:
        nonlocal segs, reads, labels, per_read_max
        for c in cs:
            if isinstance(c, Repeat):
                walk(c.body, copies * c.hi)
            else:
                segs += copies
                reads += copies * len(c.reads)
                labels = max([labels, *(r.max_labels for r in c.reads)])
                walk(c.children, copies)

    walk((t.root,), 1)
    depth = 1 + max(level for _, level in segments_preorder(t.root))
    return Sizes(sum(level_rows(t)), segs, depth, reads, labels)


def worst_path_rows(t: TreeTemplate) -> int:
    """The most rows one read's path (its segment and every ancestor) can have within the declared bounds:
    what the largest bucket must hold for every instance within them to run, split if need be."""
    path: list[int] = []  # rows from the root down to each level of the segment being visited
    most = 0
    for s, level in segments_preorder(t.root):  # a parent before its children
        del path[level:]
        path.append((path[-1] if path else 0) + max_tokens(s))
        if s.reads:
            most = max(most, path[-1])
    return most


def min_rows(t: TreeTemplate) -> int:
    return sum(level_rows(t, worst=False))


def max_reads_per_segment(t: TreeTemplate) -> int:
    return max(len(s.reads) for s, _ in segments_preorder(t.root))


def verify_templates(ts: Templates) -> list[str]:
    """Structural problems: empty or bad slots, empty constants, reads on segments that may be empty,
    bad repeat counts, duplicate tree names."""
    problems: list[str] = []
    seen: set[str] = set()
    for t in ts.trees:
        if t.tree in seen:
            problems.append(f"tree {t.tree}: two templates")
        seen.add(t.tree)
        if not any(isinstance(p, Slot) and p.kind == "state" for p in t.root.pieces):
            problems.append(f"tree {t.tree}: the root segment has no state slot")
        for k, (s, level) in enumerate(segments_preorder(t.root)):
            where = f"tree {t.tree}: segment s{k}"
            if not s.pieces:
                problems.append(f"{where} has no pieces")
            for p in s.pieces:
                if isinstance(p, Const) and not p.ids:
                    problems.append(f"{where}: an empty constant")
                if isinstance(p, Slot):
                    if p.max_tokens < 0 or p.head < 0 or p.tail < 0:
                        problems.append(f"{where}: slot {p.key} has a negative count")
                    if p.kind == "state" and (level or k):
                        problems.append(f"{where}: a state slot below the root")
            if s.reads and const_tokens(s) == 0 and not any(isinstance(p, Slot) and p.kind == "question"
                                                             for p in s.pieces):
                problems.append(f"{where}: its reads sit on a segment that may be empty")
            for r in s.reads:
                if r.labels and len(r.labels) != r.max_labels:
                    problems.append(f"{where}: read {r.ask} has {len(r.labels)} labels but max_labels "
                                    f"{r.max_labels}")
                if r.max_labels < 2:
                    problems.append(f"{where}: read {r.ask} has fewer than 2 labels")
        _check_repeats(t.tree, t.root.children, problems)
    return problems


def _check_repeats(tree: str, cs: tuple[Child, ...], problems: list[str]) -> None:
    for c in cs:
        if isinstance(c, Repeat):
            if not 0 <= c.lo <= c.hi or c.hi < 1:
                problems.append(f"tree {tree}: repeat {c.key} has the bad count {c.lo}..{c.hi}")
            if not c.body:
                problems.append(f"tree {tree}: repeat {c.key} has an empty body")
            _check_repeats(tree, c.body, problems)
        else:
            _check_repeats(tree, c.children, problems)
