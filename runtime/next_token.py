"""The next_token format: each ask rendered the way vLLM 0.32 reads a chat model, cut into token pieces.

Consumes a ChatTokenizer (literal encoding, special tokens, the chat template's one-user-turn prefix and
suffix with thinking off) and, per instance, node texts and question objects; produces the token pieces
that become stream segments, each ask's label token ids, and answer objects. An ask's prompt is one user
turn: the path's texts joined by SEP ("\\n\\n"), then SEP and the question block (`_lines`). Every cut
between pieces sits right after a newline that a non-whitespace character follows, or right before a
special token, so the pieces' ids add up to the whole prompt's (`prompt_ids`; docs/DESIGN.md, Prompts).
The one implementation: the runtime binds with it and flidec.formats registers it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from flidec.ir.errors import Diagnostic, InstanceError, ModelError, SpecError
from flidec.ir.instance import render_value
from flidec.ir.tree import (
    Ask,
    AskKind,
    Bound,
    ChoiceOptions,
    NoulCriteria,
    ScoreLevels,
    Tree,
    asks_in,
)
from flidec.runtime import answers_math as answers
from flidec.runtime.binder import Draft
from flidec.runtime.labels import LabelError, Labels, LabelTable
from flidec.runtime.run_ids import RunIds

SEP = "\n\n"
RUN_CHARS = 512  # a longer text is tokenized as runs of about this many characters (text_runs)
REPLY = {
    "choice": "Answer with the letter of one option only.",
    "noul": "Answer with yes or no only.",
    "score": "Answer with the number of one level only.",
}


class ChatLayout(Protocol):
    """A single-user-turn prompt: before_user + user text + after_user + generation_prompt."""

    before_user: str  # Qwen3.5: "<|im_start|>user\n"
    after_user: str  # "<|im_end|>\n"
    generation_prompt: str  # thinking off: "<|im_start|>assistant\n<think>\n\n</think>\n\n"


class ChatTokenizer(Protocol):
    """What the format needs from a tokenizer (flidec.models.tokenizer.ModelTokenizer provides it)."""

    special_tokens: Mapping[str, int]  # special token text -> id
    # a text cut where text_runs cuts encodes to the whole text's ids (a Qwen split: tokenizer.py)
    cuts_exact: bool

    def encode(self, text: str) -> list[int]:
        """Text taken literally (NFC, pre-tokenized, byte-level BPE): special-token spellings stay text."""
        ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` of each text, in one call."""
        ...

    def encode_template(self, text: str) -> list[int]:
        """Template text, in which special-token spellings are the special tokens."""
        ...

    @property
    def chat(self) -> ChatLayout: ...


@dataclass(frozen=True, slots=True)
class AskPiece:
    """One ask as bound: its question block's ids (through the template suffix) and how to read it."""

    ids: tuple[int, ...]
    labels: tuple[int, ...]  # label token ids, in option order
    kind: AskKind
    options: tuple[object, ...]  # choice: option names; score: levels as given (the legend); noul: ()
    label_texts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AskDraft:
    """An AskPiece before tokenizing: its block's draft (through the template suffix) and how to read it."""

    draft: Draft
    labels: tuple[int, ...]
    kind: AskKind
    options: tuple[object, ...]
    label_texts: tuple[str, ...]

    def piece(self, encoded: Mapping[str, tuple[int, ...]]) -> AskPiece:
        return AskPiece(self.draft.ids(encoded), self.labels, self.kind, self.options, self.label_texts)


def strip_text(text: str) -> str:
    """The rendering rule for continuing and branch texts: leading whitespace dropped, so the cut before
    them always follows a newline that non-whitespace follows (a text then empty is left out together with
    its separator: text_draft). The state stays as is: it shares its piece with the template prefix."""
    return text.lstrip()


@dataclass(frozen=True, slots=True)
class _Question:
    kind: AskKind
    instructions: tuple[str | None, bool]  # (rendered text or None, constant)
    options: tuple[tuple[str | None, str | None], ...]  # (name shown after the label or None, description)
    raw_options: tuple[object, ...]
    constant_options: bool


