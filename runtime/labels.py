"""Answer labels of the next_token format: which strings label the options, and their token ids.

Consumes a literal text encoder (`encode`) and the generation prompt's plain tail (the text after its
last special token); produces, per ask kind and option count, the label strings shown in the prompt and
the token id each is read at, decided once here (LabelTable's noul, score and choice). A label's token is
the one token that `tail + label`, encoded, adds to `tail` encoded; anything else (two tokens, a changed
prefix) makes the label unusable.
"""

from __future__ import annotations

import itertools
import string
from collections.abc import Callable
from dataclasses import dataclass

MAX_CHOICE = 255
MAX_SCORE = 10
NOUL_LABELS = ("yes", "no")


class LabelError(ValueError):
    """The tokenizer cannot read this ask's labels as single distinct tokens."""


@dataclass(frozen=True, slots=True)
class Labels:
    texts: tuple[str, ...]
    ids: tuple[int, ...]


class LabelTable:
    """Label strings and ids for one tokenizer; computed lazily, once per label."""

    def __init__(self, encode: Callable[[str], list[int]], tail: str):
        self._encode = encode
        self._tail = tail
        self._tail_ids = tuple(encode(tail))
        self._ids: dict[str, int | None] = {}
        self._choice: Labels | None = None
        self._sets: dict[tuple[str, ...], Labels] = {}  # label texts -> their checked Labels (immutable)

    def token(self, label: str) -> int | None:
        """The one token `label` adds after the generation prompt, or None when it is not one token."""
        if label not in self._ids:
            ids = tuple(self._encode(self._tail + label))
            n = len(self._tail_ids)
            single = len(ids) == n + 1 and ids[:n] == self._tail_ids
            self._ids[label] = ids[n] if single else None
        return self._ids[label]

    def _distinct(self, texts: tuple[str, ...]) -> Labels:
        labels = self._sets.get(texts)  # every ask of every instance asks again: made once per label set
        if labels is None:
            labels = self._sets[texts] = self._checked(texts)
        return labels

    def _checked(self, texts: tuple[str, ...]) -> Labels:
        ids = tuple(self.token(t) for t in texts)
        bad = [t for t, i in zip(texts, ids, strict=True) if i is None]
        if bad:
            raise LabelError(f"labels {bad} are not single tokens for this tokenizer")
        if len(set(ids)) != len(ids):
            raise LabelError(f"labels {list(texts)} do not map to distinct tokens")
        return Labels(texts, ids)  # type: ignore[arg-type]

    def noul(self) -> Labels:
        """`yes`, `no`, in that order: index 0 is yes."""
        return self._distinct(NOUL_LABELS)

    def score(self, n: int) -> Labels:
        """The digits `0`..`9`, one per level, low to high (System One allows at most MAX_SCORE levels)."""
        if not 2 <= n <= MAX_SCORE:
            raise LabelError(f"a score has 2 to {MAX_SCORE} levels, got {n}")
        return self._distinct(tuple(string.digits[:n]))

    def choice(self, n: int) -> Labels:
        """Options 1..26 get `A`..`Z`; options 27..n get the two-letter labels `AA`, `AB`, ..., `AZ`, `BA`,
        ..., `ZZ` in that order, skipping every one that is not a single token or whose token another label
        already has, until n labels exist (Qwen3.5 has more usable ones than MAX_CHOICE needs)."""
        if not 1 <= n <= MAX_CHOICE:
            raise LabelError(f"a choice has 1 to {MAX_CHOICE} options, got {n}")
        if n <= 26:
            return self._distinct(tuple(string.ascii_uppercase[:n]))
        full = self._full_choice()
        if n > len(full.texts):
            raise LabelError(f"this tokenizer has single-token labels for {len(full.texts)} options, not {n}")
        return Labels(full.texts[:n], full.ids[:n])

    def _full_choice(self) -> Labels:
        if self._choice is None:
            base = self._distinct(tuple(string.ascii_uppercase))
            texts, ids, seen = list(base.texts), list(base.ids), set(base.ids)
            for a, b in itertools.product(string.ascii_uppercase, repeat=2):
                if len(texts) == MAX_CHOICE:
                    break
                tok = self.token(a + b)
                if tok is not None and tok not in seen:
                    texts.append(a + b)
                    ids.append(tok)
                    seen.add(tok)
            self._choice = Labels(tuple(texts), tuple(ids))
        return self._choice
