"""fold_prompt_text: tree IR -> segment-template IR, every piece the spec or the format fixes pre-tokenized.

Consumes a verified Spec and the context's format (flidec.runtime.next_token, built on the model's
tokenizer); produces ir/template.Templates: per tree, the segments the binder would cut (the root: chat
header + state; each run of texts after a branch point; each fork branch; each ask's block), what the spec
fixes as token ids and what the instance fills in as slots. Relies on the format's cut rule: every boundary
between two pieces here is one the format's own pieces cut at, so constants never merge with their
neighbours. A slot's bound is its declared token bound plus the format's framing around it, each join of
two encoded texts allowed JOIN more; runtime/templates.py refuses an instance over it, so the worst case
per segment is a contract, not an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flidec.ir.template import (
    Child,
    Const,
    Piece,
    ReadTemplate,
    Repeat,
    SegmentTemplate,
    Slot,
    Templates,
    TreeTemplate,
)
from flidec.ir.tree import Ask, Bound, Fork, Node, Spec, Text, Tree, asks_in
from flidec.passes.context import CompileContext
from flidec.passes.manager import register
from flidec.runtime.decision.reading import DecisionReading
from flidec.runtime.next_token import REPLY, SEP, NextTokenFormat

JOIN = 1  # tokens one junction between two separately counted texts may add (see module doc)


@register("fold_prompt_text", level_in="tree", level_out="template")
def fold_prompt_text(spec: Spec, ctx: CompileContext) -> Templates:
    fmt = ctx.fmt
    if fmt is None:
        raise ValueError("fold_prompt_text needs the context's format (a tokenizer): ctx.fmt is None")
    if isinstance(fmt, DecisionReading):
        return Templates(tuple(fold_decision_tree(tree, fmt) for tree in spec.trees))
    return Templates(tuple(fold_tree(tree, fmt) for tree in spec.trees))


@dataclass
class _Seg:
    pieces: list[Piece] = field(default_factory=list)
    reads: list[ReadTemplate] = field(default_factory=list)
    children: list[_Seg | _Rep] = field(default_factory=list)


@dataclass
class _Rep:
    kind: str
    key: str
    lo: int
    hi: int
    body: list[_Seg | _Rep] = field(default_factory=list)


def fold_tree(tree: Tree, fmt: NextTokenFormat) -> TreeTemplate:
    head = fmt.root_head
    # the root piece after the header: the header's plain tail ("user\n"), the state, the separator
    state_max = tree.state.bound.max_tokens + len(fmt.root_piece("")) - len(head) + 2 * JOIN
    root = _Seg([Const(head), Slot("state", tree.state.name, state_max, head=len(head))])
    _Folder(fmt).body(tree.body, root, root.children, True, "")
    return TreeTemplate(tree.name, _freeze(root), tree.buckets)


class _Folder:
    def __init__(self, fmt: NextTokenFormat):
        self.fmt = fmt
        self.sep = fmt.count_tokens(SEP)

    def body(self, nodes: tuple[Node, ...], cur: _Seg, into: list[_Seg | _Rep], is_open: bool,
             prefix: str) -> None:
        """Fold `nodes` (a scope's body): texts extend `cur` while nothing has branched off it, new
        segments go into `into` (cur's children, or the repeat that multiplies them)."""
        for node in nodes:
            if isinstance(node, Text):
                piece = self.text(node)
                if piece is None:
                    continue
                if is_open:
                    cur.pieces.append(piece)
                else:
                    cur = _Seg([piece])
                    into.append(cur)
                    into, is_open = cur.children, True
            elif isinstance(node, Ask):
                is_open = False
                seg = self.ask(node, prefix + node.name)
                into.append(_Rep("questions", node.name, node.repeat.lo, node.repeat.hi, [seg])
                            if node.repeat is not None else seg)
            else:
                is_open = False
                into.append(self.fork(node, cur, prefix))

    def text(self, node: Text) -> Piece | None:
        if isinstance(node.value, Bound):
            return Slot("text", str(node.name), node.value.max_tokens + self.sep + JOIN)
        ids = self.fmt.text_piece(node.value, True)
        return Const(ids) if ids else None

    def fork(self, fork: Fork, cur: _Seg, prefix: str) -> _Rep:
        rep = _Rep("fork", fork.name, fork.fanout.lo, fork.fanout.hi)
        scope = f"{prefix}{fork.name}."
        if fork.text is not None:
            seg = _Seg([Slot("text", "text", fork.text.max_tokens + self.sep + JOIN)])
            rep.body.append(seg)
            self.body(fork.body, seg, seg.children, True, scope)
        else:  # the branch's nodes hang off the fork point, once per branch
            self.body(fork.body, cur, rep.body, False, scope)
        return rep

    def ask(self, ask: Ask, path: str) -> _Seg:
        """An ask's block: constant question lines, option lines, reply instructions and the footer with the
        generation prompt as ids, and each run of lines the instance fills in as one question slot."""
        lines = self.fmt.ask_lines(ask)
        pieces: list[Piece] = []
        for k, ids in enumerate(lines):
            if ids is not None:
                pieces.append(Const(ids))
                continue
            head = sum(len(x) for x in lines[:k] if x is not None)
            tail = sum(len(x) for x in lines[k + 1:] if x is not None)
            pieces.append(Slot("question", path, self.question_max(ask), head=head, tail=tail))
        return _Seg(pieces, [self.read(ask, path)])

    def read(self, ask: Ask, path: str) -> ReadTemplate:
        if len(ask.types) == 1 and not isinstance(ask.criteria, Bound):
            labels = tuple(self.fmt.ask_piece(ask, None, path).labels)
            return ReadTemplate(path, labels, len(labels))
        return ReadTemplate(path, (), max(2 if t.kind == "noul" else t.options.hi for t in ask.types))

    def question_max(self, ask: Ask) -> int:
        """The most ids an ask's instance-filled lines take (the format's ask_lines says which)."""
        fmt, n = self.fmt, 0
        if isinstance(ask.instructions, Bound):
            n += ask.instructions.max_tokens + fmt.count_tokens("Question: \n") + 2 * JOIN
        if len(ask.types) > 1 or isinstance(ask.criteria, Bound):
            crit = ask.criteria.max_tokens if isinstance(ask.criteria, Bound) else 0
            n += crit + max(self.option_lines_max(t.kind, 2 if t.kind == "noul" else t.options.hi)
                            for t in ask.types)
        if len(ask.types) > 1:
            n += max(fmt.count_tokens(REPLY[t.kind]) for t in ask.types) + JOIN
        return n

    def option_lines_max(self, kind: str, options: int) -> int:
        """Framing of `options` option lines ("A: name - desc\\n"): label, ": ", " - ", newline, joins."""
        labels = (self.fmt.labels.noul() if kind == "noul" else
                  self.fmt.labels.choice(options) if kind == "choice" else self.fmt.labels.score(options))
        frame = self.fmt.count_tokens(": ") + self.fmt.count_tokens(" - ") + self.fmt.count_tokens("\n")
        return sum(self.fmt.count_tokens(t) + frame + 4 * JOIN for t in labels.texts)


def _freeze(seg: _Seg) -> SegmentTemplate:
    pieces: list[Piece] = []
    for p in seg.pieces:  # adjacent constants are one run of ids
        if isinstance(p, Const) and pieces and isinstance(pieces[-1], Const):
            pieces[-1] = Const(pieces[-1].ids + p.ids)
        else:
            pieces.append(p)
    return SegmentTemplate(tuple(pieces), tuple(seg.reads), tuple(_freeze_child(c) for c in seg.children))


def _freeze_child(c: _Seg | _Rep) -> Child:
    if isinstance(c, _Rep):
        return Repeat(c.kind, c.key, c.lo, c.hi, tuple(_freeze_child(b) for b in c.body))  # type: ignore[arg-type]
    return _freeze(c)


def fold_decision_tree(tree: Tree, reading: DecisionReading) -> TreeTemplate:
    """A tree's segments under a decision format, for sizing only: its walker (runtime/decision/reading.py)
    renders each question's whole prompt and cuts the segments where the prompts part, so no constant is
    pre-tokenized here. Each slot's bound adds the format's own framing (a one-question probe prompt's
    tokens, DecisionReading.probe_tokens) to the spec's token bounds: an upper bound of the segment, and the
    largest bucket holds the longest path it allows; the walker refuses a path over it."""
    frame = max(reading.probe_tokens(t.kind, t.options.hi) for ask in asks_in(tree.body) for t in ask.types)
    root = _Seg([Slot("state", tree.state.name, tree.state.bound.max_tokens + frame + 2 * JOIN)])
    _DecisionFolder(reading).body(tree.body, root, root.children, True, "")
    return TreeTemplate(tree.name, _freeze(root), tree.buckets)


class _DecisionFolder(_Folder):
    def __init__(self, reading: DecisionReading):
        self.r = reading
        self.sep = reading.count_tokens(SEP)

    def text(self, node: Text) -> Piece | None:
        if isinstance(node.value, Bound):
            return Slot("text", str(node.name), node.value.max_tokens + self.sep + JOIN)
        text = node.value.lstrip()
        return Const(tuple(self.r.tok.encode(text + SEP))) if text else None

    def ask(self, ask: Ask, path: str) -> _Seg:
        fmt = self.r.fmt
        most = max(len(rows) for rows in fmt.rows.values())
        n = 0
        if isinstance(ask.instructions, Bound):
            n += ask.instructions.max_tokens + 2 * JOIN
        if isinstance(ask.criteria, Bound):
            n += ask.criteria.max_tokens + 4 * JOIN * max(t.options.hi for t in ask.types)
        frame = max(self.r.probe_tokens(t.kind, t.options.hi) for t in ask.types)
        labels = max((2 if t.kind == "noul" else min(t.options.hi, fmt.most_options(t.kind))) * most
                     for t in ask.types)
        return _Seg([Slot("question", path, n + frame)], [ReadTemplate(path, (), max(2, labels))])
