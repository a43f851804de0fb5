"""GPU tier: the tiny checkpoint's systemone artifact compiled for sm_90 (in a subprocess without
TRITON_INTERPRET), loaded by the runtime and run on the H200: compiled answers agree with the reference
executor (bf16 within one TOLERANCE of its distance to the fp32 reference), E1 (alone == packed with others
== in a larger bucket) and E3 (every read == its plain single-sequence pass) bit for bit, CUDA graph
replays == eager launches of the same kernels bit for bit; load-to-first-answer time printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.fx

from flidec.testing.streams import plain_streams
from flidec.testing.tolerance import TOLERANCE

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BUILD = ("import sys; from flidec.compile import compile_artifact; "
         "compile_artifact(sys.argv[1], sys.argv[2], 'sm_90', sys.argv[3])")


def instances() -> list[dict]:
    lines = (EXAMPLES / "systemone.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(x) for x in lines[:3]]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, tiny_checkpoint) -> Path:
    out = tmp_path_factory.mktemp("gpu") / "systemone"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # cwd: not the checkout, whose flidec/ folder would shadow the installed package's mapped subpackages
    run = subprocess.run([sys.executable, "-c", BUILD, str(EXAMPLES / "systemone.flide"),
                          str(tiny_checkpoint), str(out)], env=env, cwd=out.parent, capture_output=True,
                         text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def programs(artifact):
    from flidec.runtime.program import load

    start = time.perf_counter()
    graphs = load(artifact, "cuda", served_name="jev")
    first = graphs.run(instances()[:1])
    print(f"load to first answer: {time.perf_counter() - start:.2f} s")
    assert "answers" in first[0]
    return graphs, load(artifact, "cuda", served_name="jev", graphs=False)


def test_compiled_agrees_with_the_reference_executor(programs, artifact, tiny_checkpoint) -> None:
    from flidec.runtime.program import load

    graphs, _ = programs
    got = graphs.label_logits(instances())
    bf16 = load(artifact, "cpu", dtype="bf16").label_logits(instances())
    fp32 = load(artifact, "cpu", dtype="fp32").label_logits(instances())
    atol, _ = TOLERANCE[torch.bfloat16]
    for g, b, f in zip(got, bf16, fp32, strict=True):
        assert torch.equal(torch.isinf(g), torch.isinf(f))
        finite = torch.isfinite(f)
        assert (g - f)[finite].abs().max() <= (b - f)[finite].abs().max() + atol


def test_isolation_and_same_bits(programs) -> None:
    graphs, eager = programs
    insts = instances()
    together = graphs.label_logits(insts)
    for i, inst in enumerate(insts):
        (alone,) = graphs.label_logits([inst])
        assert torch.equal(alone, together[i]), "E1: packing changed an instance"
        (again,) = eager.label_logits([inst])
        assert torch.equal(again, alone), "graph replay != eager launches"
    program = graphs.tree()
    from flidec.runtime.templates import bind_template

    bound = bind_template(program.tree, program.program.template, insts[:1], graphs.fmt)
    forked = graphs.run_stream(bound.stream)
    largest = program.program.buckets[-1].bucket.name
    assert torch.equal(graphs.run_stream(bound.stream, bucket=largest), forked), "E1: the bucket changed bits"
    for r, plain in enumerate(plain_streams(bound)):  # each read's whole path as its own stream
        alone = graphs.run_stream(plain)
        width = len(plain.meta.reads[0].labels)
        assert torch.equal(alone[0, :width], forked[r, :width]), f"E3: read {r} != its plain pass"


def test_the_projections_are_row_invariant_on_this_gpu(programs) -> None:
    """load() ran the check (runtime/row_check.py); run again, it compares the ladder's GEMM kernel records
    and passes, and the replay after it still answers as before (the check wrote only the arena)."""
    from flidec.runtime.row_check import check_row_invariance

    graphs, _ = programs
    before = graphs.run(instances()[:1])
    start = time.perf_counter()
    compared = check_row_invariance(graphs.engine)
    print(f"row check: {compared} launches in {(time.perf_counter() - start) * 1e3:.1f} ms")
    assert compared >= 6
    assert graphs.run(instances()[:1]) == before
