"""The tree IR: a parsed .flide spec as frozen, typed values.

Consumed by the verifier, the printer, the passes and the binder; produced by flidec.frontend (from source)
and by flidec.ir.serde (from JSON). Every node carries a `Loc` that is excluded from equality and hashing,
so two nodes that say the same thing are equal wherever they were written (identical prefixes dedup as
dictionary keys) while diagnostics still point at the source. Nodes are changed with dataclasses.replace.

Reading order of a body: `text` nodes continue the current path; `ask` and `fork` nodes branch off the path
at the point where they stand and do not extend it for the nodes after them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

AskKind = Literal["noul", "choice", "score"]


@dataclass(frozen=True, slots=True)
class Loc:
    """A source span: 1-based line and column of the first character, end exclusive."""

    file: str = "<spec>"
    line: int = 0
    col: int = 0
    end_line: int = 0
    end_col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NOLOC = Loc()


def _loc() -> Loc:
    return field(default=NOLOC, compare=False, hash=False, repr=False)


@dataclass(frozen=True, slots=True)
class Range:
    """An inclusive integer range: fan-outs, option counts, repeat counts."""

    lo: int
    hi: int
    loc: Loc = _loc()


@dataclass(frozen=True, slots=True)
class Bound:
    """Text bound per instance, at most `max_tokens` tokens (and at least `min_tokens`)."""

    max_tokens: int
    min_tokens: int = 0
    loc: Loc = _loc()


@dataclass(frozen=True, slots=True)
class NoulCriteria:
    """What yes and what no mean; None leaves that label undescribed."""

    true: str | None = None
    false: str | None = None
    loc: Loc = _loc()


@dataclass(frozen=True, slots=True)
class ChoiceOptions:
    """Ordered options: (name, description or None)."""

    options: tuple[tuple[str, str | None], ...]
    loc: Loc = _loc()


@dataclass(frozen=True, slots=True)
class ScoreLevels:
    """Level descriptions, low to high."""

    levels: tuple[str, ...]
    loc: Loc = _loc()


Criteria = NoulCriteria | ChoiceOptions | ScoreLevels


@dataclass(frozen=True, slots=True)
class AskType:
    """One question type. `options` is the allowed option/level count (noul: always 2..2)."""

    kind: AskKind
    options: Range
    loc: Loc = _loc()


@dataclass(frozen=True, slots=True)
class Ask:
    """A typed question read at its last prompt token.

    `types` holds one type, or several when the instance picks the type (System One questions).
    `repeat` is None for one ask, or the count range of a keyed set of asks bound per instance.
    `instructions` and `criteria` are each constant (a str / a Criteria), absent (None) or Bound.
    """

    name: str
    types: tuple[AskType, ...]
    instructions: str | Bound | None = None
    criteria: Criteria | Bound | None = None
    repeat: Range | None = None
    loc: Loc = _loc()


@dataclass(frozen=True, slots=True)
class Text:
    """Text that continues the path: constant (`value` a str) or bound per instance (`value` a Bound)."""

    name: str | None
    value: str | Bound
    loc: Loc = _loc()


@dataclass(frozen=True, slots=True)
class Fork:
    """Named branches, `fanout` of them per instance; each branch starts with its bound `text` (if any)
    and goes on with `body`."""

    name: str
    fanout: Range
    text: Bound | None
    body: tuple[Node, ...]
    loc: Loc = _loc()


Node = Text | Ask | Fork


def asks_in(body: tuple[Node, ...]) -> list[Ask]:
    """Every ask of a tree's body, forks' bodies included, in the order they are written."""
    out: list[Ask] = []
    for node in body:
        if isinstance(node, Ask):
            out.append(node)
        elif isinstance(node, Fork):
            out += asks_in(node.body)
    return out


@dataclass(frozen=True, slots=True)
class State:
    """The shared root text of a tree. `resumable`: it grows across requests (sessions)."""

    name: str
    bound: Bound
    resumable: bool = False
    loc: Loc = _loc()


@dataclass(frozen=True, slots=True)
class Tree:
    """A named tree. `wire` names a wire contract its instances and answers follow ("systemone");
    `buckets` are optional bucket hints (max stream tokens)."""

    name: str
    state: State
    body: tuple[Node, ...]
    wire: str | None = None
    buckets: tuple[int, ...] = ()
    loc: Loc = _loc()


@dataclass(frozen=True, slots=True)
class Format:
    """How the model family renders prompts and reads answers, e.g. next_token(style="vllm")."""

    name: str
    options: tuple[tuple[str, str | int | bool], ...] = ()
    loc: Loc = _loc()


@dataclass(frozen=True, slots=True)
class Spec:
    model: str
    format: Format
    trees: tuple[Tree, ...]
    loc: Loc = _loc()

    def tree(self, name: str) -> Tree:
        for t in self.trees:
            if t.name == name:
                return t
        raise KeyError(name)
