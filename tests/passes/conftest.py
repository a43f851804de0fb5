"""Fixtures for the tree-pass tests: the examples' specs, the next_token format on the tiny checkpoint's
real tokenizer, and instances of each example covering bound texts, bound questions and forks."""

from __future__ import annotations

from pathlib import Path

import pytest

from flidec.formats import make_format
from flidec.frontend import load_spec
from flidec.frontend.parser import parse_spec
from flidec.passes.context import CompileContext

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GOLDEN = Path(__file__).resolve().parent / "golden"

SMALL_SPEC = '''model qwen3_5
format next_token(style="vllm")

tree small {
  state doc: text[..100]
  text "Read it."
  ask ok: noul "Is it fine?"
  ask kind: choice "Which kind?" { a, b }
  fork step[1..2]: text[..20] {
    ask ok: noul "Is it fine?"
    ask why: noul bound[..30]
  }
}
'''


@pytest.fixture(scope="session")
def small_spec():
    return parse_spec(SMALL_SPEC, "small.flide")


@pytest.fixture(scope="session")
def example():
    def load(name: str):
        return load_spec(EXAMPLES / f"{name}.flide")[0]
    return load


@pytest.fixture(scope="session")
def ctx(qwen_tokenizer, small_spec) -> CompileContext:
    return CompileContext(make_format(small_spec.format, qwen_tokenizer))


@pytest.fixture(scope="session")
def golden():
    return check_golden


@pytest.fixture(scope="session")
def instances():
    return INSTANCES


def check_golden(name: str, text: str) -> None:
    """Compare with golden/NAME; FLIDEC_UPDATE_GOLDEN=1 rewrites it (review the diff)."""
    import os

    path = GOLDEN / name
    if os.environ.get("FLIDEC_UPDATE_GOLDEN") == "1" or not path.exists():
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def words(n: int, seed: int = 0) -> str:
    vocab = ["river", "stone", "quiet", "market", "signal", "paper", "orbit", "lamp", "garden", "copper"]
    return " ".join(vocab[(i * 7 + seed) % len(vocab)] for i in range(n))


def _chain(levels: int) -> dict:
    """Lookahead steps 1..levels, two branches at the first step and one below."""
    node: dict = {}
    for level in range(levels, 0, -1):
        node = {f"step{level}": [{"text": words(level + 2, level), **node}] * (2 if level == 1 else 1)}
    return node


INSTANCES = {
    "planner": [
        {"history": words(40), "next_tool": {"instructions": "Which tool next?",
                                             "criteria": {"search": "web", "shell": None}},
         "action": [{"text": words(5 + k, k), "outcome": [{"text": words(3 + k, k)}, {"text": "done"}]}
                    for k in range(3)]},
        {"history": {"log": [1, 2]}, "next_tool": {"criteria": {"a": None, "b": "x", "c": None}},
         "action": [{"text": "  ", "outcome": [{"text": "x"}]}]},
    ],
    "classifier": [
        {"ticket": words(30),
         "checks": {"c1": {"instructions": "Is it spam?"}, "c 2": {"instructions": None}}},
    ],
    "systemone": [
        {"state": words(20), "questions": {
            "safe": {"type": "noul", "instructions": "Is it safe?"},
            "kind": {"type": "choice", "instructions": "Which kind?", "criteria": {"a": "first", "b": None}},
            "level": {"type": "score", "criteria": ["low", "mid", "high"]}}},
    ],
    "tool_router": [
        {"conversation": words(25), "request": "find the weather",
         "call": [{"text": "search(q='weather')", "policy": {"instructions": "Allowed?",
                                                              "criteria": {"yes": None, "no": None}}},
                  {"text": "calc(1+1)",
                   "policy": {"criteria": {"ok": "fine", "bad": "not fine", "hm": None}}}]},
    ],
    "lookahead": [{"context": words(12), **_chain(6)}],
}

