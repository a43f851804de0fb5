"""The benchmark's workloads: seeded instances of the example specs, cut from real English prose.

Consumes the prose paragraphs of benchmarks/prose.py and a token counter (the model format's literal
encoder: `NextTokenFormat.count_tokens`); produces a Workload: the spec and tree it runs through and its
instances as JSON objects (System One request bodies for examples/systemone.flide). The same seed, scale,
counter and corpus give the same instances. Shapes (issue 5), with `scale` shrinking instance counts and
token lengths but never the number of questions, options or branches:
- quality: 24 states of ~5,000 tokens, 9 four-option choices each (QuALITY-like);
- race: 96 states of ~450 tokens, 4 four-option choices each (RACE-like);
- mixed: 96 states of 0-3,000 tokens (a quarter JSON objects), 1-12 questions of all three types, choices
  of 2-151 options (the first choice of the workload has 151);
- planner: 8 instances of examples/planner.flide: a ~3,000-token history, a next-tool choice, 16 actions
  of ~60 tokens (3 asks each) with 2 imagined outcomes of ~40 tokens (1 ask each);
- lookahead: 8 instances of examples/lookahead.flide: a ~950-token context (the spec bounds it at 1,024,
  so not the issue's ~2,000), a start question, then 6 levels of fan-out 2 with one question per node;
- independent: 256 single-question System One requests with states of 40-400 tokens;
- demo: 96 single-question requests of examples/demo.flide drawn by tools/demo_data.py (seed 5000 + seed,
  a set no training or held-out run uses): tickets, logs, reviews, agent steps and order records, the only
  states the embedded demo model knows, so its answers are confident and the exactness columns mean
  something there (issue 7). Not cut from prose; `scale` shrinks the count only.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.prose import paragraphs, sentences

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CountTokens = Callable[[str], int]


@dataclass(frozen=True)
class Workload:
    name: str
    spec: Path  # the .flide file
    tree: str  # the tree its instances are for
    instances: tuple[dict, ...]


class _Prose:
    """Seeded draws of prose: states of about n tokens, sentences, words."""

    def __init__(self, count: CountTokens, rng: random.Random):
        self.count, self.rng = count, rng
        self.paras = paragraphs()
        self.para_tokens = [count(p) for p in self.paras]
        self.words = sorted({w.strip('.,;:()"*').lower() for p in self.paras for w in p.split()} - {""})
        self.words = [w for w in self.words if w.isalpha() and 4 <= len(w) <= 12]

    def state(self, tokens: int) -> str:
        """Consecutive paragraphs from a random one on (wrapping), the last one cut, ~`tokens` long."""
        if tokens <= 0:
            return ""
        i, parts, used = self.rng.randrange(len(self.paras)), [], 0
        while used < tokens:
            para, n = self.paras[i % len(self.paras)], self.para_tokens[i % len(self.paras)]
            if used + n > tokens:  # the last paragraph: whole sentences, then words, up to the target
                kept: list[str] = []
                for s in sentences(para):
                    kept.append(s)
                    if used + self.count(" ".join(kept)) >= tokens:
                        break
                words = " ".join(kept).split()
                while len(words) > 1 and used + self.count(" ".join(words)) > tokens:
                    words.pop()
                para = " ".join(words)
            parts.append(para)
            used += self.count(para) + 1  # "\n\n" between paragraphs is one token
            i += 1
        return "\n\n".join(parts)

    def sentence(self, max_words: int = 24) -> str:
        para = self.paras[self.rng.randrange(len(self.paras))]
        words = self.rng.choice(sentences(para)).split()
        return " ".join(words[:max_words])

    def text(self, tokens: int, bound: int) -> str:
        """Sentences joined until ~`tokens` long, cut by words to stay within `bound` tokens."""
        parts: list[str] = []
        while not parts or self.count(" ".join(parts)) < tokens:
            parts.append(self.sentence(40))
        words = " ".join(parts).split()
        while self.count(" ".join(words)) > min(bound, max(tokens, 1) + 8) and len(words) > 1:
            words.pop()
        return " ".join(words)

    def term(self) -> str:
        return self.rng.choice(self.words)

    def distinct_words(self, n: int) -> list[str]:
        return self.rng.sample(self.words, n)


_CHOICE_PROMPTS = (
    "Which of the following statements is supported by the passage?",
    "According to the text, which statement is accurate?",
    "Which sentence best reflects a point the passage makes?",
    "Which of these claims appears in the passage?",
    "What does the passage say about {term}?",
    "Which option would the author most likely agree with regarding {term}?",
)
_NOUL_PROMPTS = (
    "Does the text discuss {term}?",
    "Is the passage mainly about {term}?",
    "Does the author give an example involving {term}?",
    "Would a beginner understand this text without help?",
)
_SCORE_PROMPTS = (
    "How technical is the text?",
    "How relevant is the text to {term}?",
    "How confident is the author's tone?",
    "How much prior knowledge does the text assume?",
)
_GRADES = (
    "none",
    "minimal",
    "slight",
    "modest",
    "moderate",
    "notable",
    "considerable",
    "strong",
    "very strong",
    "complete",
)


def _reading_choice(p: _Prose, state: str) -> dict:
    """A reading-comprehension choice: one sentence of the state and three from elsewhere, shuffled."""
    own = [s for para in state.split("\n\n") for s in sentences(para)]
    options = {" ".join(p.rng.choice(own).split()[:24]) if own else p.sentence()}
    while len(options) < 4:
        options.add(p.sentence())
    names = sorted(options)
    p.rng.shuffle(names)
    return {
        "type": "choice",
        "instructions": p.rng.choice(_CHOICE_PROMPTS).format(term=p.term()),
        "criteria": {name: None for name in names},
    }


def _noul(p: _Prose) -> dict:
    q: dict = {"type": "noul", "instructions": p.rng.choice(_NOUL_PROMPTS).format(term=p.term())}
    form = p.rng.randrange(4)
    if form == 1:
        q["criteria"] = {"true": "the text states it explicitly"}
    elif form == 2:
        q["criteria"] = {"true": "the text states it explicitly", "false": "the text never mentions it"}
    elif form == 3:
        q["criteria"] = None
    return q


def _choice(p: _Prose, n: int) -> dict:
    if n <= 8 and p.rng.random() < 0.5:
        names = p.distinct_words(n)
        criteria = {w: p.sentence(12) for w in names}  # described options
    else:
        criteria = {w: None for w in p.distinct_words(n)}
    return {
        "type": "choice",
        "instructions": p.rng.choice(_CHOICE_PROMPTS).format(term=p.term()),
        "criteria": criteria,
    }


def _score(p: _Prose) -> dict:
    n = p.rng.randint(2, 10)
    picks = sorted(p.rng.sample(range(len(_GRADES)), n))
    return {
        "type": "score",
        "instructions": p.rng.choice(_SCORE_PROMPTS).format(term=p.term()),
        "criteria": [_GRADES[i] for i in picks],
    }


def _scaled(n: int, scale: float, least: int = 1) -> int:
    return max(least, round(n * scale))


def reading(
    name: str, count: CountTokens, seed: int, scale: float, states: int, tokens: int, questions: int
) -> Workload:
    p = _Prose(count, random.Random(f"{name}:{seed}"))
    instances = []
    for _ in range(_scaled(states, scale)):
        state = p.state(_scaled(tokens, scale, 8))
        qs = {f"q{j + 1}": _reading_choice(p, state) for j in range(questions)}
        instances.append({"state": state, "questions": qs})
    return Workload(name, EXAMPLES / "systemone.flide", "systemone", tuple(instances))


def mixed(count: CountTokens, seed: int, scale: float) -> Workload:
    p = _Prose(count, random.Random(f"mixed:{seed}"))
    weights = (18, 16, 14, 12, 10, 8, 6, 5, 4, 3, 2, 2)  # 1-12 questions, mean ~4.3
    instances, widest_done = [], False
    for i in range(_scaled(96, scale)):
        tokens = 0 if i % 20 == 7 else p.rng.randint(1, _scaled(3000, scale, 1))
        if p.rng.random() < 0.25:  # a JSON object: the body carries most of the tokens
            body = p.state(max(tokens - 60, 0))
            state: str | dict = {
                "id": 1000 + i,
                "title": p.sentence(10),
                "tags": p.distinct_words(3),
                "body": body,
                "meta": {
                    "source": "python-reference",
                    "reviewed": i % 2 == 0,
                    "paragraphs": body.count("\n\n") + 1,
                },
            }
        else:
            state = p.state(tokens)
        qs = {}
        for j in range(p.rng.choices(range(1, 13), weights)[0]):
            kind = p.rng.choices(("noul", "choice", "score"), (4, 4, 2))[0]
            if kind == "choice":
                if not widest_done:
                    n, widest_done = 151, True
                else:
                    r = p.rng.random()
                    n = (
                        p.rng.randint(2, 8)
                        if r < 0.85
                        else p.rng.randint(9, 26)
                        if r < 0.95
                        else p.rng.randint(27, 151)
                    )
                qs[f"q{j + 1}"] = _choice(p, n)
            else:
                qs[f"q{j + 1}"] = _noul(p) if kind == "noul" else _score(p)
        instances.append({"state": state, "questions": qs})
    return Workload("mixed", EXAMPLES / "systemone.flide", "systemone", tuple(instances))


_TOOLS = {
    "search": "search the project's documents",
    "read_file": "open a file from the workspace",
    "run_tests": "run the test suite",
    "edit": "change a file",
    "ask_user": "ask the user a question",
    "calculator": "evaluate arithmetic",
    "shell": "run a shell command",
    "finish": "stop: the task is done",
}


def planner(count: CountTokens, seed: int, scale: float) -> Workload:
    p = _Prose(count, random.Random(f"planner:{seed}"))
    instances = []
    for _ in range(_scaled(8, scale)):
        actions = [
            {
                "text": f"Action {k + 1}: " + p.text(_scaled(60, scale, 6), 250),
                "outcome": [{"text": "Outcome: " + p.text(_scaled(40, scale, 6), 250)} for _ in range(2)],
            }
            for k in range(16)
        ]
        instances.append(
            {
                "history": p.state(_scaled(3000, scale, 8)),
                "next_tool": {
                    "instructions": "Which tool should the agent call next?",
                    "criteria": dict(_TOOLS),
                },
                "action": actions,
            }
        )
    return Workload("planner", EXAMPLES / "planner.flide", "planner", tuple(instances))


def lookahead(count: CountTokens, seed: int, scale: float) -> Workload:
    p = _Prose(count, random.Random(f"lookahead:{seed}"))

    def level(depth: int) -> list[dict]:
        branches = []
        for _ in range(2):
            branch: dict = {"text": p.text(_scaled(36, scale, 4), 60)}
            if depth < 6:
                branch[f"step{depth + 1}"] = level(depth + 1)
            branches.append(branch)
        return branches

    instances = [
        {"context": p.state(_scaled(950, scale, 8)), "step1": level(1)} for _ in range(_scaled(8, scale))
    ]
    return Workload("lookahead", EXAMPLES / "lookahead.flide", "lookahead", tuple(instances))


def independent(count: CountTokens, seed: int, scale: float) -> Workload:
    p = _Prose(count, random.Random(f"independent:{seed}"))
    instances = []
    for _ in range(_scaled(256, scale)):
        state = p.state(p.rng.randint(_scaled(40, scale, 4), _scaled(400, scale, 8)))
        kind = p.rng.choice(("noul", "choice", "score"))
        q = _noul(p) if kind == "noul" else _score(p) if kind == "score" else _choice(p, p.rng.randint(2, 6))
        instances.append({"state": state, "questions": {"q": q}})
    return Workload("independent", EXAMPLES / "systemone.flide", "systemone", tuple(instances))


def demo(count: CountTokens, seed: int, scale: float) -> Workload:
    tools = str(Path(__file__).resolve().parent.parent / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    from demo_data import generate  # tools/ is a folder of scripts, not an installed package

    requests = tuple(ex.request() for ex in generate(5000 + seed, _scaled(96, scale), 0.0))
    return Workload("demo", EXAMPLES / "demo.flide", "systemone", requests)


BUILDERS: dict[str, Callable[[CountTokens, int, float], Workload]] = {
    "quality": lambda c, s, k: reading("quality", c, s, k, states=24, tokens=5000, questions=9),
    "race": lambda c, s, k: reading("race", c, s, k, states=96, tokens=450, questions=4),
    "mixed": mixed,
    "planner": planner,
    "lookahead": lookahead,
    "independent": independent,
    "demo": demo,
}


def build_workload(name: str, count: CountTokens, seed: int = 0, scale: float = 1.0) -> Workload:
    if name not in BUILDERS:
        raise ValueError(f"unknown workload {name!r}; one of {', '.join(BUILDERS)}")
    if not 0 < scale <= 1:
        raise ValueError(f"--scale must be in (0, 1], got {scale}")
    return BUILDERS[name](count, seed, scale)


def instances_jsonl(workload: Workload) -> str:
    """The instances as JSON lines (for `flidec run` and for diffing two builds)."""
    return "".join(json.dumps(i, ensure_ascii=False, sort_keys=True) + "\n" for i in workload.instances)
