"""E1 and E3 end to end on the reference executor: spec -> binder -> traced Qwen3.5 graph -> label logits.

E3: every read of a forked stream is bit-identical (torch.equal) to the plain single-sequence pass of its
path, for fork points on and off the 64-token chunk boundary, nested forks and several instances per stream.
E1: an answer does not depend on its siblings, their ids or order, or the other instances in the stream.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.fx

from flidec.formats import make_format
from flidec.frontend import load_spec
from flidec.models.tokenizer import load_tokenizer
from flidec.runtime.binder import bind
from flidec.runtime.recording import MODEL_DTYPES
from flidec.runtime.reference.executor import ReferenceExecutor
from flidec.runtime.reference.qwen3_5 import Qwen35
from flidec.testing.streams import plain_streams

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def setup(request, tiny_checkpoint):
    dtype = MODEL_DTYPES[request.param]
    executor = ReferenceExecutor(torch.fx.symbolic_trace(Qwen35.from_pretrained(tiny_checkpoint, dtype)))
    return executor, load_tokenizer(tiny_checkpoint)


def tree_and_format(name: str, tokenizer):
    spec, _ = load_spec(EXAMPLES / f"{name}.flide")
    return spec.trees[0], make_format(spec.format, tokenizer)


def words(n: int, seed: int = 0) -> str:
    vocab = ["river", "stone", "quiet", "market", "signal", "paper", "orbit", "lamp", "garden", "copper"]
    return " ".join(vocab[(i * 7 + seed) % len(vocab)] for i in range(n))


def state_of_root_length(fmt, target: int) -> str:
    """A state whose root segment (chat header + state + separator) is exactly `target` tokens."""
    for n in range(0, 4 * target):
        text = words(n)
        if len(fmt.root_piece(text)) == target:
            return text
    raise AssertionError(f"no state gives a root of {target} tokens")


def text_of_length(fmt, target: int, seed: int) -> str:
    for n in range(1, 4 * target + 4):
        text = words(n, seed)
        if len(fmt.text_piece(text, False)) == target:
            return text
    raise AssertionError(f"no text gives a piece of {target} tokens")


def assert_reads_equal_plain(executor, bound) -> None:
    forked = executor.run_stream(bound.stream)
    plains = plain_streams(bound)
    assert len(plains) == forked.shape[0] > 0
    for i, (plain, read) in enumerate(zip(plains, bound.stream.meta.reads, strict=True)):
        alone = executor.run_stream(plain)
        n = len(read.labels)
        assert torch.equal(forked[i, :n], alone[0, :n]), (f"read {i} ({bound.sites[i].path}) differs from "
                                                          "plain")
        assert torch.isfinite(forked[i, :n]).all()


@pytest.mark.parametrize("root", [63, 64, 65, 128])
def test_planner_reads_equal_plain_passes(setup, root):
    executor, tokenizer = setup
    tree, fmt = tree_and_format("planner", tokenizer)
    action_lengths = [2, 63, 64, 65] if root == 64 else [3, 64]
    instance = {
        "history": state_of_root_length(fmt, root),
        "next_tool": {"instructions": "Which tool next?", "criteria": {"search": "web", "shell": None}},
        "action": [
            {"text": text_of_length(fmt, n, seed=k), "outcome": [{"text": words(3 + k, k)}, {"text": "done"}]}
            for k, n in enumerate(action_lengths)
        ],
    }
    bound = bind(tree, [instance], fmt)
    assert not bound.errors
    assert_reads_equal_plain(executor, bound)


def test_lookahead_depth_six_and_two_instances(setup):
    executor, tokenizer = setup
    tree, fmt = tree_and_format("lookahead", tokenizer)

    def chain(seed: int, lengths: list[int]) -> dict:
        node: dict = {}
        for level in range(6, 0, -1):
            node = {f"step{level}": [{"text": words(lengths[level - 1], seed + level), **node}]}
        return node

    # fork points land on and off the 64-token chunk boundaries as the path grows level by level
    instances = [{"context": words(50, 1), **chain(0, [20, 45, 9, 60, 33, 2])},
                 {"context": "", **chain(5, [1, 62, 1, 30, 58, 7])}]
    bound = bind(tree, instances, fmt)
    assert not bound.errors and max(s.level for s in bound.stream.meta.segments) >= 6
    assert_reads_equal_plain(executor, bound)


def systemone(state: str, qids: list[str]) -> dict:
    questions = {
        "safe": {"type": "noul", "instructions": "Is it safe?"},
        "kind": {"type": "choice", "instructions": "Which kind?",
                 "criteria": {"a": "first", "b": None, "c": "x"}},
        "level": {"type": "score", "criteria": ["low", "mid", "high"]},
    }
    return {"state": state, "questions": {q: questions[q.split("#")[0]] for q in qids}}


def question_kind(path: str) -> str:
    """`questions["level#x"]` -> `level`: ids differ, the question behind them is the same."""
    return json.loads(path[path.index("[") + 1 : -1]).split("#")[0]


def test_answers_are_isolated_from_siblings_ids_order_and_batch(setup):
    executor, tokenizer = setup
    tree, fmt = tree_and_format("systemone", tokenizer)

    def logits_by_question(instances):
        bound = bind(tree, instances, fmt)
        assert not bound.errors
        out = executor.run_stream(bound.stream)
        return {(s.instance, question_kind(s.path)): out[i] for i, s in enumerate(bound.sites)}

    a, b = words(70, 2), words(30, 4)
    together = logits_by_question([systemone(a, ["safe", "kind", "level"]), systemone(b, ["level", "safe"])])
    alone = logits_by_question([systemone(a, ["kind"])])
    renamed = logits_by_question([systemone(b, ["safe#other id"]),
                                  systemone(a, ["level#x", "kind#y", "safe"])])
    assert torch.equal(together[0, "kind"], alone[0, "kind"])
    assert torch.equal(together[0, "level"], renamed[1, "level"])
    assert torch.equal(together[1, "safe"], renamed[0, "safe"])
    assert torch.equal(together[0, "safe"], renamed[1, "safe"])


def test_empty_state_and_padding_rows_change_nothing(setup):
    executor, tokenizer = setup
    tree, fmt = tree_and_format("systemone", tokenizer)
    inst = systemone("", ["safe", "kind"])
    tight = bind(tree, [inst], fmt)
    padded = bind(tree, [inst], fmt, rows=tight.rows_used + 77)
    assert torch.equal(executor.run_stream(tight.stream), executor.run_stream(padded.stream))
    assert_reads_equal_plain(executor, tight)
