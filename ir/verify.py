"""The tree IR verifier: every reason a parsed spec cannot be compiled, each with its own Loc and a hint.

Consumes a Spec (from the frontend or from JSON); produces a list of Diagnostics (`verify`), or raises
SpecError holding all of them (`check`). It relies on what the next_token format can read (its label
ranges below) and on the tree limits the passes and codegen are built for (fork depth, stream size). Also
home of the worst-case size estimate (`level_tokens`), which the limit and `flidec inspect` share.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from flidec.ir.errors import Diagnostic, SpecError
from flidec.ir.tree import (
    Ask,
    AskType,
    Bound,
    ChoiceOptions,
    Fork,
    Loc,
    Node,
    NoulCriteria,
    Range,
    ScoreLevels,
    Spec,
    Text,
    Tree,
)

MODELS = ("qwen3_5",)
FORMAT_STYLES = {"next_token": ("vllm",), "decision": ()}  # decision: the checkpoint's own (docs/FORMATS.md)
# The labels next_token reads: yes/no; letters A..Z then two-letter labels up to 255; digits and letters.
LABELS = {"noul": (2, 2), "choice": (2, 255), "score": (2, 10)}
WIRES = ("systemone",)
MAX_FORK_DEPTH = 16
MAX_TREE_TOKENS = 2**20
# The format's framing around an ask ("Question: ", the answer line, the chat turn's markers) and around
# each option ("A: ", " - ", the line break), counted generously; the size limit only needs an upper bound.
ASK_FRAME_TOKENS = 32
OPTION_FRAME_TOKENS = 4
_NAME = re.compile(r"[^\W\d]\w*")


def verify(spec: Spec) -> list[Diagnostic]:
    """Every problem in `spec`, in no particular order (SpecError sorts them by location)."""
    out: list[Diagnostic] = []
    out += _check_model_and_format(spec)
    if not spec.trees:
        out.append(Diagnostic(spec.loc, "the spec declares no tree",
                              'add one: tree NAME { state history: text[..4096]  ask done: noul "Done?" }'))
    seen: dict[str, Tree] = {}
    for tree in spec.trees:
        if tree.name in seen:
            out.append(Diagnostic(tree.loc, f"tree `{tree.name}` is declared twice", "rename one of them",
                                  ((seen[tree.name].loc, "first declared here"),)))
        seen.setdefault(tree.name, tree)
        out += _check_tree(tree)
    return out


def check(spec: Spec, source: str | None = None) -> Spec:
    """Return `spec` unchanged when it verifies; else raise SpecError with every diagnostic."""
    diagnostics = verify(spec)
    if diagnostics:
        raise SpecError(diagnostics, source)
    return spec


# ---- size -----------------------------------------------------------------------------------------------


def text_tokens(value: str | Bound | None) -> int:
    """Upper bound on a text's tokens: a Bound's maximum, or a constant's UTF-8 byte count (byte-level BPE
    never makes more tokens than bytes)."""
    if value is None:
        return 0
    if isinstance(value, Bound):
        return value.max_tokens
    return len(value.encode("utf-8"))


def ask_tokens(ask: Ask) -> int:
    """Upper bound on the tokens of one ask's segment (all its repeats), framing included."""
    options = max((t.options.hi for t in ask.types), default=0)
    crit = ask.criteria
    if isinstance(crit, ChoiceOptions):
        body = sum(text_tokens(n) + text_tokens(d) for n, d in crit.options)
    elif isinstance(crit, ScoreLevels):
        body = sum(text_tokens(x) for x in crit.levels)
    elif isinstance(crit, NoulCriteria):
        body = text_tokens(crit.true) + text_tokens(crit.false)
    else:
        body = text_tokens(crit)
    one = ASK_FRAME_TOKENS + text_tokens(ask.instructions) + body + OPTION_FRAME_TOKENS * options
    return one * (ask.repeat.hi if ask.repeat else 1)


