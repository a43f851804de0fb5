"""A compiled artifact accepts and refuses exactly the rows the uncompiled reading does: every token bound
the spec declares (state, instructions, criteria, bound texts, fork branch texts) at its bound and one past
it, on examples/systemone.flide and examples/planner.flide compiled for cpu with the tiny checkpoint. Each
row goes through the reference answerer (flidec.testing.reference_answerer), the artifact on the reference
executor and the artifact as a GPU would run it (an engine that needs buckets: the split and fit checks of
the CUDA path); the engines are stand-ins returning zero logits, since binding decides accept or refuse and
a 32,768-token state on the CPU model would take minutes. A refusal names the path, the bound and the
count, in the same words on every path."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from flidec.compile import compile_artifact
from flidec.frontend import load_spec
from flidec.ir.program import Bucket
from flidec.runtime.engines import Done
from flidec.runtime.meta import Stream
from flidec.runtime.program import Program, load
from flidec.testing.reference_answerer import ReferenceAnswerer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def tokens(n: int) -> str:
    """A text of exactly n tokens in the Qwen3.5 tokenizer ("a" then " a" per further token)."""
    return "a" + " a" * (n - 1)


class _ZeroExecutor:
    def run_stream(self, stream: Stream, device: object = None) -> torch.Tensor:
        width = max((len(r.labels) for r in stream.meta.reads), default=1)
        return torch.zeros(len(stream.meta.reads), width)


class _ZeroEngine:
    def __init__(self, needs_bucket: bool) -> None:
        self.needs_bucket = needs_bucket

    def submit(self, tree: str, bucket: Bucket | None, stream: Stream) -> Done:
        assert bucket is not None or not self.needs_bucket
        return Done(_ZeroExecutor().run_stream(stream))


def _paths(spec_name: str, tiny: Path, work: Path) -> dict[str, Callable[[list[dict]], list[dict]]]:
    spec, _ = load_spec(EXAMPLES / f"{spec_name}.flide")
    answerer = ReferenceAnswerer(spec, spec.trees[0], tiny, "cpu", "fp32", "jev")
    answerer.executor = _ZeroExecutor()  # type: ignore[assignment]
    compile_artifact(EXAMPLES / f"{spec_name}.flide", tiny, "cpu", work / spec_name)
    cpu = load(work / spec_name, "cpu", served_name="jev")
    gpu = Program(cpu.trees, cpu.fmt, _ZeroEngine(needs_bucket=True), "jev", cpu.manifest)
    cpu.engine = _ZeroEngine(needs_bucket=False)
    return {"spec": answerer.run, "cpu": cpu.run, "gpu": gpu.run}


@pytest.fixture(scope="module")
def systemone(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory):
    return _paths("systemone", tiny_checkpoint, tmp_path_factory.mktemp("bounds"))


@pytest.fixture(scope="module")
def planner(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory):
    return _paths("planner", tiny_checkpoint, tmp_path_factory.mktemp("bounds"))


def _verdicts(paths: dict, rows: list[dict]) -> dict[str, list]:
    """Per path, per row: None when answered, else its problems."""
    out = {}
    for name, run in paths.items():
        results = run(rows)
        assert len(results) == len(rows)
        out[name] = [r["error"]["problems"] if "error" in r else None for r in results]
    return out


Case = tuple[str, dict, str | None]  # (what, row, the spec path's refusal or None: answered)


def _check(paths: dict, cases: list[Case]) -> None:
    """Every path (the spec, the artifact on the CPU, the artifact's GPU engine) gives each row the spec
    path's verdict."""
    rows = [row for _, row, _ in cases]
    got = _verdicts(paths, rows)
    assert got["cpu"] == got["spec"]
    assert got["gpu"] == got["spec"]
    for (label, _, refusal), verdict in zip(cases, got["spec"], strict=True):
        if refusal is None:
            assert verdict is None, (label, verdict)
        else:
            assert verdict is not None and refusal in verdict, (label, verdict)


def _systemone_row(state: str = "A short ticket.", question: dict | None = None) -> dict:
    return {"state": state, "questions": {"q": question or {"type": "noul", "instructions": "Urgent?"}}}


def test_systemone_bounds_agree_with_the_spec_path(systemone) -> None:
    choice = {"type": "choice", "instructions": "Which?"}
    cases: list[Case] = [
        ("state at bound", _systemone_row(tokens(32768)), None),
        ("state over", _systemone_row(tokens(32769)), "state: 32769 tokens over its bound 32768"),
        ("instructions at bound", _systemone_row(question={"type": "noul", "instructions": tokens(1024)}),
         None),
        ("instructions over", _systemone_row(question={"type": "noul", "instructions": tokens(1025)}),
         'questions["q"].instructions: 1025 tokens over its bound 1024'),
        ("instructions far over", _systemone_row(question={"type": "noul", "instructions": tokens(3000)}),
         'questions["q"].instructions: 3000 tokens over its bound 1024'),
        # option names count too: "x" and "y" are a token each
        ("choice criteria at bound",
         _systemone_row(question={**choice, "criteria": {"x": tokens(4094), "y": None}}), None),
        ("choice criteria over",
         _systemone_row(question={**choice, "criteria": {"x": tokens(4095), "y": None}}),
         'questions["q"].criteria: 4097 tokens over its bound 4096'),
        ("score criteria at bound",
         _systemone_row(question={"type": "score", "criteria": [tokens(2048)] * 2}), None),
        ("score criteria far over",
         _systemone_row(question={"type": "score", "criteria": [tokens(3002)] * 2}),
         'questions["q"].criteria: 6004 tokens over its bound 4096'),
        ("noul criteria over", _systemone_row(question={"type": "noul", "criteria": {"true": tokens(4000),
                                                                                     "false": tokens(97)}}),
         'questions["q"].criteria: 4097 tokens over its bound 4096'),
    ]
    _check(systemone, cases)


def _planner_row() -> dict:
    return {"history": "The user asked to rename a file.",
            "next_tool": {"instructions": "Which tool next?", "criteria": {"shell": None, "editor": None}},
            "action": [{"text": "mv a b", "outcome": [{"text": "renamed"}]}]}


def test_planner_bounds_agree_with_the_spec_path(planner) -> None:
    def row(edit: Callable[[dict], None]) -> dict:
        r = copy.deepcopy(_planner_row())
        edit(r)
        return r

    def put(path: tuple, value: object) -> Callable[[dict], None]:
        def edit(r: dict) -> None:
            target = r
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
        return edit

    cases: list[Case] = [
        ("plain", _planner_row(), None),
        ("history at bound", row(put(("history",), tokens(16384))), None),
        ("history over", row(put(("history",), tokens(16385))), "history: 16385 tokens over its bound 16384"),
        ("action text at bound", row(put(("action", 0, "text"), tokens(256))), None),
        ("action text over", row(put(("action", 0, "text"), tokens(257))),
         "action[0].text: 257 tokens over its bound 256"),
        ("outcome text at bound", row(put(("action", 0, "outcome", 0, "text"), tokens(256))), None),
        ("outcome text over", row(put(("action", 0, "outcome", 0, "text"), tokens(257))),
         "action[0].outcome[0].text: 257 tokens over its bound 256"),
        ("instructions at bound", row(put(("next_tool", "instructions"), tokens(1024))), None),
        ("instructions over", row(put(("next_tool", "instructions"), tokens(1025))),
         "next_tool.instructions: 1025 tokens over its bound 1024"),
        ("criteria at bound", row(put(("next_tool", "criteria"), {"x": tokens(4094), "y": None})), None),
        ("criteria over", row(put(("next_tool", "criteria"), {"x": tokens(4095), "y": None})),
         "next_tool.criteria: 4097 tokens over its bound 4096"),
        ("history, instructions and criteria at bound: the longest path", row(lambda r: (
            put(("history",), tokens(16384))(r), put(("next_tool", "instructions"), tokens(1024))(r),
            put(("next_tool", "criteria"), {"x": tokens(4094), "y": None})(r))), None),
    ]
    # planner.flide's bucket hints top at 16,384 rows, under a history at its bound plus the chat header:
    # bucket_topologies adds a bucket for the longest path, so the GPU path runs that row too
    _check(planner, cases)
