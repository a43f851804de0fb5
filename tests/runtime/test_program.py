"""Program on a cpu artifact: answers and logits equal `flidec run`'s reference executor bit for bit (same
dtype), a one-question instance runs as its plain pass with the same bits (E3), packing never changes an
instance's logits (E1), per-row errors never stop a run, `flidec run ARTIFACT` writes the same results, and
the queue routes each caller's answer back to it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
import torch.fx

from flidec.cli import main
from flidec.frontend import load_spec
from flidec.ir.errors import ArtifactError, InstanceError
from flidec.runtime.binder import Walker, bind
from flidec.runtime.next_token import NextTokenFormat, text_runs
from flidec.runtime.program import load
from flidec.runtime.scheduler import Scheduler
from flidec.runtime.templates import TemplateWalker, _check_paths
from flidec.testing.reference_answerer import ReferenceAnswerer
from flidec.testing.streams import plain_streams

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def sample() -> list[dict]:
    text = (EXAMPLES / "systemone.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def question(i: int) -> dict:
    kinds = [{"type": "noul", "instructions": f"Is {i} even?"},
             {"type": "choice", "instructions": "Pick one.", "criteria": {"red": None, "blue": "the sea"}},
             {"type": "score", "instructions": "How big?", "criteria": ["small", "medium", "large"]}]
    return {"state": f"Instance number {i} talks about colours.", "questions": {f"q{i}": kinds[i % 3]}}


@pytest.fixture(scope="module")
def program(systemone_cpu_artifact):
    return load(systemone_cpu_artifact, "cpu", dtype="fp32", served_name="jev")


@pytest.fixture(scope="module")
def answerer(tiny_checkpoint):
    spec, _ = load_spec(EXAMPLES / "systemone.flide")
    return ReferenceAnswerer(spec, spec.trees[0], tiny_checkpoint, "cpu", "fp32", "jev")


def test_answers_equal_flidec_run(program, answerer) -> None:
    instances = sample()
    assert program.run(instances) == answerer.run(instances)
    assert program.run(instances)[3] == {"error": {"type": "InstanceError",
                                                   "problems": ["questions: 0 questions, expected 1 to 64"]}}


def test_logits_equal_the_reference_executor_bitwise(program, answerer) -> None:
    instances = sample()[:3]
    got = program.label_logits(instances)
    for inst, logits in zip(instances, got, strict=True):
        bound = bind(answerer.tree, [inst], answerer.fmt)
        want = answerer.executor.run_stream(bound.stream)
        assert torch.equal(logits, want), "the runtime's logits differ from flidec run's"


def test_a_one_question_instance_runs_as_its_plain_pass_with_the_forked_bits(program, answerer, monkeypatch
                                                                             ) -> None:
    """merge_chains: the root and the question block run as one segment, the read's plain single-sequence
    pass (what flidec-solo runs), and the logits equal those of the forked stream of two segments bit for bit
    (E3)."""
    submitted = []
    submit = program.engine.submit
    monkeypatch.setattr(program.engine, "submit", lambda *a: submitted.append(a[2]) or submit(*a))
    for i in range(3):
        inst = question(i)
        (got,) = program.label_logits([inst])
        bound = bind(answerer.tree, [inst], answerer.fmt)
        (plain,) = plain_streams(bound)
        assert len(bound.stream.meta.segments) == 2 and len(submitted[-1].meta.segments) == 1
        assert torch.equal(submitted[-1].tokens, plain.tokens)
        assert submitted[-1].meta.reads == plain.meta.reads
        assert torch.equal(got, answerer.executor.run_stream(bound.stream))
        assert torch.equal(got, answerer.executor.run_stream(plain))


def test_packing_never_changes_an_instance(program) -> None:
    instances = [question(i) for i in range(7)]
    together = program.label_logits(instances)
    streams = program.stats.streams
    program.label_logits(instances)
    assert program.stats.streams == streams + 1  # all seven shared one stream
    for i, inst in enumerate(instances):
        (alone,) = program.label_logits([inst])
        assert torch.equal(alone, together[i])
    reordered = program.label_logits(instances[::-1])
    assert all(torch.equal(a, b) for a, b in zip(reordered, together[::-1], strict=True))


def test_bad_rows_are_errors_in_place(program) -> None:
    over = {"state": "x", "questions": {f"q{i}": {"type": "noul"} for i in range(65)}}
    results = program.run([question(0), "not an object", over, question(1)])
    assert results[0]["answers"]["q0"]["type"] == "noul" and results[3]["answers"]["q1"]["type"] == "choice"
    assert results[1]["error"]["type"] == "InstanceError" and results[2]["error"]["type"] == "InstanceError"
    errors = program.label_logits(["not an object"])
    assert isinstance(errors[0], InstanceError)


class _Batches:
    """A ChatTokenizer that records each batch it is asked to encode."""

    def __init__(self, inner) -> None:
        self.inner, self.special_tokens, self.chat, self.batches = inner, inner.special_tokens, inner.chat, []
        self.cuts_exact = inner.cuts_exact

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        self.batches.append(list(texts))
        return self.inner.encode_batch(texts)

    def encode_template(self, text: str) -> list[int]:
        return self.inner.encode_template(text)


def test_an_instance_is_tokenized_in_one_batch(program, qwen_tokenizer) -> None:
    """The template walker drafts every piece, then tokenizes all the instance's bound text in one call: the
    root text and the long state as runs, each distinct run once, then the bound lines and the texts the
    spec's token bounds count; the paths are the plain binder's, which tokenizes each piece on its own."""
    t = program.tree()
    tokenizer = _Batches(qwen_tokenizer)
    fmt = NextTokenFormat(tokenizer)
    choice = {"type": "choice", "instructions": "Which?", "criteria": {"x": "ex", "y": None}}
    inst = {"state": "A state of many lines.\n" * 200,
            "questions": {"a": {"type": "noul", "instructions": "Is it long?"}, "b": choice}}
    plan, _ = TemplateWalker(t.tree, t.program.template, fmt).plan(inst)
    (batch,) = tokenizer.batches
    root = "user\n" + inst["state"] + "\n\n"
    lines = ["Question: Is it long?\n", "yes\n", "no\n", "Question: Which?\n", "A: x - ex\n", "B: y\n"]
    counted = [inst["state"], "Is it long?", "Which?", "x", "ex", "y"]  # what the bounds count
    assert len(text_runs(root)) > 4 and len(text_runs(inst["state"])) > 4
    runs = [r for text in [root, *lines, *counted] for r in text_runs(text)]
    assert batch == list(dict.fromkeys(runs)) and len(batch) < len(runs)  # a repeated run is encoded once
    _check_paths(plan, Walker(t.tree, program.fmt, verify=True).plan(inst)[0])


def test_cli_runs_an_artifact_like_a_spec(systemone_cpu_artifact, answerer, tmp_path) -> None:
    assert main(["run", str(systemone_cpu_artifact), "--out", str(tmp_path / "a"), "--instances",
                 str(EXAMPLES / "systemone.jsonl"), "--served-name", "jev", "--quiet"]) == 0
    lines = (tmp_path / "a" / "results.jsonl").read_text(encoding="utf-8").splitlines()
    want = answerer.run(sample())
    assert [json.loads(line) for line in lines] == json.loads(json.dumps(want))
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["answered"] == 3 and summary["failed"] == 1 and summary["questions"] > 0


def test_refuses_what_it_cannot_run(systemone_cpu_artifact, tmp_path) -> None:
    with pytest.raises(ArtifactError, match="not an artifact"):
        load(tmp_path, "cpu")
    program = load(systemone_cpu_artifact, "cpu", served_name="jev")
    with pytest.raises(Exception, match="no tree `nope`"):
        program.run([question(0)], tree="nope")


def test_queue_routes_each_answer_to_its_caller(program) -> None:
    want = {i: program.run([question(i)])[0] for i in range(12)}
    got: dict[int, dict] = {}
    with Scheduler(program, max_wait_s=0.05) as scheduler:
        def call(i: int) -> None:
            got[i] = scheduler.answer(question(i), timeout=120).record

        threads = [threading.Thread(target=call, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        batches = scheduler.batches
        assert scheduler.answer("not an object", timeout=60).record["error"]["type"] == "InstanceError"
    assert got == want
    assert batches < 12  # callers shared runs
    with pytest.raises(RuntimeError, match="closed"):
        scheduler.submit(question(0))


def test_an_instances_rows_stack_to_its_widest_read_with_inf_past_each_reads_labels() -> None:
    """`_stacked` stacks rows at least as wide as the instance's widest read in one op; a narrower row (a
    sub-plan's bucket held fewer labels) is padded with -inf. Both give what the row-by-row copy gives."""
    from types import SimpleNamespace

    from flidec.runtime.binder import Plan
    from flidec.runtime.program import _stacked
    from flidec.runtime.request import Request

    def rowwise(rows: list[torch.Tensor], width: int) -> torch.Tensor:
        out = torch.full((len(rows), width), float("-inf"))
        for r, row in enumerate(rows):
            out[r, : min(width, row.shape[0])] = row[:width]
        return out

    labels = [(1, 2), (3, 4, 5), (6,)]
    plan = Plan([[1]], [-1], [(0, SimpleNamespace(labels=ls), f"q{k}") for k, ls in enumerate(labels)])
    logits = torch.randn(3, 7)
    logits[0, 2:], logits[2, 1:] = float("-inf"), float("-inf")
    wide = [logits[0], logits[1], logits[2]]
    narrow = [logits[0, :2], logits[1, :5], logits[2, :1]]
    for rows in (wide, narrow):
        got = _stacked(Request(None, plan=plan, rows=list(rows)))
        assert got.dtype == torch.float32 and torch.equal(got, rowwise(rows, 3))
    assert _stacked(Request(None, plan=Plan(), rows=[])).shape == (0, 0)
