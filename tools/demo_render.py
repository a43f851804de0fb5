"""Demo examples rendered through flidec's own next_token format, into token arrays for training.

Consumes Examples (demo_data) and a model directory's tokenizer; produces `Encoded`: each example's prompt
ids exactly as flidec binds them (the root piece of the state, then the ask piece of the System One question
against examples/systemone.flide's ask) and the label token ids it reads, plus answers, noisy labels and
kinds. `encode_set` spreads generation and encoding over processes: the set is chunks of CHUNK examples,
chunk i generated from seed `seed * SEED_STRIDE + i`, so a set depends only on (seed, count, verbatim,
kinds); `verbatim=True` encodes the curriculum's easy mix (demo_data.generate's verbatim choices) and
`kinds` restricts the ask types (demo_data.generate's `kinds`; every set still holds `count` requests).
Relies on: flidec (ir, formats, models.tokenizer), numpy.
"""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from demo_data import KINDS, NOISE, Example, generate
from demo_domains import DOMAINS

from flidec.ir.defaults import DEFAULT_CRITERIA, DEFAULT_INSTRUCTIONS
from flidec.ir.instance import render_value
from flidec.ir.tree import Ask, AskType, Range
from flidec.models.tokenizer import ModelTokenizer, load_tokenizer
from flidec.runtime.next_token import REPLY, NextTokenFormat

CHUNK = 2000
SEED_STRIDE = 1_000_003
MAX_LABELS = 26


@dataclass(frozen=True, slots=True)
class Encoded:
    """A set of encoded examples, as numpy arrays (ids of example i: ids[offsets[i]:offsets[i+1]])."""

    ids: np.ndarray  # int32, all prompts concatenated
    offsets: np.ndarray  # int64, count + 1
    label_ids: np.ndarray  # int32 [count, MAX_LABELS], -1 past the ask's labels
    option_ends: np.ndarray  # int32 [count, MAX_LABELS]: a choice's option lines' last tokens; -1 otherwise
    answers: np.ndarray  # int64: the rules' answer index
    labels: np.ndarray  # int64: the noisy observed label index
    kinds: np.ndarray  # int64: index into demo_data.KINDS
    domains: np.ndarray  # int64: index into DOMAINS

    def __len__(self) -> int:
        return len(self.answers)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def prompt(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i]:self.offsets[i + 1]]


@dataclass(frozen=True, slots=True)
class Renderer:
    """flidec's format and System One ask for one tokenizer, plus the tokens that frame option lines."""

    fmt: NextTokenFormat
    ask: Ask
    colon: int  # ":" after an option's label
    reply: int  # first token of the choice reply line


def renderer(tokenizer: ModelTokenizer) -> Renderer:
    (colon,) = tokenizer.encode(":")
    return Renderer(NextTokenFormat(tokenizer), systemone_ask(), colon, tokenizer.encode(REPLY["choice"])[0])


def systemone_ask() -> Ask:
    """The ask every System One question is read through: examples/systemone.flide's, built here so that
    training needs no lark (tests/tools checks it equals the parsed one)."""
    types = (AskType("noul", Range(2, 2)), AskType("choice", Range(2, 255)), AskType("score", Range(2, 10)))
    return Ask("questions", types, DEFAULT_INSTRUCTIONS, DEFAULT_CRITERIA, repeat=Range(1, 64))


def corpus_text(ex: Example) -> str:
    """A close plain-text rendering of one example, for tokenizer training (before labels exist)."""
    q = ex.question
    lines = [f"Question: {render_value(q['instructions'])}"] if q.get("instructions") else []
    criteria = q.get("criteria")
    if q["type"] == "choice":
        lines += [f"A: {name}" + (f" - {render_value(d)}" if d is not None else "")
                  for name, d in criteria.items()]
    elif q["type"] == "score":
        lines += [f"{i}: {render_value(level)}" for i, level in enumerate(criteria)]
    else:
        described = criteria or {}
        lines += [f"{lab}: {described[key]}" if described.get(key) else lab
                  for lab, key in (("yes", "true"), ("no", "false"))]
    return render_value(ex.state) + "\n\n" + "\n".join(lines + [REPLY[q["type"]]])


