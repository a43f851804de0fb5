"""The demo model's seeded synthetic decision dataset: System One requests with rule-given answers.

`generate(seed, count, noise)` yields Examples: a state (text, or a JSON object for records) from one of
demo_domains.DOMAINS, one System One question about it, the answer the domain's rules give, and the label
a training set would carry (the answer, or with probability `noise` another option drawn uniformly: label
noise that makes a well-fit model's probabilities calibrated instead of all 0/1). The ask type is drawn
with KIND_WEIGHTS, then one of the domain's asks of that type. The same seed gives the
same examples, in any process. `reshuffle` re-asks a choice with its options in another order.
`generate(..., verbatim=True)` is the training curriculum's easy mix: the same draws, except that each
choice becomes a verbatim choice (`verbatim_choice`): 2-4 options, the answer's text written in the state
and no other option's, so the only skill it needs is binding an option's text to its letter.
`generate(..., kinds=("choice",))` asks only those types (`parse_kinds` reads "all", "choice",
"noul,score", ...): the type is drawn with KIND_WEIGHTS renormalized over `kinds`, every other draw is as
in the normal mix (the same random calls, so `kinds=KINDS` gives exactly the normal mix).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from demo_asks import Posed
from demo_domains import DOMAINS

KINDS = ("noul", "choice", "score")
# Choices get half the examples: binding an option's letter to its name is the slowest skill to learn.
KIND_WEIGHTS = (0.25, 0.5, 0.25)
NOISE = 0.06
VERBATIM_OPTIONS = (2, 4)  # option count range of a verbatim choice
# How a verbatim choice writes its answer into a state that does not name it yet (a line, or a JSON key).
MENTION_LINES = ("Topic: {}", "Tag: {}", "About: {}", "Re: {}", "Note: this is about {}.")
MENTION_KEYS = ("topic", "tag", "label")


@dataclass(frozen=True, slots=True)
class Example:
    domain: str
    state: object  # str, or a dict rendered as JSON
    question: dict  # one System One question object
    answer: int  # the rules' answer: option / level index; noul: 0 yes, 1 no
    label: int  # the observed label: `answer`, or (noise) another index

    @property
    def kind(self) -> str:
        return self.question["type"]

    @property
    def options(self) -> int:
        return 2 if self.kind == "noul" else len(self.question["criteria"])

    def request(self, question_id: str = "q") -> dict:
        """The System One request body that asks this question."""
        return {"state": self.state, "questions": {question_id: self.question}}


def noisy_label(rng: random.Random, answer: int, options: int, noise: float) -> int:
    if rng.random() >= noise:
        return answer
    other = rng.randrange(options - 1)
    return other + (other >= answer)


def state_text(state: object) -> str:
    return state if isinstance(state, str) else json.dumps(state, ensure_ascii=False)


def names_in(text: str, name: str) -> bool:
    """Whether `name` is written in `text` as a whole word (or words), case included."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def mention(rng: random.Random, state: object, name: str) -> object:
    """The state with one more line (text) or key (JSON record) that names `name`, at a random place."""
    if isinstance(state, str):
        lines = state.split("\n")
        lines.insert(rng.randint(0, len(lines)), rng.choice(MENTION_LINES).format(name))
        return "\n".join(lines)
    items = list(state.items())  # type: ignore[attr-defined]
    key = rng.choice([k for k in MENTION_KEYS if k not in state])  # type: ignore[operator]
    items.insert(rng.randint(0, len(items)), (key, name))
    return dict(items)


def verbatim_choice(rng: random.Random, state: object, posed: Posed) -> tuple[object, Posed]:
    """The choice re-asked as a one-hop lookup: its answer written in the state (added by `mention` unless
    already there), 2-4 options whose others come from the pool and appear nowhere in the state (case
    ignored), in random order, without descriptions."""
    correct = list(posed.question["criteria"])[posed.answer]
    if not names_in(state_text(state), correct):
        state = mention(rng, state, correct)
    text = state_text(state).lower()
    others = [o for o in posed.pool if o != correct and o.lower() not in text]
    n = min(rng.randint(*VERBATIM_OPTIONS), 1 + len(others))
    assert n >= 2, (correct, posed.pool)
    options = [correct, *rng.sample(others, n - 1)]
    rng.shuffle(options)
    q: dict = {"type": "choice", "criteria": dict.fromkeys(options)}
    if "instructions" in posed.question:
        q["instructions"] = posed.question["instructions"]
    return state, Posed(q, options.index(correct), posed.pool)


def parse_kinds(text: str) -> tuple[str, ...]:
    """"all" or a comma list of ask types -> those types, in KINDS order."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return KINDS
    unknown = sorted(set(names) - set(KINDS))
    if unknown or not names:
        raise ValueError(f"ask types must be 'all' or a comma list of {', '.join(KINDS)}; got {text!r}")
    return tuple(k for k in KINDS if k in names)


def example(rng: random.Random, noise: float = NOISE, verbatim: bool = False,
            kinds: tuple[str, ...] = KINDS) -> Example:
    domain = rng.choice(list(DOMAINS))
    state, posed = DOMAINS[domain](rng)
    # one random() either way: with every type this is the normal mix's draw, exactly
    (kind,) = rng.choices(kinds, [KIND_WEIGHTS[KINDS.index(k)] for k in kinds])
    pick: Posed = rng.choice([p for p in posed if p.question["type"] == kind])
    if verbatim and kind == "choice":  # after every draw the normal mix makes, so that mix stays as it was
        state, pick = verbatim_choice(rng, state, pick)
    ex = Example(domain, state, pick.question, pick.answer, pick.answer)
    return replace(ex, label=noisy_label(rng, pick.answer, ex.options, noise))


def generate(seed: int, count: int, noise: float = NOISE, verbatim: bool = False,
             kinds: tuple[str, ...] = KINDS) -> Iterator[Example]:
    rng = random.Random(seed)
    for _ in range(count):
        yield example(rng, noise, verbatim, kinds)


def reshuffle(ex: Example, rng: random.Random) -> Example:
    """The same choice with its options in a new random order (a different one whenever n > 1)."""
    names = list(ex.question["criteria"])
    order = list(range(len(names)))
    while order == list(range(len(names))) and len(names) > 1:
        rng.shuffle(order)
    criteria = {names[i]: ex.question["criteria"][names[i]] for i in order}
    return replace(ex, question={**ex.question, "criteria": criteria},
                   answer=order.index(ex.answer), label=order.index(ex.label))
