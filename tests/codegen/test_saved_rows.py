"""Saved points on the recordings, under the interpreter: the row-copy kernel equals its plain-torch
reference both ways, bit for bit, and a stream resumed from a point its recording captured (the point's
keys, values, conv windows and GDN states restored in place by the recorded copies) reads exactly what the
fresh stream reads (torch.equal), again from a point captured by a resumed stream; a stream without saved
points skips the copies."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch
import torch.fx

from flidec.codegen import recording, saved_rows
from flidec.codegen.eager import launch
from flidec.ir.program import Bucket
from flidec.models.config import TextConfig
from flidec.passes.manager import run
from flidec.passes.pipeline import GRAPH_PIPELINE  # registers the passes
from flidec.runtime.binder import Plan, _pack
from flidec.runtime.recording import MODEL_DTYPES
from flidec.runtime.reference.qwen3_5 import Qwen35
from flidec.runtime.saved.point import PointLayout
from flidec.runtime.saved.resume import make_point
from flidec.runtime.saved.staging import captured_points, stage_held

BUCKET = Bucket("b0", rows=192, segments=8, depth=3, reads=4, labels=3)


@pytest.mark.parametrize("scatter", [True, False])
def test_the_row_copy_equals_its_reference_bitwise(scatter: bool) -> None:
    g = torch.Generator().manual_seed(0)
    src = torch.randn(40, 24, generator=g).to(torch.bfloat16)
    dst = torch.randn(40, 24, generator=g).to(torch.bfloat16)
    rows = torch.tensor([7, 3, 30, 12, -1, -1, -1, -1], dtype=torch.int32)
    want = dst.clone()
    saved_rows.reference_copy_rows(src, want, rows, scatter)
    call = saved_rows.emit_copy_rows(src, dst, rows, scatter)
    launch(call.kernel, call.grid, *call.args, device=torch.device("cpu"), **call.constexprs)
    assert torch.equal(dst, want) and not torch.equal(want, dst.new_zeros(dst.shape))


@dataclass(frozen=True)
class _Piece:
    labels: tuple[int, ...]
    ids: tuple[int, ...] = ()


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def model(request, tiny_checkpoint):
    dtype = MODEL_DTYPES[request.param]
    module = Qwen35.from_pretrained(tiny_checkpoint, dtype)
    rec = recording.record(run(torch.fx.symbolic_trace(module), list(GRAPH_PIPELINE)).ir, BUCKET)
    weights = {k: v.detach() for k, v in module.named_parameters(remove_duplicate=False)}
    return rec, weights, PointLayout.of(TextConfig.from_dir(tiny_checkpoint), dtype)


def plan(root: list[int], questions: list[list[int]], held=None, save: int = 0) -> Plan:
    """A root and a question block under it per question, each read at its last token."""
    p = Plan([list(root)], [-1], [])
    for k, q in enumerate(questions):
        p.reads.append((p.segment(q, 0), _Piece((3 + k, 9, 20)), f"q{k}"))
    p.held, p.save, p.save_key = held, save, f"p{save}" if save else ""
    return p


def played(rec, weights, plans, staging):
    stream, _, _, _ = _pack([(i, p) for i, p in enumerate(plans)], None)
    logits = recording.play(rec, stream.tokens, stream.meta, weights, staging)
    return logits[: len(stream.meta.reads)], stream.meta


def test_a_resumed_stream_reads_what_the_fresh_one_reads(model) -> None:
    rec, weights, layout = model
    g = torch.Generator().manual_seed(3)
    root = torch.randint(0, 5000, (150,), generator=g).tolist()
    questions = [torch.randint(0, 5000, (n,), generator=g).tolist() for n in (5, 9)]
    other = torch.randint(0, 5000, (11,), generator=g).tolist()  # an instance packed beside it, fresh

    # fresh, saving the point of 64 positions (the state enters its second chunk there)
    staging: dict[str, torch.Tensor] = {}
    saving = plan(root, questions, save=64)
    fresh, meta = played(rec, weights, [saving, plan(other, [[1, 2]])], staging)
    (captured,) = captured_points(staging, meta, layout)
    first = make_point(saving, captured)

    # resumed from it, saving the point of 128 positions: the same reads, bit for bit
    staging = {}
    stage_held(_fill(staging, rec), [first], layout)
    saving = plan(root, questions, held=first, save=128)
    resumed, meta = played(rec, weights, [saving, plan(other, [[1, 2]])], staging)
    assert meta.stored and torch.equal(resumed, fresh), "a resumed read differs from its fresh one"
    (captured,) = captured_points(staging, meta, layout)
    assert captured.start == 64  # the capture leaves out what the point it resumed from holds
    second = make_point(saving, captured)
    assert second.extents[0] is first.extents[0] and len(second.extents) == 2  # shared, not copied

    # resumed from the point the resumed stream captured: its two extents restored one after the other
    staging = {}
    stage_held(_fill(staging, rec), [second], layout)
    again, _ = played(rec, weights, [plan(root, questions, held=second), plan(other, [[1, 2]])], staging)
    assert torch.equal(again, fresh)

    # a stream with no saved point skips the copies: the staging is left as it was (NaN-poisoned)
    staging = {}
    played(rec, weights, [plan(root, questions)], staging)
    assert all(t.view(torch.uint8).eq(0xFF).all() for t in staging.values())


def _fill(staging: dict[str, torch.Tensor], rec) -> dict[str, torch.Tensor]:
    """The recording's staging buffers as [rows, ...] tensors (play takes them flat, by name)."""
    for b in rec.buffers:
        if b.region == "saved":
            staging[b.name] = torch.full(b.shape, float("nan"), dtype=b.torch_dtype)
    return staging