def option_ends(block: Sequence[int], labels: Sequence[int], r: Renderer) -> list[int]:
    """Index in a choice's question block of each option line's last token (the one holding its newline):
    option lines start `label :`, in order, and the reply line follows the last."""
    starts, at = [], 0
    for label in labels:
        while not (block[at] == label and block[at + 1] == r.colon):
            at += 1  # IndexError: the block is not laid out as the format lays out choices
        starts.append(at)
        at += 2
    while block[at] != r.reply:
        at += 1
    return [s - 1 for s in starts[1:]] + [at - 1]


def encode_examples(r: Renderer, examples: Iterable[Example]) -> Encoded:
    ids: list[np.ndarray] = []
    label_ids, ends, answers, labels, kinds, domains = [], [], [], [], [], []
    domain_names = list(DOMAINS)
    for ex in examples:
        root = r.fmt.root_piece(ex.state)
        piece = r.fmt.ask_piece(r.ask, ex.question, "questions.q")
        ids.append(np.asarray(root + piece.ids, dtype=np.int32))
        pad = [-1] * (MAX_LABELS - len(piece.labels))
        label_ids.append(list(piece.labels) + pad)
        ends.append([len(root) + e for e in option_ends(piece.ids, piece.labels, r)] + pad
                    if ex.kind == "choice" else [-1] * MAX_LABELS)
        answers.append(ex.answer)
        labels.append(ex.label)
        kinds.append(KINDS.index(ex.kind))
        domains.append(domain_names.index(ex.domain))
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in ids], out=offsets[1:])
    return Encoded(np.concatenate(ids) if ids else np.zeros(0, np.int32), offsets,
                   np.asarray(label_ids, dtype=np.int32).reshape(-1, MAX_LABELS),
                   np.asarray(ends, dtype=np.int32).reshape(-1, MAX_LABELS),
                   *(np.asarray(x, dtype=np.int64) for x in (answers, labels, kinds, domains)))


def concat(parts: Sequence[Encoded]) -> Encoded:
    offsets = [np.zeros(1, np.int64)]
    base = 0
    for p in parts:
        offsets.append(p.offsets[1:] + base)
        base += p.offsets[-1]
    return Encoded(np.concatenate([p.ids for p in parts]), np.concatenate(offsets),
                   *(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("label_ids", "option_ends", "answers", "labels", "kinds", "domains")))


def chunk_examples(seed: int, index: int, count: int, noise: float = NOISE, verbatim: bool = False,
                   kinds: tuple[str, ...] = KINDS) -> list[Example]:
    return list(generate(seed * SEED_STRIDE + index, count, noise, verbatim, kinds))


def set_examples(seed: int, count: int, noise: float = NOISE, verbatim: bool = False,
                 kinds: tuple[str, ...] = KINDS) -> list[Example]:
    """The examples of set (seed, count, verbatim, kinds), in order, as encode_set encodes them."""
    out: list[Example] = []
    for i in range(-(-count // CHUNK)):
        out += chunk_examples(seed, i, min(CHUNK, count - i * CHUNK), noise, verbatim, kinds)
    return out


@functools.lru_cache(maxsize=2)
def _renderer(model_dir: str) -> Renderer:
    return renderer(load_tokenizer(model_dir))


def _encode_chunk(job: tuple[str, int, int, int, float, bool, tuple[str, ...]]) -> Encoded:
    model_dir, seed, index, count, noise, verbatim, kinds = job
    return encode_examples(_renderer(model_dir), chunk_examples(seed, index, count, noise, verbatim, kinds))


def encode_set(model_dir: Path, seed: int, count: int, workers: int, noise: float = NOISE,
               verbatim: bool = False, kinds: tuple[str, ...] = KINDS) -> Encoded:
    jobs = [(str(model_dir), seed, i, min(CHUNK, count - i * CHUNK), noise, verbatim, tuple(kinds))
            for i in range(-(-count // CHUNK))]
    if workers <= 1 or len(jobs) == 1:
        return concat([_encode_chunk(j) for j in jobs])
    # fork: workers inherit the imported modules (and flidec's package mapping when it is not installed)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return concat(pool.map(_encode_chunk, jobs))
