"""E1 and E3 under decision formats, on the reference executor: every read of a forked stream is bit-identical
(torch.equal) to the plain single-sequence pass of its path, and its path ids are its whole prompt's tokens.

The layouts of flidec.testing.decision_checkpoints (a readout head, a raw prompt with a cut state, label
forms) over a System One tree and the planner's deep tree (fork branches and texts after the state); a
format whose prompt puts the question before the state forks earlier and stays exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.fx

from flidec.formats import resolve_format
from flidec.frontend import load_spec
from flidec.models.tokenizer import load_tokenizer
from flidec.runtime.binder import bound_from_plans
from flidec.runtime.recording import MODEL_DTYPES
from flidec.runtime.reference.executor import ReferenceExecutor
from flidec.runtime.reference.qwen3_5 import Qwen35
from flidec.testing.streams import plain_streams

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Short texts: the reference executor takes about 10 ms a row on this CPU, and every read runs twice.
HISTORY = "Goal: book a table.\nStep 1: search(city='Lyon') -> 12 results\n"
SYSTEMONE = {
    "state": HISTORY,
    "questions": {
        "done": {"type": "noul", "instructions": "Is the goal met?"},
        "tool": {
            "type": "choice",
            "instructions": "Next?",
            "criteria": {"book": "reserve", "ask": {"why": 1}},
        },
    },
}
LOOKAHEAD = """model qwen3_5
format decision

tree lookahead {
  state history: text[..512]
  fork action[1..4]: text[..64] {
    ask safe: noul "Safe?"
    fork outcome[1..2]: text[..64] {
      ask done: noul "Done?"
    }
  }
}
"""
PLAN = {
    "history": HISTORY,
    "action": [
        {"text": "book(id=7)", "outcome": [{"text": "-> table 12"}, {"text": "-> full"}]},
        {"text": "ask('When?')", "outcome": [{"text": "-> 8 pm"}]},
    ],
}


def _setup(checkpoint: Path, dtype: str, spec_text: str):
    spec_file = checkpoint.parent / f"{checkpoint.name}-{abs(hash(spec_text))}.flide"
    spec_file.write_text(spec_text)
    spec, _ = load_spec(spec_file)
    chosen = resolve_format(spec.format, checkpoint, load_tokenizer(checkpoint))
    readout = None if chosen.head is None else chosen.head["weight"]
    module = Qwen35.from_pretrained(checkpoint, MODEL_DTYPES[dtype], readout=readout)
    return spec.trees[0], chosen.fmt, ReferenceExecutor(torch.fx.symbolic_trace(module))


def _spec(name: str) -> str:
    text = (EXAMPLES / f"{name}.flide").read_text()
    return text.replace('format next_token(style="vllm")', "format decision")


def _bound(tree, reading, instances):
    walker = reading.walker(tree, verify=True)  # verify: every path's ids are its whole prompt's tokens
    return bound_from_plans(tree, reading, instances, walker.plan)


def _assert_reads_equal_plain(executor, bound) -> torch.Tensor:
    assert not bound.errors, bound.errors
    forked = executor.run_stream(bound.stream)
    plains = plain_streams(bound)
    assert len(plains) == forked.shape[0] > 0
    for i, (plain, read) in enumerate(zip(plains, bound.stream.meta.reads, strict=True)):
        n = len(read.labels)
        alone = executor.run_stream(plain)
        assert torch.equal(forked[i, :n], alone[0, :n]), (
            f"read {bound.sites[i].path} differs from its plain pass"
        )
        assert torch.isfinite(forked[i, :n]).all()
    return forked


@pytest.mark.parametrize(
    ("layout", "dtype"), [("readout", "fp32"), ("standalone", "fp32"), ("forms", "fp32"), ("readout", "bf16")]
)
def test_systemone_reads_are_exact(decision_checkpoint, layout, dtype):
    tree, reading, executor = _setup(decision_checkpoint(layout), dtype, _spec("systemone"))
    bound = _bound(tree, reading, [SYSTEMONE])
    segments = bound.stream.meta.segments
    assert len(segments) == 1 + len(SYSTEMONE["questions"]), "the questions fork from one shared root"
    _assert_reads_equal_plain(executor, bound)


def test_path_texts_fork_at_every_level_and_are_exact(decision_checkpoint):
    tree, reading, executor = _setup(decision_checkpoint("standalone"), "fp32", LOOKAHEAD)
    bound = _bound(tree, reading, [PLAN])
    levels = [s.level for s in bound.stream.meta.segments]
    assert max(levels) == 3, "state, action, outcome, then each question's own block"
    assert levels.count(0) == 1, "one root: the state computed once"
    _assert_reads_equal_plain(executor, bound)


def test_isolation_alone_and_packed(decision_checkpoint):
    """E1: a question's logits do not depend on its siblings, their order or the other instances."""
    tree, reading, executor = _setup(decision_checkpoint("readout"), "fp32", _spec("systemone"))
    qs = SYSTEMONE["questions"]
    together = executor.run_stream(_bound(tree, reading, [SYSTEMONE]).stream)
    reordered = {k: qs[k] for k in reversed(qs)}
    other = {"state": "Another state entirely.", "questions": {"x": qs["tool"]}}
    packed = executor.run_stream(
        _bound(tree, reading, [other, {"state": HISTORY, "questions": reordered}]).stream
    )
    for i, key in enumerate(qs):
        alone = executor.run_stream(
            _bound(tree, reading, [{"state": HISTORY, "questions": {key: qs[key]}}]).stream
        )
        n = int((alone[0] > float("-inf")).sum())
        assert torch.equal(together[i, :n], alone[0, :n])
        j = 1 + list(reordered).index(key)
        assert torch.equal(packed[j, :n], alone[0, :n])


def test_question_before_the_state_moves_the_fork_point_up(decision_checkpoint, tmp_path):
    """A system turn that names the question type parts the prompts before the state: the fork moves up to
    the chat header, the compiler says so, and every read stays exact."""
    src = decision_checkpoint("forms")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for f in src.iterdir():
        (ckpt / f.name).symlink_to(f)
    (ckpt / "decision_config.json").unlink()
    config = json.loads((src / "decision_config.json").read_text())
    config["messages"] = [
        {"role": "system", "content": "Answer a {{ question.type }} question."},
        *config["messages"],
    ]
    (ckpt / "decision_config.json").write_text(json.dumps(config))
    tree, reading, executor = _setup(ckpt, "fp32", _spec("systemone"))
    tokens, after = reading.sharing()
    assert not after and tokens > 0
    instance = {
        "state": HISTORY,
        "questions": {"a": SYSTEMONE["questions"]["done"], "b": SYSTEMONE["questions"]["tool"]},
    }
    bound = _bound(tree, reading, [instance])
    root = bound.stream.meta.segments[0]
    assert root.length < 20 and len(bound.stream.meta.segments) == 3, "only the chat header is shared"
    _assert_reads_equal_plain(executor, bound)
    assert any(
        "computed once per question" in line or "computes the state" in line for line in reading.describe()
    )
