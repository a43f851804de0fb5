"""Artifacts the runtime tests load: the systemone and planner examples compiled for cpu with the tiny
checkpoint (each once per session; ~2 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="session")
def systemone_cpu_artifact(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Path:
    from flidec.compile import compile_artifact

    out = tmp_path_factory.mktemp("artifacts") / "systemone-cpu"
    compile_artifact(EXAMPLES / "systemone.flide", tiny_checkpoint, "cpu", out)
    return out


@pytest.fixture(scope="session")
def planner_cpu_artifact(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Path:
    """examples/planner.flide (a `resumable` state) for cpu with the tiny checkpoint."""
    from flidec.compile import compile_artifact

    out = tmp_path_factory.mktemp("artifacts") / "planner-cpu"
    compile_artifact(EXAMPLES / "planner.flide", tiny_checkpoint, "cpu", out)
    return out
