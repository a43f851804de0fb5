"""GPU tier of saved states: the tiny checkpoint's planner artifact compiled for sm_90 and run on the H200.
An agent's growing history resumed from GPU memory, from pinned host memory (a GPU budget too small for a
point) and from disk in a new Program is bit for bit its fresh computation (torch.equal), with the stored
roots restored and the points captured by the recordings' own copies inside the CUDA graph replays."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_saved_states import planner

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BUILD = ("import sys; from flidec.compile import compile_artifact; "
         "compile_artifact(sys.argv[1], sys.argv[2], 'sm_90', sys.argv[3])")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, tiny_checkpoint) -> Path:
    out = tmp_path_factory.mktemp("gpu-saved") / "planner"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", BUILD, str(EXAMPLES / "planner.flide"), str(tiny_checkpoint),
                          str(out)], env=env, cwd=out.parent, capture_output=True, text=True, timeout=900,
                         check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def fresh(artifact):
    from flidec.runtime.program import load

    return load(artifact, "cuda", saved_states=False)


def steps(fresh, program, trajectory: int, count: int, start: int = 0) -> list[int]:
    reused_all = []
    for step in range(start, start + count):
        (got,) = program.answer([planner(trajectory, step)])
        want = fresh.label_logits([planner(trajectory, step)])
        assert torch.equal(got.logits, want[0]), f"step {step}: resumed differs from fresh"
        reused_all.append(got.reused)
    return reused_all


def test_resumed_equal_fresh_from_gpu_memory(artifact, fresh) -> None:
    from flidec.runtime.program import load

    program = load(artifact, "cuda")
    assert program.saved is not None and program.engine.resumes
    reused = steps(fresh, program, 20, 4)
    assert reused[0] == 0 and all(r > 0 for r in reused[1:]), reused
    assert program.stats.saved.from_tier == {"gpu": 3} and program.stats.saved.bytes["gpu"] > 0


def test_resumed_equal_fresh_from_host_memory(artifact, fresh) -> None:
    from flidec.runtime.program import load

    program = load(artifact, "cuda", gpu_budget_gib=1e-6)  # no point fits: every one goes to host memory
    reused = steps(fresh, program, 21, 3)
    assert all(r > 0 for r in reused[1:]) and program.stats.saved.from_tier == {"host": 2}


def test_resumed_equal_fresh_from_disk_after_a_restart(artifact, fresh, tmp_path) -> None:
    from flidec.runtime.program import load

    first = load(artifact, "cuda", checkpoints=tmp_path)
    steps(fresh, first, 22, 2)
    first.saved.flush()  # what the process does at exit
    del first
    again = load(artifact, "cuda", checkpoints=tmp_path)
    (reused,) = steps(fresh, again, 22, 1, start=2)
    assert reused > 0 and again.stats.saved.from_tier == {"disk": 1}
