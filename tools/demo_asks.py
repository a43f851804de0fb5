"""System One questions with known answers: the pieces every demo domain builds its asks from.

Consumes a seeded `random.Random` and a domain's facts; produces `Posed` (a System One question object in
the shapes of shared/API.md plus the index of the answer its rules give: the option for a choice, the level
for a score, 0 = yes / 1 = no for a noul; a choice also keeps its option pool). Choice options are a random
subset of a pool that holds the answer, in random order; score levels are n words picked evenly from a 10-word
scale; the answer level is the state's cue bin scaled to the level count (`ordinal_level`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAX_CHOICE = 26
SCALE = 10  # every score family's level words: 10 of them, low to high


@dataclass(frozen=True, slots=True)
class Posed:
    question: dict  # {"type": ..., "instructions"?: ..., "criteria"?: ...}
    answer: int
    pool: tuple[str, ...] = ()  # a choice's option pool: demo_data's verbatim variant redraws options from it


def noul(instructions: str | None, yes: bool, criteria: Mapping[str, str] | None = None) -> Posed:
    q: dict = {"type": "noul"}
    if instructions is not None:
        q["instructions"] = instructions
    if criteria is not None:
        q["criteria"] = dict(criteria)
    return Posed(q, 0 if yes else 1)


def choice(rng: random.Random, instructions: str | None, pool: Sequence[str], correct: str,
           descriptions: Mapping[str, str] | None = None, hi: int = MAX_CHOICE) -> Posed:
    """2..min(hi, len(pool)) options, `correct` among them, shuffled; descriptions on a third of the asks.
    The count is log-uniform (as likely 2-3 as 13-26): most real choices are short, long ones still common."""
    top = min(hi, len(pool))
    n = min(top, int(2 * ((top + 1) / 2) ** rng.random()))
    others = rng.sample([p for p in pool if p != correct], n - 1)
    options = [correct, *others]
    rng.shuffle(options)
    described = descriptions is not None and rng.random() < 0.33
    criteria = {o: (descriptions[o] if described else None) for o in options}  # type: ignore[index]
    q: dict = {"type": "choice", "criteria": criteria}
    if instructions is not None:
        q["instructions"] = instructions
    return Posed(q, options.index(correct), tuple(pool))


def ordinal_level(cue_bin: int, bins: int, levels: int) -> int:
    """The level a cue of bin `cue_bin` (of `bins`, low to high) gets on a `levels`-level scale: scaled and
    rounded half up, so the lowest and highest bins always map to the end levels."""
    return (2 * cue_bin * (levels - 1) + (bins - 1)) // (2 * (bins - 1))


def score(rng: random.Random, instructions: str, scale: Sequence[str], cue_bin: int, bins: int) -> Posed:
    """3..10 levels taken evenly from `scale` (10 words, low to high)."""
    assert len(scale) == SCALE
    n = rng.randint(3, SCALE)
    levels = [scale[(2 * i * (SCALE - 1) + (n - 1)) // (2 * (n - 1))] for i in range(n)]
    return Posed({"type": "score", "instructions": instructions, "criteria": levels},
                 ordinal_level(cue_bin, bins, n))


def yes_no_about(rng: random.Random, truth: str, pool: Sequence[str]) -> tuple[str, bool]:
    """A pool item to ask about: the true one half of the time, so yes and no are balanced."""
    if rng.random() < 0.5:
        return truth, True
    return rng.choice([p for p in pool if p != truth]), False
