"""Text form of the segment-template and program IR (the `--dump-ir` format), and its parser.

Consumes ir/template.Templates or ir/program.ProgramIR; produces deterministic text (two-space indents, one
item per line, `key=value` fields, segments numbered s0, s1, ... in pre-order, the ids layouts refer to);
`parse_templates(print_templates(t)) == t` and `parse_program(print_program(p)) == p`. Keys and ask paths
are spec names (letters, digits, _ and dots), so fields need no quoting; floats print with repr.
"""

from __future__ import annotations

from flidec.ir.program import Bucket, Layout, ProgramIR, Rung, TreeProgram
from flidec.ir.template import (
    Child,
    Const,
    Piece,
    ReadTemplate,
    Repeat,
    SegmentTemplate,
    Sizes,
    Slot,
    Templates,
    TreeTemplate,
)

INDENT = "  "


# ---- printing -------------------------------------------------------------------------------------------


def print_templates(ts: Templates) -> str:
    lines = ["templates"]
    for t in ts.trees:
        lines += _tree_template(t, 1)
    return "\n".join(lines) + "\n"


def print_program(p: ProgramIR) -> str:
    lines = [f"program padding={p.padding!r}"]
    for t in p.trees:
        lines.append(f"{INDENT}tree {t.name} basis={t.basis}")
        lines.append(f"{INDENT * 2}worst {_sizes(t.worst)}")
        for plan in t.buckets:
            b = plan.bucket
            lines.append(f"{INDENT * 2}bucket {b.name} {_sizes(b)} padding={plan.padding!r}")
            if plan.layout is not None:
                lines.append(f"{INDENT * 3}layout order={_ints(plan.layout.order)} "
                             f"level_rows={_ints(plan.layout.level_rows)}")
        lines += _tree_template(t.template, 2)
    return "\n".join(lines) + "\n"


def _sizes(s: Sizes | Bucket) -> str:
    return f"rows={s.rows} segments={s.segments} depth={s.depth} reads={s.reads} labels={s.labels}"


def _ints(xs: tuple[int, ...]) -> str:
    return ",".join(map(str, xs)) or "-"


def _tree_template(t: TreeTemplate, depth: int) -> list[str]:
    hints = f" buckets={_ints(t.buckets)}" if t.buckets else ""
    lines = [f"{INDENT * depth}template {t.tree}{hints}"]
    counter = [0]
    _segment(t.root, depth + 1, lines, counter)
    return lines


def _segment(s: SegmentTemplate, depth: int, lines: list[str], counter: list[int]) -> None:
    pad = INDENT * depth
    lines.append(f"{pad}segment s{counter[0]}")
    counter[0] += 1
    for p in s.pieces:
        if isinstance(p, Const):
            lines.append(f"{pad}{INDENT}const {' '.join(map(str, p.ids))}")
        else:
            lines.append(f"{pad}{INDENT}slot {p.kind} {p.key} max={p.max_tokens} head={p.head} tail={p.tail}")
    for r in s.reads:
        lines.append(f"{pad}{INDENT}read {r.ask} labels={_ints(r.labels)} max_labels={r.max_labels}")
    _children(s.children, depth + 1, lines, counter)


def _children(cs: tuple[Child, ...], depth: int, lines: list[str], counter: list[int]) -> None:
    for c in cs:
        if isinstance(c, Repeat):
            lines.append(f"{INDENT * depth}repeat {c.kind} {c.key} {c.lo}..{c.hi}")
            _children(c.body, depth + 1, lines, counter)
        else:
            _segment(c, depth, lines, counter)


# ---- parsing --------------------------------------------------------------------------------------------


class ParseError(ValueError):
    pass