class NextTokenFormat:
    """next_token(style="vllm") for one tokenizer; constant pieces are tokenized once and cached.

    Pieces: the root is the template prefix + the state + SEP; each continuing or branch text + SEP is one;
    each question block, line by line, + the template suffix is one. A piece is first a Draft (ids the spec
    fixes, texts the instance binds): the runtime's walker (runtime/templates.py) tokenizes all of an
    instance's texts in one `encode_texts` batch, while `root_piece`, `text_piece` and `ask_piece` encode
    each text of one piece on its own.
    """

    name = "next_token"

    def __init__(self, tokenizer: ChatTokenizer):
        self._tok = tokenizer
        specials = sorted(tokenizer.special_tokens, key=len, reverse=True)
        self._special_re = re.compile("|".join(re.escape(s) for s in specials) or "$^")
        chat = tokenizer.chat
        suffix = chat.after_user + chat.generation_prompt
        if not specials or not self._special_re.match(suffix):
            raise ModelError("the chat template's text after the user message must start with a special "
                             "token (so that a cut there is always exact)")
        head, self._header_tail = self._split_last_special(chat.before_user)
        self._header_ids = tuple(tokenizer.encode_template(head))
        self._footer_ids = tuple(tokenizer.encode_template(suffix))
        _, gen_tail = self._split_last_special(chat.generation_prompt)
        self.labels = LabelTable(tokenizer.encode, gen_tail)
        self._const: dict[str, tuple[int, ...]] = {}
        self.run_ids = RunIds(tokenizer.encode_batch)

    def _split_last_special(self, text: str) -> tuple[str, str]:
        """(text through its last special token, the plain text after it)."""
        cut = max((m.end() for m in self._special_re.finditer(text)), default=0)
        return text[:cut], text[cut:]

    def _constant(self, text: str) -> tuple[int, ...]:
        ids = self._const.get(text)
        if ids is None:
            ids = self._const[text] = tuple(self._tok.encode(text))
        return ids

    def encode_texts(self, texts: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """The literal ids of each distinct text, from its runs: the runs tokenized before come from
        `run_ids` (a history that grew since the last step is tokenized only where it is new), the rest in
        one batch (which the tokenizer encodes on all cores); the ids are the text's, whole. A tokenizer
        whose cuts are not known to be exact (ChatTokenizer.cuts_exact) takes each text as one run."""
        unique = list(dict.fromkeys(texts))
        runs = [text_runs(text) if self._tok.cuts_exact else [text] for text in unique]
        ids = iter(self.run_ids.ids([r for rs in runs for r in rs]))
        out = {}
        for text, rs in zip(unique, runs, strict=True):
            if len(rs) == 1:
                out[text] = next(ids)
                continue
            whole: list[int] = []
            for _ in rs:
                whole += next(ids)
            out[text] = tuple(whole)
        return out

    def _alone(self, texts: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """The texts of a piece asked for by itself, each encoded on its own (no batch, runs or threads): the
        plain binder's way, which the walker's batches are checked against."""
        return {text: tuple(self._tok.encode(text)) for text in texts}

    # -- pieces ----------------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return len(self._tok.encode(text))

    def root_draft(self, state: object) -> Draft:
        return Draft((self._header_ids, self._header_tail + render_value(state) + SEP))

    def root_piece(self, state: object) -> tuple[int, ...]:
        draft = self.root_draft(state)
        return draft.ids(self._alone(draft.texts()))

    @property
    def root_head(self) -> tuple[int, ...]:
        """The ids every root piece starts with: the chat header through its last special token."""
        return self._header_ids

    def ask_lines(self, ask: Ask) -> tuple[tuple[int, ...] | None, ...]:
        """An ask's block as far as the spec fixes it, for pre-tokenizing: each line ask_piece encodes on
        its own (the last one then the footer), as ids where the spec fixes it, None for a run of lines the
        instance fills in (bound instructions, bound options, or all lines when the type is bound too).
        Every boundary between entries is one ask_piece cuts at for every instance."""
        kind = ask.types[0].kind
        bound_instr = isinstance(ask.instructions, Bound)
        instr = None if bound_instr else ask.instructions
        out: list[tuple[int, ...] | None] = []
        if instr:
            out.append(self._constant(f"Question: {instr}\n"))
        elif bound_instr:
            out.append(None)
        if len(ask.types) > 1 or isinstance(ask.criteria, Bound):
            out.append(None)
        if len(ask.types) == 1:
            if not isinstance(ask.criteria, Bound):
                q = _resolve(ask, None, ask.name)
                lines = self._lines(q, self._labels(q, ask.name).texts)
                out += [self._constant(line + "\n") for line, _ in lines[1 if instr else 0:-1]]
            out.append(self._constant(REPLY[kind]))
        out.append(self._footer_ids)
        merged: list[tuple[int, ...] | None] = []
        for entry in out:  # adjacent instance-filled runs are one run
            if not (entry is None and merged and merged[-1] is None):
                merged.append(entry)
        return tuple(merged)

    def text_draft(self, text: str, constant: bool) -> Draft:
        """A continuing or branch text and its separator; no parts when the text is left out."""
        text = strip_text(text)
        if not text:
            return Draft(())
        return Draft((self._constant(text + SEP),) if constant else (text + SEP,))

    def text_piece(self, text: str, constant: bool) -> tuple[int, ...]:
        draft = self.text_draft(text, constant)
        return draft.ids(self._alone(draft.texts()))

    def ask_draft(self, ask: Ask, question: Mapping[str, object] | None, path: str) -> AskDraft:
        """The question block line by line (each line encoded on its own), then the template suffix."""
        q = _resolve(ask, question, path)
        labels = self._labels(q, path)
        lines = self._lines(q, labels.texts)
        parts: list[tuple[int, ...] | str] = []
        for k, (line, constant) in enumerate(lines):
            text = line if k == len(lines) - 1 else line + "\n"
            parts.append(self._constant(text) if constant else text)
        opts = q.raw_options if q.kind != "noul" else ()
        if q.kind == "choice" and None in opts:  # undescribed options are named by their labels
            opts = labels.texts
        return AskDraft(Draft((*parts, self._footer_ids)), labels.ids, q.kind, opts, labels.texts)

    def ask_piece(self, ask: Ask, question: Mapping[str, object] | None, path: str) -> AskPiece:
        draft = self.ask_draft(ask, question, path)
        return draft.piece(self._alone(draft.draft.texts()))

    def prompt_text(self, state: object, texts: Sequence[str], ask: Ask, question: Mapping | None,
                    path: str) -> str:
        """The user turn's content of one ask's whole prompt."""
        q = _resolve(ask, question, path)
        kept = [t for t in map(strip_text, texts) if t]
        block = "\n".join(line for line, _ in self._lines(q, self._labels(q, path).texts))
        return SEP.join([render_value(state), *kept]) + SEP + block

    def prompt_ids(self, state: object, texts: Sequence[str], ask: Ask, question: Mapping | None,
                   path: str) -> tuple[int, ...]:
        """The whole prompt tokenized in one go: the reference the pieces must add up to."""
        content = self.prompt_text(state, texts, ask, question, path)
        return self._header_ids + tuple(self._tok.encode(self._header_tail + content)) + self._footer_ids

    def answer(self, piece: AskPiece, logits: Sequence[float]) -> dict:
        if piece.kind == "noul":
            return answers.noul_answer(logits)
        if piece.kind == "choice":
            return answers.choice_answer(piece.options, logits)  # type: ignore[arg-type]
        return answers.score_answer(piece.options, logits)

    def check_tree(self, tree: Tree) -> None:
        """Raise SpecError for every ask type whose labels this tokenizer cannot read as single distinct
        tokens, at the most options the spec allows it (a constant ask: its own count)."""
        problems = []
        for ask in asks_in(tree.body):
            for t in ask.types:
                c = ask.criteria
                n = (len(c.options) if isinstance(c, ChoiceOptions) and t.kind == "choice"
                     else len(c.levels) if isinstance(c, ScoreLevels) and t.kind == "score" else t.options.hi)
                try:
                    self._kind_labels(t.kind, n)
                except LabelError as e:
                    problems.append(Diagnostic(ask.loc, f"ask `{ask.name}` ({t.kind}): {e}"))
        if problems:
            raise SpecError(problems)

    # -- question blocks -------------------------------------------------------------------------------
    def _kind_labels(self, kind: AskKind, n: int) -> Labels:
        if kind == "noul":
            return self.labels.noul()
        return self.labels.choice(n) if kind == "choice" else self.labels.score(n)

    def _labels(self, q: _Question, path: str) -> Labels:
        try:
            return self._kind_labels(q.kind, len(q.options))
        except LabelError as e:
            raise InstanceError([f"{path}: {e}"]) from None

    @staticmethod
    def _lines(q: _Question, label_texts: tuple[str, ...]) -> list[tuple[str, bool]]:
        """The question block's lines, each with whether the spec fixes it: `Question: {instructions}` (left
        out when there are none), one line per option (`A: {name} - {desc}`, `yes: {desc}`, `0: {level}`;
        the label alone, or `label: name`, when undescribed) and the reply line. Objects and arrays render
        as JSON with ensure_ascii=False (render_value)."""
        lines: list[tuple[str, bool]] = []
        text, constant = q.instructions
        if text:
            lines.append((f"Question: {text}", constant))
        for label, (name, desc) in zip(label_texts, q.options, strict=True):
            if name is None:  # noul: the label is the name
                line = label if desc is None else f"{label}: {desc}"
            else:
                line = f"{label}: {name}" if desc is None else f"{label}: {name} - {desc}"
            lines.append((line, q.constant_options))
        lines.append((REPLY[q.kind], True))
        return lines


def text_runs(text: str) -> list[str]:
    """`text` as runs of at least RUN_CHARS characters (the last may be shorter), each cut at the first place
    after that where a cut keeps the ids (flidec.models.tokenizer._CUT_SAFE_SPLITS): right after a newline
    that a non-whitespace character follows (where pieces are cut too: module docstring), or right before a
    space between two letters. A text with no such place far enough in stays whole."""
    runs, start = [], 0
    while len(text) - start > RUN_CHARS:
        cut = _cut(text, start + RUN_CHARS)
        if cut < 0:
            break
        runs.append(text[start:cut])
        start = cut
    runs.append(text[start:])
    return runs


_CUT_AT = re.compile(r"\n(?=\S)| ")


def _cut(text: str, least: int) -> int:
    """The first index at or after `least` where a run may start (text_runs), -1 if there is none."""
    for m in _CUT_AT.finditer(text, least - 1):
        at = m.start()
        if text[at] == "\n":
            return at + 1
        if at >= least and text[at - 1].isalpha() and at + 1 < len(text) and text[at + 1].isalpha():
            return at
    return -1


def _resolve(ask: Ask, question: Mapping[str, object] | None, path: str) -> _Question:
    """The type, instructions and options an ask has for this instance (constant or bound)."""
    q = question if question is not None else {}
    if not isinstance(q, Mapping):
        raise InstanceError([f"{path}: a question must be an object"])
    kinds = [t.kind for t in ask.types]
    if "type" in q or len(kinds) > 1:
        kind = q.get("type")
        if kind not in kinds:
            raise InstanceError([f"{path}.type: must be one of {kinds}, got {kind!r}"])
    else:
        kind = kinds[0]
    atype = ask.types[kinds.index(kind)]

    if isinstance(ask.instructions, Bound):
        raw = q.get("instructions")
        instructions = (None if raw in (None, "") else render_value(raw), False)
    else:
        instructions = (ask.instructions or None, True)

    constant = not isinstance(ask.criteria, Bound)
    criteria = ask.criteria if constant else q.get("criteria")
    if criteria is None and kind != "noul" and constant:
        # absent criteria: the type fixes the count (the verifier demands choice[n] / score[n]) and every
        # option is undescribed: its line is its bare label, and the label names it in the answer
        options, raw_opts = _undescribed(kind, atype.options.hi)
    else:
        options, raw_opts = _options(kind, criteria, f"{path}.criteria")
    if kind != "noul" and not atype.options.lo <= len(options) <= atype.options.hi:
        raise InstanceError([f"{path}.criteria: {len(options)} options, allowed "
                             f"{atype.options.lo} to {atype.options.hi}"])
    return _Question(kind, instructions, options, raw_opts, constant)


def _undescribed(kind: AskKind, n: int) -> tuple[tuple[tuple[None, None], ...], tuple[object, ...]]:
    """n options shown as their bare labels; a score's legend names each level by its digit, a choice
    names each option by its label (see AskPiece.options)."""
    return ((None, None),) * n, (tuple(str(i) for i in range(n)) if kind == "score" else (None,) * n)


def _desc(value: object) -> str | None:
    return None if value is None else render_value(value)


def _options(kind: AskKind, criteria: object, path: str) -> tuple[tuple[tuple[str | None, str | None], ...],
                                                                     tuple[object, ...]]:
    """(name, description) per option (name None: the label alone), and the options as given."""
    if kind == "noul":
        if isinstance(criteria, NoulCriteria):
            true, false = criteria.true, criteria.false
        elif criteria is None:
            true = false = None
        elif isinstance(criteria, Mapping) and set(criteria) <= {"true", "false"}:
            true, false = criteria.get("true"), criteria.get("false")
        else:
            raise InstanceError([f"{path}: a noul's criteria is null or an object with keys true/false"])
        return ((None, _desc(true)), (None, _desc(false))), ()
    if kind == "choice":
        if isinstance(criteria, ChoiceOptions):
            pairs = tuple(criteria.options)
        elif isinstance(criteria, Mapping):
            pairs = tuple(criteria.items())
        else:
            raise InstanceError([f"{path}: a choice's criteria is an object: option name -> description"])
        return tuple((name, _desc(d)) for name, d in pairs), tuple(name for name, _ in pairs)
    if isinstance(criteria, ScoreLevels):
        levels: tuple[object, ...] = criteria.levels
    elif isinstance(criteria, list):
        levels = tuple(criteria)
    else:
        raise InstanceError([f"{path}: a score's criteria is a list of levels, low to high"])
    if any(level is None for level in levels):
        raise InstanceError([f"{path}: a score level cannot be null"])
    # the level text follows its digit as the "name"; there is no separate description
    return tuple((render_value(level), None) for level in levels), levels
