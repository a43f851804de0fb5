"""The tree IR -> canonical .flide text; `parse_spec(print_spec(spec)) == spec` for every spec that parses.

Consumes a Spec and, optionally, a Layout (the comments and blank lines of the source it came from, which
the IR itself does not keep; flidec.frontend.layout builds one); produces the text `flidec fmt` writes and
`--dump-ir` shows. Deterministic: two-space indents, one tree per paragraph, what the language leaves
implicit left out again (the default bounds of ./defaults.py, a count the listed options already say).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from flidec.ir.defaults import DEFAULT_CRITERIA, DEFAULT_INSTRUCTIONS
from flidec.ir.tree import (
    Ask,
    AskType,
    Bound,
    ChoiceOptions,
    Fork,
    Format,
    Loc,
    Node,
    NoulCriteria,
    Range,
    ScoreLevels,
    Spec,
    Text,
    Tree,
)

INDENT = "  "
WIDTH = 110  # a criteria block that would make its line longer than this goes one entry per line
_NAME = re.compile(r"[^\W\d]\w*")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}


@dataclass(frozen=True)
class Layout:
    """Where a source's comments and blank lines go, keyed by the Loc of the node they belong to.

    leading: comment lines printed on their own lines before the node; trailing: one comment printed after
    the node's first line; closing: comments printed before the `}` of the tree or fork; blank_before:
    nodes printed after one blank line; end: comments after the last tree."""

    leading: Mapping[Loc, tuple[str, ...]] = field(default_factory=dict)
    trailing: Mapping[Loc, str] = field(default_factory=dict)
    closing: Mapping[Loc, tuple[str, ...]] = field(default_factory=dict)
    blank_before: frozenset[Loc] = frozenset()
    end: tuple[str, ...] = ()


def print_spec(spec: Spec, layout: Layout | None = None) -> str:
    return _Printer(layout or Layout()).spec(spec)


def quote(text: str) -> str:
    """A .flide string literal for `text`: escapes for \\ \" newline and tab, \\u{..} for the unprintable."""
    out = []
    for c in text:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif c.isprintable() or c == " ":
            out.append(c)
        else:
            out.append(f"\\u{{{ord(c):x}}}")
    return '"' + "".join(out) + '"'


def range_text(r: Range) -> str:
    return f"[{r.lo}]" if r.lo == r.hi else f"[{r.lo}..{r.hi}]"


def bound_text(b: Bound) -> str:
    return f"[..{b.max_tokens}]" if b.min_tokens == 0 else f"[{b.min_tokens}..{b.max_tokens}]"


def type_text(t: AskType, criteria: object = None) -> str:
    """An ask type as written; the count is left out where the language implies it."""
    if t.kind == "noul" and (t.options.lo, t.options.hi) == (2, 2):
        return "noul"
    listed = {"choice": ChoiceOptions, "score": ScoreLevels}.get(t.kind)
    if listed is not None and isinstance(criteria, listed):
        n = len(criteria.options) if isinstance(criteria, ChoiceOptions) else len(criteria.levels)
        if t.options.lo == t.options.hi == n:
            return t.kind
    return t.kind + range_text(t.options)


def _value(v: str | int | bool | tuple[int, ...]) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, tuple):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return quote(v)


def _options(options: list[tuple[str, str | int | bool | tuple[int, ...]]]) -> str:
    return "(" + ", ".join(f"{k}={_value(v)}" for k, v in options) + ")" if options else ""