def level_tokens(tree: Tree) -> list[int]:
    """Worst-case stream tokens per fork level (level 0: the state and the tree's own nodes)."""
    levels: list[int] = []

    def add(level: int, n: int) -> None:
        while len(levels) <= level:
            levels.append(0)
        levels[level] += n

    def walk(body: tuple[Node, ...], level: int, copies: int) -> None:
        for node in body:
            if isinstance(node, Text):
                add(level, copies * text_tokens(node.value))
            elif isinstance(node, Ask):
                add(level, copies * ask_tokens(node))
            else:
                branches = copies * max(node.fanout.hi, 0)
                add(level + 1, branches * text_tokens(node.text))
                walk(node.body, level + 1, branches)

    add(0, tree.state.bound.max_tokens)
    walk(tree.body, 0, 1)
    return levels


# ---- spec header ----------------------------------------------------------------------------------------


def _check_model_and_format(spec: Spec) -> Iterator[Diagnostic]:
    if spec.model not in MODELS:
        yield Diagnostic(spec.loc, f"unknown model family `{spec.model}`",
                         "the known model families: " + ", ".join(MODELS))
    fmt = spec.format
    if fmt.name not in FORMAT_STYLES:
        yield Diagnostic(fmt.loc, f"unknown format `{fmt.name}`",
                         'the known formats: next_token(style="vllm") and decision')
        return
    if fmt.name == "decision":
        if fmt.options:
            yield Diagnostic(fmt.loc, "format decision takes no options",
                             "the checkpoint's decision_config.json (or flidec compile --format FILE) says "
                             "how it is read: write `format decision`")
        return
    styles = FORMAT_STYLES[fmt.name]
    options = dict(fmt.options)
    for key in options:
        if key != "style":
            yield Diagnostic(fmt.loc, f"format {fmt.name} has no option `{key}`",
                             f'its one option is style: {fmt.name}(style="{styles[0]}")')
    if "style" not in options:
        yield Diagnostic(fmt.loc, f"format {fmt.name} needs its style",
                         f'write {fmt.name}(style="{styles[0]}")')
    elif options["style"] not in styles:
        yield Diagnostic(fmt.loc, f"unknown {fmt.name} style {_quote(options['style'])}",
                         "the known styles: " + ", ".join(_quote(s) for s in styles))


# ---- trees ----------------------------------------------------------------------------------------------


def _check_tree(tree: Tree) -> Iterator[Diagnostic]:
    yield from _check_name(tree.name, tree.loc)
    yield from _check_name(tree.state.name, tree.state.loc)
    yield from _check_bound(tree.state.bound)
    for i, b in enumerate(tree.buckets):
        if b < 1:
            yield Diagnostic(tree.loc, f"bucket {b} is not a positive token count", "drop it")
        elif i and b <= tree.buckets[i - 1]:
            yield Diagnostic(tree.loc, f"buckets must increase: {b} follows {tree.buckets[i - 1]}",
                             "list each bucket once, smallest first")
    yield from _check_scope(f"tree `{tree.name}`", [(tree.state.name, tree.state.loc)], tree.body)
    yield from _check_body(tree.body, depth=0)
    if not _has_ask(tree.body):
        yield Diagnostic(tree.loc, f"tree `{tree.name}` asks nothing",
                         'add an ask, e.g. ask done: noul "Is the task finished?"')
    total = sum(level_tokens(tree))
    if total > MAX_TREE_TOKENS:
        yield Diagnostic(tree.loc, f"tree `{tree.name}` can reach {total} tokens in one stream; "
                         f"the limit is {MAX_TREE_TOKENS} (2**20)",
                         "lower the largest token bounds or fan-outs; "
                         "`flidec inspect` shows the count per level")
    if tree.wire is not None:
        yield from _check_wire(tree)


def _check_wire(tree: Tree) -> Iterator[Diagnostic]:
    if tree.wire not in WIRES:
        yield Diagnostic(tree.loc, f"unknown wire {_quote(tree.wire)}", "the known wire: systemone")
        return
    shape = 'state state: text[..N]  ask questions[1..N]: noul | choice[2..255] | score[2..10]'
    problems = []
    if tree.state.name != "state":
        problems.append(f"its state is named `state`, not `{tree.state.name}`")
    if len(tree.body) != 1 or not isinstance(tree.body[0], Ask):
        problems.append("its body is one ask")
    else:
        ask = tree.body[0]
        if ask.name != "questions":
            problems.append(f"its ask is named `questions`, not `{ask.name}`")
        if ask.repeat is None:
            problems.append("its ask is a keyed set: questions[1..N]")
        if not isinstance(ask.instructions, Bound) or not isinstance(ask.criteria, Bound):
            problems.append("its ask's instructions and criteria come from the instance")
    for p in problems:
        yield Diagnostic(tree.loc, f'a wire="systemone" tree is shaped like a System One request: {p}',
                         f"write it as: {shape}")


