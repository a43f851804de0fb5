"""The demo model's seeded synthetic decision dataset: System One requests with rule-given answers.

`generate(seed, count, noise)` yields Examples: a state (text, or a JSON object for records) from one of
demo_domains.DOMAINS, one System One question about it, the answer the domain's rules give, and the label
a training set would carry (the answer, or with probability `noise` another option drawn uniformly: label
noise that makes a well-fit model's probabilities calibrated instead of all 0/1). The ask type is drawn
with KIND_WEIGHTS, then one of the domain's asks of that type. The same seed gives the
same examples, in any process. `reshuffle` re-asks a choice with its options in another order.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, replace

from demo_asks import Posed
from demo_domains import DOMAINS

KINDS = ("noul", "choice", "score")
# Choices get half the examples: binding an option's letter to its name is the slowest skill to learn.
KIND_WEIGHTS = (0.25, 0.5, 0.25)
NOISE = 0.06


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


def example(rng: random.Random, noise: float = NOISE) -> Example:
    domain = rng.choice(list(DOMAINS))
    state, posed = DOMAINS[domain](rng)
    (kind,) = rng.choices(KINDS, KIND_WEIGHTS)
    pick: Posed = rng.choice([p for p in posed if p.question["type"] == kind])
    ex = Example(domain, state, pick.question, pick.answer, pick.answer)
    return replace(ex, label=noisy_label(rng, pick.answer, ex.options, noise))


def generate(seed: int, count: int, noise: float = NOISE) -> Iterator[Example]:
    rng = random.Random(seed)
    for _ in range(count):
        yield example(rng, noise)


def reshuffle(ex: Example, rng: random.Random) -> Example:
    """The same choice with its options in a new random order (a different one whenever n > 1)."""
    names = list(ex.question["criteria"])
    order = list(range(len(names)))
    while order == list(range(len(names))) and len(names) > 1:
        rng.shuffle(order)
    criteria = {names[i]: ex.question["criteria"][names[i]] for i in order}
    return replace(ex, question={**ex.question, "criteria": criteria},
                   answer=order.index(ex.answer), label=order.index(ex.label))
