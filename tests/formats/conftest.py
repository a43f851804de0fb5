"""Fixtures: tiny Qwen3.5 checkpoints (seed 0, bf16) carrying each decision layout of
flidec.testing.decision_checkpoints, and the reading oracle over each, built once per test session.

`decision_checkpoint(layout)` -> the checkpoint directory; `decision_oracle(layout)` -> its Oracle
(reading_oracle.py); `cpu_artifact(layout)` -> tests/formats/systemone_decision.flide compiled for cpu with
it (compiled on first use, so an unfinished compiler fails only the tests that need it). Read-only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from reading_oracle import Oracle

from flidec.testing.make_checkpoint import make_checkpoint

SPEC = Path(__file__).resolve().parent / "systemone_decision.flide"


@pytest.fixture(scope="session")
def decision_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    made: dict[str, Path] = {}

    def get(layout: str) -> Path:
        if layout not in made:
            out = tmp_path_factory.mktemp(f"decision-{layout}")
            made[layout] = make_checkpoint(out, "tiny", seed=0, decision=layout).path
        return made[layout]

    return get


@pytest.fixture(scope="session")
def decision_oracle(decision_checkpoint: Callable[[str], Path]) -> Callable[[str], Oracle]:
    made: dict[str, Oracle] = {}

    def get(layout: str) -> Oracle:
        if layout not in made:
            # the layouts share their weights (seed 0) and tokenizer: one transformers model and tokenizer
            # serve every oracle
            first = next(iter(made.values()), None)
            made[layout] = Oracle(decision_checkpoint(layout), model=first and first.model,
                                  tokenizer=first and first.tokenizer)
        return made[layout]

    return get


@pytest.fixture(scope="session")
def cpu_artifact(tmp_path_factory: pytest.TempPathFactory,
                 decision_checkpoint: Callable[[str], Path]) -> Callable[[str], Path]:
    made: dict[str, Path] = {}

    def get(layout: str) -> Path:
        if layout not in made:
            from flidec.compile import compile_artifact

            out = tmp_path_factory.mktemp("decision-artifacts") / layout
            compile_artifact(SPEC, decision_checkpoint(layout), "cpu", out)
            made[layout] = out
        return made[layout]

    return get