def _check_scope(scope: str, names: list[tuple[str, Loc]], body: tuple[Node, ...]) -> Iterator[Diagnostic]:
    """Names are the instance's JSON keys: unique among the state (or `text`) and the body's nodes."""
    first: dict[str, Loc] = {}
    for name, loc in names:
        first.setdefault(name, loc)
    for node in body:
        if node.name is None:
            continue
        if node.name in first:
            if node.name == "text" and scope.startswith("fork"):
                yield Diagnostic(node.loc,
                                 f"`text` is reserved in {scope}: it names each branch's leading text",
                                 "rename the node")
            else:
                yield Diagnostic(node.loc, f"`{node.name}` is declared twice in {scope}",
                                 "rename one of them: names are the instance's JSON keys",
                                 ((first[node.name], "first declared here"),))
        first.setdefault(node.name, node.loc)


def _check_body(body: tuple[Node, ...], depth: int) -> Iterator[Diagnostic]:
    for node in body:
        if node.name is not None:
            yield from _check_name(node.name, node.loc)
        if isinstance(node, Text):
            yield from _check_text(node)
        elif isinstance(node, Ask):
            yield from _check_ask(node)
        else:
            yield from _check_fork(node, depth + 1)


def _check_text(node: Text) -> Iterator[Diagnostic]:
    if isinstance(node.value, Bound):
        yield from _check_bound(node.value)
        if node.name is None:
            yield Diagnostic(node.loc,
                             "a bound text needs a name: the instance gives its text under that name",
                             "write text NAME[..N]")


def _check_fork(fork: Fork, depth: int) -> Iterator[Diagnostic]:
    yield from _check_range(fork.fanout, "a fork's fan-out", 1)
    if fork.text is not None:
        yield from _check_bound(fork.text)
    if depth > MAX_FORK_DEPTH:
        yield Diagnostic(fork.loc,
                         f"fork `{fork.name}` is {depth} levels deep; the limit is {MAX_FORK_DEPTH}",
                         "flatten the tree: fewer nested forks")
        return
    if not _has_ask(fork.body):
        yield Diagnostic(fork.loc, f"fork `{fork.name}` asks nothing: there is no ask anywhere in its body",
                         "add an ask to its body, or remove the fork: "
                         "a branch with no question is never read")
    yield from _check_scope(f"fork `{fork.name}`", [("text", fork.loc)], fork.body)
    yield from _check_body(fork.body, depth)


def _check_ask(ask: Ask) -> Iterator[Diagnostic]:
    if ask.repeat is not None:
        yield from _check_range(ask.repeat, "a repeat count", 1)
    if not ask.types:
        yield Diagnostic(ask.loc, f"ask `{ask.name}` has no type",
                         "give it one: noul, choice[2..8] or score[5]")
    kinds: set[str] = set()
    for t in ask.types:
        if t.kind in kinds:
            yield Diagnostic(t.loc, f"type `{t.kind}` is listed twice", "list each type once")
        kinds.add(t.kind)
        yield from _check_type(t)
    for part in (ask.instructions, ask.criteria):
        if isinstance(part, Bound):
            yield from _check_bound(part)
    crit = ask.criteria
    if isinstance(crit, (NoulCriteria, ChoiceOptions, ScoreLevels)):
        if len(ask.types) > 1:
            yield Diagnostic(crit.loc, "constant criteria need an ask of a single type",
                             "bind them per instance with bound[..N], or split the ask into one ask per type")
        elif ask.types:
            yield from _check_criteria(ask.types[0], crit)
    elif crit is None:
        for t in ask.types:
            if t.kind != "noul" and t.options.lo != t.options.hi:
                what = "options" if t.kind == "choice" else "levels"
                yield Diagnostic(t.loc, f"{_type_text(t)} has no {what} to count: its criteria are neither "
                                 "listed nor bound, so its count must be exact",
                                 f"list the {what} in {{ }}, "
                                 "bind them with bound[..N] after the instructions, "
                                 f"or fix the count: {t.kind}[{t.options.hi}]")


