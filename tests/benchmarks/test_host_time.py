"""benchmarks/host_time.py: the Program it builds around a ZeroEngine runs the host path whole (no
weights)."""

from __future__ import annotations

from pathlib import Path

import torch

from benchmarks.host_time import host_program, measure
from benchmarks.workloads import build_workload

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_host_time_measures_every_part(tmp_path: Path, tiny_checkpoint: Path) -> None:
    from flidec.compile import compile_artifact

    artifact = tmp_path / "systemone"
    compile_artifact(EXAMPLES / "systemone.flide", tiny_checkpoint, "cpu", artifact)
    program = host_program(artifact)
    instance = build_workload("race", program.fmt.count_tokens).instances[0]
    [logits] = program.label_logits([instance])
    assert isinstance(logits, torch.Tensor) and logits.shape == (4, 4) and not logits.any()
    report = measure(program, instance, repeat=1)
    assert report["reads"] == 4 and report["texts"] > 0
    assert all(report[k] > 0 for k in report if k.endswith("_ms"))
    assert "encode_texts" not in vars(program.fmt)  # the format is left as it was