class _Printer:
    def __init__(self, layout: Layout):
        self.layout = layout
        self.lines: list[str] = []

    def emit(self, depth: int, text: str, loc: Loc | None = None) -> None:
        """One node's first line, with its leading comments before it and its trailing comment after."""
        if loc is not None:
            for c in self.layout.leading.get(loc, ()):
                self.lines.append(INDENT * depth + c)
            trailing = self.layout.trailing.get(loc)
            if trailing:
                text = f"{text}  {trailing}"
        self.lines.append(INDENT * depth + text)

    def spec(self, spec: Spec) -> str:
        self.emit(0, f"model {spec.model}", spec.loc)
        self.format(spec.format)
        for tree in spec.trees:
            self.lines.append("")
            self.tree(tree)
        if self.layout.end:
            self.lines.append("")
            self.lines += list(self.layout.end)
        return "\n".join(self.lines) + "\n"

    def format(self, fmt: Format) -> None:
        self.emit(0, f"format {fmt.name}{_options(list(fmt.options))}", fmt.loc)

    def tree(self, tree: Tree) -> None:
        options: list[tuple[str, str | int | bool | tuple[int, ...]]] = []
        if tree.wire is not None:
            options.append(("wire", tree.wire))
        if tree.buckets:
            options.append(("buckets", tree.buckets))
        head = f"tree {tree.name} {_options(options)} {{" if options else f"tree {tree.name} {{"
        self.emit(0, head, tree.loc)
        s = tree.state
        resumable = " resumable" if s.resumable else ""
        self.emit(1, f"state {s.name}: text{bound_text(s.bound)}{resumable}", s.loc)
        self.body(tree.body, 1)
        self.close(0, tree.loc)

    def close(self, depth: int, loc: Loc) -> None:
        for c in self.layout.closing.get(loc, ()):
            self.lines.append(INDENT * (depth + 1) + c)
        self.lines.append(INDENT * depth + "}")

    def body(self, body: tuple[Node, ...], depth: int) -> None:
        for node in body:
            if node.loc in self.layout.blank_before:
                self.lines.append("")
            if isinstance(node, Text):
                self.text(node, depth)
            elif isinstance(node, Ask):
                self.ask(node, depth)
            else:
                self.fork(node, depth)

    def text(self, node: Text, depth: int) -> None:
        name = f" {node.name}" if node.name is not None else ""
        if isinstance(node.value, Bound):
            self.emit(depth, f"text{name}{bound_text(node.value)}", node.loc)
        else:
            self.emit(depth, f"text{name} {quote(node.value)}", node.loc)

    def fork(self, node: Fork, depth: int) -> None:
        text = f": text{bound_text(node.text)}" if node.text is not None else ""
        head = f"fork {node.name}{range_text(node.fanout)}{text} {{"
        if not node.body and not self.layout.closing.get(node.loc):
            self.emit(depth, head + "}", node.loc)
            return
        self.emit(depth, head, node.loc)
        self.body(node.body, depth + 1)
        self.close(depth, node.loc)

    def ask(self, ask: Ask, depth: int) -> None:
        repeat = range_text(ask.repeat) if ask.repeat is not None else ""
        types = " | ".join(type_text(t, ask.criteria) for t in ask.types)
        head = f"ask {ask.name}{repeat}: {types}"
        if ask.instructions == DEFAULT_INSTRUCTIONS and ask.criteria == DEFAULT_CRITERIA:
            self.emit(depth, head, ask.loc)
            return
        crit = ask.criteria
        is_block = isinstance(crit, (NoulCriteria, ChoiceOptions, ScoreLevels))
        instr = ask.instructions
        if isinstance(instr, str):
            head += " " + quote(instr)
        elif isinstance(instr, Bound):
            head += " bound" + bound_text(instr)
        elif not is_block:
            head += " none"
        if isinstance(crit, Bound):
            head += " bound" + bound_text(crit)
        if not is_block:
            self.emit(depth, head, ask.loc)
            return
        entries = _entries(crit)  # type: ignore[arg-type]
        inline = head + (" { " + ", ".join(entries) + " }" if entries else " {}")
        trailing = self.layout.trailing.get(ask.loc, "")
        if len(INDENT * depth + inline) + (len(trailing) + 2 if trailing else 0) <= WIDTH:
            self.emit(depth, inline, ask.loc)
            return
        self.emit(depth, head + " {", ask.loc)
        for e in entries:
            self.lines.append(INDENT * (depth + 1) + e)
        self.lines.append(INDENT * depth + "}")


def _entries(crit: NoulCriteria | ChoiceOptions | ScoreLevels) -> list[str]:
    if isinstance(crit, NoulCriteria):
        return [f"{k}: {quote(v)}" for k, v in (("yes", crit.true), ("no", crit.false)) if v is not None]
    if isinstance(crit, ScoreLevels):
        return [quote(x) for x in crit.levels]
    out = []
    for name, desc in crit.options:
        key = name if _NAME.fullmatch(name) else quote(name)
        out.append(key if desc is None else f"{key}: {quote(desc)}")
    return out