class _Lines:
    """The text as (line number, indent level, words), read front to back."""

    def __init__(self, text: str):
        self.items: list[tuple[int, int, list[str]]] = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            stripped = line.lstrip(" ")
            indent = len(line) - len(stripped)
            if indent % len(INDENT):
                raise ParseError(f"line {n}: indent of {indent} spaces is not a multiple of {len(INDENT)}")
            self.items.append((n, indent // len(INDENT), stripped.split()))
        self.i = 0

    def peek(self, depth: int, word: str | None = None) -> bool:
        if self.i >= len(self.items):
            return False
        _, d, words = self.items[self.i]
        return d == depth and (word is None or words[0] == word)

    def take(self, depth: int, word: str) -> tuple[int, list[str]]:
        if not self.peek(depth, word):
            where = f"line {self.items[self.i][0]}" if self.i < len(self.items) else "the end"
            raise ParseError(f"{where}: expected `{word}` at indent {depth}")
        n, _, words = self.items[self.i]
        self.i += 1
        return n, words[1:]

    def done(self) -> None:
        if self.i < len(self.items):
            raise ParseError(f"line {self.items[self.i][0]}: unexpected `{' '.join(self.items[self.i][2])}`")


def _fields(n: int, words: list[str], names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for w in words:
        key, eq, value = w.partition("=")
        if not eq or key not in names or key in out:
            raise ParseError(f"line {n}: unexpected field {w!r}; expected {', '.join(names)}")
        out[key] = value
    if set(out) != set(names):
        raise ParseError(f"line {n}: missing {', '.join(sorted(set(names) - set(out)))}")
    return out


def _parse_ints(n: int, text: str) -> tuple[int, ...]:
    try:
        return () if text == "-" else tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ParseError(f"line {n}: {text!r} is not a list of integers") from None


def _int(n: int, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ParseError(f"line {n}: {text!r} is not an integer") from None


_SIZES = ("rows", "segments", "depth", "reads", "labels")


def parse_templates(text: str) -> Templates:
    lines = _Lines(text)
    lines.take(0, "templates")
    trees = []
    while lines.peek(1, "template"):
        trees.append(_parse_tree_template(lines, 1))
    lines.done()
    return Templates(tuple(trees))


def parse_program(text: str) -> ProgramIR:
    lines = _Lines(text)
    n, words = lines.take(0, "program")
    padding = float(_fields(n, words, ("padding",))["padding"])
    trees = []
    while lines.peek(1, "tree"):
        n, words = lines.take(1, "tree")
        if len(words) != 2:
            raise ParseError(f"line {n}: expected `tree NAME basis=...`")
        name, basis = words[0], _fields(n, words[1:], ("basis",))["basis"]
        n, words = lines.take(2, "worst")
        worst = Sizes(**{k: _int(n, v) for k, v in _fields(n, words, _SIZES).items()})
        rungs = []
        while lines.peek(2, "bucket"):
            n, words = lines.take(2, "bucket")
            f = _fields(n, words[1:], _SIZES + ("padding",))
            bucket = Bucket(words[0], *(_int(n, f[k]) for k in _SIZES))
            layout = None
            if lines.peek(3, "layout"):
                n, words = lines.take(3, "layout")
                lf = _fields(n, words, ("order", "level_rows"))
                layout = Layout(_parse_ints(n, lf["order"]), _parse_ints(n, lf["level_rows"]))
            rungs.append(Rung(bucket, float(f["padding"]), layout))
        template = _parse_tree_template(lines, 2)
        if template.tree != name:
            raise ParseError(f"tree {name} holds the template of tree {template.tree}")
        trees.append(TreeProgram(template, worst, tuple(rungs), basis))
    lines.done()
    return ProgramIR(tuple(trees), padding)


def _parse_tree_template(lines: _Lines, depth: int) -> TreeTemplate:
    n, words = lines.take(depth, "template")
    if not 1 <= len(words) <= 2:
        raise ParseError(f"line {n}: expected `template TREE [buckets=N,...]`")
    hints = _parse_ints(n, _fields(n, words[1:], ("buckets",))["buckets"]) if len(words) == 2 else ()
    return TreeTemplate(words[0], _parse_segment(lines, depth + 1), hints)


def _parse_segment(lines: _Lines, depth: int) -> SegmentTemplate:
    lines.take(depth, "segment")
    pieces: list[Piece] = []
    reads: list[ReadTemplate] = []
    while lines.peek(depth + 1, "const") or lines.peek(depth + 1, "slot"):
        word = lines.items[lines.i][2][0]
        n, words = lines.take(depth + 1, word)
        if word == "const":
            pieces.append(Const(tuple(_int(n, w) for w in words)))
        else:
            if len(words) != 5 or words[0] not in ("state", "text", "question"):
                raise ParseError(f"line {n}: expected `slot state|text|question KEY max= head= tail=`")
            f = _fields(n, words[2:], ("max", "head", "tail"))
            pieces.append(Slot(words[0], words[1], _int(n, f["max"]), _int(n, f["head"]),  # type: ignore[arg-type]
                               _int(n, f["tail"])))
    while lines.peek(depth + 1, "read"):
        n, words = lines.take(depth + 1, "read")
        if not words:
            raise ParseError(f"line {n}: expected `read ASK labels= max_labels=`")
        f = _fields(n, words[1:], ("labels", "max_labels"))
        reads.append(ReadTemplate(words[0], _parse_ints(n, f["labels"]), _int(n, f["max_labels"])))
    return SegmentTemplate(tuple(pieces), tuple(reads), _parse_children(lines, depth + 1))


def _parse_children(lines: _Lines, depth: int) -> tuple[Child, ...]:
    out: list[Child] = []
    while True:
        if lines.peek(depth, "segment"):
            out.append(_parse_segment(lines, depth))
        elif lines.peek(depth, "repeat"):
            n, words = lines.take(depth, "repeat")
            lo, dots, hi = words[2].partition("..") if len(words) == 3 else ("", "", "")
            if not dots or words[0] not in ("fork", "questions"):
                raise ParseError(f"line {n}: expected `repeat fork|questions KEY LO..HI`")
            out.append(Repeat(words[0], words[1], _int(n, lo), _int(n, hi),  # type: ignore[arg-type]
                              _parse_children(lines, depth + 1)))
        else:
            return tuple(out)