ENGINE = """
import json, sys, torch
sys.path.insert(0, sys.argv[2])
sys.path.insert(0, sys.argv[3])
from test_launch import BUCKET, record, fake_records
from test_saved_rows import plan
from flidec.codegen import eager
from flidec.models.config import TextConfig
from flidec.runtime.binder import _pack
from flidec.runtime.engines import GraphEngine
from flidec.runtime.recording import recording_from_json, write_recording
from flidec.runtime.saved.point import PointLayout, SavedPoint
from flidec.testing.interpreter import InterpreterLauncher
assert eager.interpreting()
rec, weights = record(sys.argv[1])
loaded = recording_from_json(json.loads(write_recording(rec)))


layout = PointLayout.of(TextConfig.from_dir(sys.argv[1]), torch.bfloat16)
launcher = InterpreterLauncher()
engine = GraphEngine({"t/b0": loaded}, fake_records(rec), weights, torch.device("cpu"), launcher,
                     graphs=False, layout=layout)
launcher.storages = [engine.buffers.arena, *engine.buffers.tensors.values(), *engine.buffers.saved.values()]
g = torch.Generator().manual_seed(5)
root = torch.randint(0, 5000, (100,), generator=g).tolist()
questions = [torch.randint(0, 5000, (n,), generator=g).tolist() for n in (4, 7)]

def stream(p):
    return _pack([(0, p)], None)[0]

plain = engine.submit("t", BUCKET, stream(plan(root, questions)))
fresh = engine.submit("t", BUCKET, stream(plan(root, questions, save=64)))
(c,) = fresh.captured
point = SavedPoint.whole("k", 64, torch.tensor(root[:64]), c.keys, c.values, c.states, c.windows)
resumed = engine.submit("t", BUCKET, stream(plan(root, questions, held=point)), [point])
print(json.dumps({"resumed": bool(torch.equal(resumed.result(), fresh.result())),
                  "plain": bool(torch.equal(plain.result(), fresh.result())), "resumes": engine.resumes,
                  "finite": bool(torch.isfinite(fresh.result()[:, :3]).all())}))
"""


def test_the_engine_resumes_from_its_own_capture_equal_under_the_interpreter(tiny_checkpoint) -> None:
    """GraphEngine's staging (runtime/saved/staging.py): a point captured by one submit and restored by the
    next gives the fresh stream's logits bit for bit, launch by launch through the interpreter."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", ENGINE, str(tiny_checkpoint), str(here.parent / "runtime"),
                          str(here)], env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out == {"resumed": True, "plain": True, "resumes": True, "finite": True}