def _check_type(t: AskType) -> Iterator[Diagnostic]:
    lo, hi = LABELS[t.kind]
    r = t.options
    if r.lo > r.hi:
        yield from _check_range(r, "an option count", lo)
    elif t.kind == "noul" and (r.lo, r.hi) != (2, 2):
        yield Diagnostic(r.loc, "a noul has exactly 2 options, yes and no", "write noul with no count")
    elif r.lo < lo or r.hi > hi:
        what = "options" if t.kind == "choice" else "levels"
        yield Diagnostic(r.loc, f"a {t.kind} has {lo} to {hi} {what} under format next_token, got "
                         f"{_range_text(r)}", f"keep the count within [{lo}..{hi}]")


def _check_criteria(t: AskType, crit: NoulCriteria | ChoiceOptions | ScoreLevels) -> Iterator[Diagnostic]:
    forms = {"noul": (NoulCriteria, "{ yes: ..., no: ... }"), "choice": (ChoiceOptions, "a list of options"),
             "score": (ScoreLevels, "a list of levels")}
    cls, form = forms[t.kind]
    if not isinstance(crit, cls):
        yield Diagnostic(crit.loc, f"a {t.kind} ask's constant criteria are {form}",
                         "match the criteria to the type")
        return
    if isinstance(crit, ChoiceOptions):
        n, what = len(crit.options), "options"
        seen: set[str] = set()
        for name, _ in crit.options:
            if not name:
                yield Diagnostic(crit.loc, "an option name is empty", "give the option a name")
            elif name in seen:
                yield Diagnostic(crit.loc, f"option {_quote(name)} is listed twice", "list each option once")
            seen.add(name)
    elif isinstance(crit, ScoreLevels):
        n, what = len(crit.levels), "levels"
    else:
        return
    r = t.options
    if r.lo <= r.hi and not r.lo <= n <= r.hi:
        yield Diagnostic(crit.loc, f"{_type_text(t)} lists {n} {what}",
                         f"list {_range_words(r)} {what}, or change the count to [{n}]")


# ---- small checks ---------------------------------------------------------------------------------------


def _check_name(name: str, loc: Loc) -> Iterator[Diagnostic]:
    if not _NAME.fullmatch(name):
        yield Diagnostic(loc, f"{_quote(name)} is not a name",
                         "a name is letters, digits and _, starting with a letter or _")


def _check_bound(b: Bound) -> Iterator[Diagnostic]:
    if b.max_tokens < 1:
        yield Diagnostic(b.loc, f"a token bound is at least 1 token, got {_bound_text(b)}",
                         "write [..N] with N >= 1")
    if b.min_tokens < 0:
        yield Diagnostic(b.loc, f"a token bound's minimum is negative: {_bound_text(b)}", "write [..N]")
    elif b.min_tokens > b.max_tokens:
        yield Diagnostic(b.loc, f"the token bound {_bound_text(b)} is empty: {b.min_tokens} > {b.max_tokens}",
                         f"write [{b.max_tokens}..{b.min_tokens}]")


def _check_range(r: Range, what: str, least: int) -> Iterator[Diagnostic]:
    if r.lo > r.hi:
        yield Diagnostic(r.loc, f"the range {_range_text(r)} is empty: {r.lo} > {r.hi}",
                         f"write [{r.hi}..{r.lo}]")
    elif r.lo < least:
        yield Diagnostic(r.loc, f"{what} is at least {least}, got {_range_text(r)}",
                         f"write [{least}..{max(r.hi, least)}]")


def _has_ask(body: tuple[Node, ...]) -> bool:
    return any(isinstance(n, Ask) or isinstance(n, Fork) and _has_ask(n.body) for n in body)


def _range_text(r: Range) -> str:
    return f"[{r.lo}]" if r.lo == r.hi else f"[{r.lo}..{r.hi}]"


def _range_words(r: Range) -> str:
    return f"exactly {r.lo}" if r.lo == r.hi else f"{r.lo} to {r.hi}"


def _bound_text(b: Bound) -> str:
    return f"[..{b.max_tokens}]" if b.min_tokens == 0 else f"[{b.min_tokens}..{b.max_tokens}]"


def _type_text(t: AskType) -> str:
    return t.kind + _range_text(t.options)


def _quote(value: object) -> str:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)
