"""Source text -> tree IR: parse a .flide spec with the lark grammar and build flidec.ir.tree values.

Consumes a spec's text (and the file name used in locations); produces a Spec whose every node carries a
Loc spanning its whole declaration. The grammar only knows shapes; this module reports what it cannot (an
unknown ask type, a bad escape, a count written where a token bound belongs, ...). Syntax errors stop at
the first one (LALR has no recovery); every other problem found while building is reported together as one
SpecError. Whether the spec makes sense (names, limits, the format's labels) is ir/verify.py's job.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import replace
from pathlib import Path

import lark

from flidec.frontend.syntax_errors import describe_syntax_error
from flidec.ir.defaults import DEFAULT_CRITERIA, DEFAULT_INSTRUCTIONS
from flidec.ir.errors import Diagnostic, SpecError
from flidec.ir.tree import (
    Ask,
    AskType,
    Bound,
    ChoiceOptions,
    Criteria,
    Fork,
    Format,
    Loc,
    Node,
    NoulCriteria,
    Range,
    ScoreLevels,
    Spec,
    State,
    Text,
    Tree,
)
from flidec.ir.verify import MAX_FORK_DEPTH

ASK_KINDS = ("noul", "choice", "score")
# Words people reach for instead of the three ask types.
_KIND_ALIASES = {
    "bool": "noul", "boolean": "noul", "yesno": "noul", "yes_no": "noul", "predicate": "noul",
    "enum": "choice", "select": "choice", "option": "choice", "options": "choice",
    "rating": "score", "scale": "score", "level": "score", "levels": "score",
}
TREE_OPTIONS = ("buckets", "wire")
# Forks nested deeper than this are not built (the builder recurses a few frames a level; Python's stack
# would run out near 250): the verifier's own limit is MAX_FORK_DEPTH, so nothing it accepts is cut.
MAX_BUILD_DEPTH = 64
_ESCAPE = re.compile(r"\\(u\{([0-9A-Fa-f]{1,6})\}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


@functools.cache
def _lark() -> lark.Lark:
    return lark.Lark(
        (Path(__file__).parent / "grammar.lark").read_text(encoding="utf-8"),
        parser="lalr",
        lexer="contextual",
        propagate_positions=True,
        maybe_placeholders=False,
    )


def parse_spec(source: str, file: str = "<spec>") -> Spec:
    """Parse one spec; raise SpecError (with the source, for carets) on any problem."""
    try:
        tree = _lark().parse(source)
    except lark.exceptions.UnexpectedInput as e:
        raise SpecError([describe_syntax_error(e, source, file, _lark())], source) from None
    builder = _Builder(file)
    spec = builder.spec(tree)
    if builder.diagnostics:
        raise SpecError(builder.diagnostics, source)
    return spec


def read_spec(path: str | Path) -> tuple[Spec, str]:
    """Read and parse a spec file; returns the Spec and its source text (for rendering diagnostics)."""
    path = Path(path)
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError([Diagnostic(Loc(str(path)), f"cannot read the spec: {e}")]) from None
    return parse_spec(source, str(path)), source


def unescape(raw: str) -> tuple[str, list[tuple[int, str, str]]]:
    """The value of a STRING token's text (quotes included) and its bad escapes as (offset, message, hint)."""
    problems: list[tuple[int, str, str]] = []

    def one(m: re.Match[str]) -> str:
        if m.group(2) is not None:
            code = int(m.group(2), 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                problems.append((m.start(), f"\\u{{{m.group(2)}}} is not a Unicode scalar value",
                                 "write a code point in 0..10FFFF outside the surrogates D800..DFFF"))
                return ""
            return chr(code)
        c = m.group(1)
        if c in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[c]
        problems.append((m.start(), f"unknown escape \\{c}",
                         'the escapes are \\n \\t \\" \\\\ and \\u{hex}; write \\\\ for a backslash'))
        return ""

    return _ESCAPE.sub(one, raw[1:-1]), problems


class _Builder:
    """Walks lark's parse tree once, building IR values and collecting diagnostics."""

    def __init__(self, file: str):
        self.file = file
        self.diagnostics: list[Diagnostic] = []
        self.depth = 0  # forks around the node being built

    def error(self, loc: Loc, message: str, hint: str | None = None) -> None:
        self.diagnostics.append(Diagnostic(loc, message, hint))

    def loc(self, item: lark.Tree | lark.Token) -> Loc:
        if isinstance(item, lark.Token):
            return Loc(self.file, item.line, item.column, item.end_line, item.end_column)
        m = item.meta
        if m.empty:
            return Loc(self.file)
        return Loc(self.file, m.line, m.column, m.end_line, m.end_column)

    def string(self, token: lark.Token) -> str:
        value, problems = unescape(str(token))
        for offset, message, hint in problems:
            # offset counts from after the opening quote; strings never span lines.
            col = token.column + 1 + offset
            self.error(Loc(self.file, token.line, col, token.line, col + 2), message, hint)
        return value

    # ---- spec level -------------------------------------------------------------------------------------

    def spec(self, t: lark.Tree) -> Spec:
        model_decl, format_decl, *trees = t.children
        return Spec(
            model=str(model_decl.children[0]),
            format=self.format(format_decl),
            trees=tuple(self.tree(x) for x in trees),
            loc=self.loc(t),
        )

    def format(self, t: lark.Tree) -> Format:
        name, *rest = t.children
        options = []
        for key, value, vloc in self.options(rest[0] if rest else None):
            if isinstance(value, tuple):
                self.error(vloc, f"format option `{key}` takes a string, a number or true/false, not a list")
                continue
            options.append((key, value))
        return Format(str(name), tuple(options), self.loc(t))

    def options(self, t: lark.Tree | None) -> list[tuple[str, object, Loc]]:
        if t is None:
            return []
        seen: set[str] = set()
        out = []
        for opt in t.children:
            key_tok, value = opt.children
            key = str(key_tok)
            if key in seen:
                self.error(self.loc(opt), f"option `{key}` is given twice", "keep one of them")
                continue
            seen.add(key)
            out.append((key, self.value(value), self.loc(value)))
        return out

    def value(self, t: lark.Tree) -> object:
        if t.data == "str_value":
            return self.string(t.children[0])
        if t.data == "int_value":
            return int(t.children[0])
        if t.data == "true_value":
            return True
        if t.data == "false_value":
            return False
        return tuple(int(x) for x in t.children)

    def tree(self, t: lark.Tree) -> Tree:
        name = t.children[0]
        rest = t.children[1:]
        wire: str | None = None
        buckets: tuple[int, ...] = ()
        if rest and isinstance(rest[0], lark.Tree) and rest[0].data == "options":
            for key, value, vloc in self.options(rest[0]):
                if key == "wire" and isinstance(value, str):
                    wire = value
                elif key == "buckets" and isinstance(value, tuple):
                    buckets = value
                elif key in TREE_OPTIONS:
                    want = 'a string: wire="systemone"' if key == "wire" else "a list: buckets=[4096, 8192]"
                    self.error(vloc, f"tree option `{key}` takes {want}")
                else:
                    self.error(vloc, f"unknown tree option `{key}`", _did_you_mean(key, TREE_OPTIONS)
                               or "the tree options are buckets=[...] and wire=\"...\"")
            rest = rest[1:]
        state, *body = rest
        return Tree(str(name), self.state(state), self.body(body), wire, buckets, self.loc(t))

    def state(self, t: lark.Tree) -> State:
        name, brackets, *resumable = t.children
        return State(str(name), self.bound(brackets), bool(resumable), self.loc(t))

    def body(self, nodes: list[lark.Tree]) -> tuple[Node, ...]:
        return tuple(self.node(n) for n in nodes)

    def node(self, t: lark.Tree) -> Node:
        if t.data == "const_text":
            *name, value = t.children
            return Text(str(name[0]) if name else None, self.string(value), self.loc(t))
        if t.data == "bound_text":
            name, brackets = t.children
            return Text(str(name), self.bound(brackets), self.loc(t))
        if t.data == "fork_decl":
            return self.fork(t)
        return self.ask(t)

    def fork(self, t: lark.Tree) -> Fork:
        name, brackets, *rest = t.children
        text = None
        if rest and isinstance(rest[0], lark.Tree) and rest[0].data == "fork_text":
            text = self.bound(rest[0].children[0])
            rest = rest[1:]
        if self.depth >= MAX_BUILD_DEPTH:  # reported once, at the first fork too deep; its body is not built
            self.error(self.loc(t), f"fork `{name}` is over {MAX_BUILD_DEPTH} levels deep; the limit is "
                       f"{MAX_FORK_DEPTH}", "flatten the tree: fewer nested forks")
            return Fork(str(name), self.count(brackets, "a fan-out"), text, (), self.loc(t))
        self.depth += 1
        body = self.body(rest)
        self.depth -= 1
        return Fork(str(name), self.count(brackets, "a fan-out"), text, body, self.loc(t))

    # ---- asks -------------------------------------------------------------------------------------------

    def ask(self, t: lark.Tree) -> Ask:
        name, *rest = t.children
        repeat = None
        if isinstance(rest[0], lark.Tree) and rest[0].data in ("exact", "upto", "span"):
            repeat = self.count(rest[0], "a repeat count")
            rest = rest[1:]
        types_tree, tail = rest
        instructions: str | Bound | None
        criteria_tree: lark.Tree | None = None
        if not tail.children:  # nothing written: both parts bound, with the defaults, located at the ask
            instructions, criteria_tree = replace(DEFAULT_INSTRUCTIONS, loc=self.loc(t)), None
        elif tail.children[0].data == "block":
            instructions, criteria_tree = None, tail.children[0]
        else:
            instructions = self.instructions(tail.children[0])
            criteria_tree = tail.children[1] if len(tail.children) > 1 else None
        block = criteria_tree if criteria_tree is not None and criteria_tree.data == "block" else None
        types = tuple(self.ask_type(x, block, len(types_tree.children)) for x in types_tree.children)
        criteria: Criteria | Bound | None
        if not tail.children:
            criteria = replace(DEFAULT_CRITERIA, loc=self.loc(t))
        elif criteria_tree is None:
            criteria = None
        elif block is None:
            criteria = self.bound(criteria_tree.children[0])
        else:
            criteria = self.block(block, types)
        return Ask(str(name), types, instructions, criteria, repeat, self.loc(t))

    def instructions(self, t: lark.Tree) -> str | Bound | None:
        if t.data == "const_instructions":
            return self.string(t.children[0])
        if t.data == "bound_instructions":
            return self.bound(t.children[0])
        return None

    def ask_type(self, t: lark.Tree, block: lark.Tree | None, n_types: int) -> AskType:
        name_tok, *brackets = t.children
        kind = str(name_tok)
        loc = self.loc(t)
        if kind not in ASK_KINDS:
            hint = _did_you_mean(_KIND_ALIASES.get(kind.lower(), kind), ASK_KINDS)
            self.error(self.loc(name_tok), f"unknown ask type `{kind}`",
                       hint or "the ask types are noul (yes/no), choice[N..M] and score[N..M]")
            kind = "noul"
        if brackets:
            return AskType(kind, self.count(brackets[0], "an option count"), loc)  # type: ignore[arg-type]
        if kind == "noul":
            return AskType("noul", Range(2, 2, loc), loc)
        if block is not None and n_types == 1:
            n = len(block.children)
            return AskType(kind, Range(n, n, loc), loc)  # type: ignore[arg-type]
        what = "options" if kind == "choice" else "levels"
        example = 'choice "Which tool?" { search, calc }' if kind == "choice" else 'score { "low", "high" }'
        self.error(loc, f"`{kind}` needs a count of its {what} or the {what} themselves",
                   f"write {kind}[2..8] to take the {what} from each instance, or list them: {example}")
        return AskType(kind, Range(2, 2, loc), loc)  # type: ignore[arg-type]

    def block(self, t: lark.Tree, types: tuple[AskType, ...]) -> Criteria:
        loc = self.loc(t)
        entries = [self.entry(e) for e in t.children]
        if len(types) != 1:
            self.error(loc, "constant criteria need an ask of a single type",
                       "bind them per instance with bound[..N], or split the ask into one ask per type")
            return ChoiceOptions((), loc)
        kind = types[0].kind
        if kind == "noul":
            described: dict[str, str] = {}
            for key, desc, eloc in entries:
                if key not in ("yes", "no"):
                    self.error(eloc, f"a noul's criteria describe `yes` and `no`, not `{key}`",
                               'write { yes: "what yes means", no: "what no means" }')
                elif key in described:
                    self.error(eloc, f"`{key}` is described twice", "keep one description")
                elif desc is None:
                    self.error(eloc, f"`{key}` needs a description", f'write {key}: "what {key} means"')
                else:
                    described[key] = desc
            return NoulCriteria(described.get("yes"), described.get("no"), loc)
        if kind == "score":
            levels = []
            for key, desc, eloc in entries:
                if desc is not None:
                    self.error(eloc, "a score level is one string",
                               'list the levels low to high: { "low", "high" }')
                levels.append(key)
            return ScoreLevels(tuple(levels), loc)
        return ChoiceOptions(tuple((key, desc) for key, desc, _ in entries), loc)

    def entry(self, t: lark.Tree) -> tuple[str, str | None, Loc]:
        key, *desc = t.children
        name = self.string(key) if key.type == "STRING" else str(key)
        return name, (self.string(desc[0]) if desc else None), self.loc(t)

    # ---- brackets ---------------------------------------------------------------------------------------

    def count(self, t: lark.Tree, what: str) -> Range:
        loc = self.loc(t)
        nums = [int(x) for x in t.children if x.type == "INT"]
        if t.data == "upto":
            self.error(loc, f"{what} needs its lower end",
                       f"write [1..{nums[0]}] (or [{nums[0]}] for exactly)")
            return Range(1, nums[0], loc)
        if t.data == "exact":
            return Range(nums[0], nums[0], loc)
        return Range(nums[0], nums[1], loc)

    def bound(self, t: lark.Tree) -> Bound:
        loc = self.loc(t)
        nums = [int(x) for x in t.children if x.type == "INT"]
        if t.data == "exact":
            self.error(loc, "a token bound is written [..MAX] or [MIN..MAX]",
                       f"write [..{nums[0]}] for at most {nums[0]} tokens")
            return Bound(nums[0], 0, loc)
        if t.data == "upto":
            return Bound(nums[0], 0, loc)
        return Bound(nums[1], nums[0], loc)


def _did_you_mean(word: str, choices: tuple[str, ...] | list[str]) -> str | None:
    if word in choices:
        return f"did you mean `{word}`?"
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else None
