"""GPU tier for decision formats: each layout's tiny checkpoint compiled for sm_90 (in a subprocess without
TRITON_INTERPRET) with fp32 activations, the build whose numerics the reference executor's are (bf16
weights, fp32 activations), and run on the GPU: answers agree with the reference executor (bf16 within one
TOLERANCE of its distance to the fp32 reference; the readout head runs in fp32 on both), E1 (alone ==
packed) and E3 (every read == its plain single-sequence pass) bit for bit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flidec.runtime.binder import bound_from_plans
from flidec.testing.streams import plain_streams
from flidec.testing.tolerance import TOLERANCE

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
HERE = Path(__file__).resolve().parent
BUILD = (
    "import sys; from flidec.compile import compile_artifact; "
    "from pathlib import Path; compile_artifact(sys.argv[1], sys.argv[2], 'sm_90', sys.argv[3], "
    "kernel_cache=Path(sys.argv[4]), activations='fp32')"
)
REQUESTS = [
    {
        "state": "Ticket 88: the invoice was charged twice.\nCustomer: Ana",
        "questions": {
            "refund": {"type": "noul", "instructions": "Is a refund asked for?"},
            "team": {
                "type": "choice",
                "instructions": "Which team?",
                "criteria": {"billing": "payments", "tech": None, "legal": {"scope": "contracts"}},
            },
        },
    },
    {
        "state": {"order": 17, "items": ["lamp", "desk"], "status": "late"},
        "questions": {
            "late": {
                "type": "noul",
                "instructions": "Is the order late?",
                "criteria": {"true": "past its date"},
            },
            "pick": {
                "type": "choice",
                "instructions": "Which item?",
                "criteria": {f"item {i}": None for i in range(30)},
            },
        },
    },
]


@pytest.fixture(scope="module", params=["readout", "standalone", "forms"])
def layout(request, decision_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-decision") / request.param
    cache = tmp_path_factory.getbasetemp() / "decision-kernel-cache"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            BUILD,
            str(HERE / "systemone_decision.flide"),
            str(decision_checkpoint(request.param)),
            str(out),
            str(cache),
        ],
        env=env,
        cwd=out.parent,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return request.param, out


def test_compiled_agrees_with_the_reference_executor(layout) -> None:
    from flidec.runtime.program import load

    _, artifact = layout
    got = load(artifact, "cuda").label_logits(REQUESTS)
    bf16 = load(artifact, "cpu", dtype="bf16").label_logits(REQUESTS)
    fp32 = load(artifact, "cpu", dtype="fp32").label_logits(REQUESTS)
    atol, _ = TOLERANCE[torch.bfloat16]
    for g, b, f in zip(got, bf16, fp32, strict=True):
        assert torch.equal(torch.isinf(g), torch.isinf(f))
        finite = torch.isfinite(f)
        assert (g - f)[finite].abs().max() <= (b - f)[finite].abs().max() + atol


def test_isolation_and_same_bits(layout) -> None:
    from flidec.runtime.program import load

    _, artifact = layout
    program = load(artifact, "cuda")
    together = program.label_logits(REQUESTS)
    for i, request in enumerate(REQUESTS):
        (alone,) = program.label_logits([request])
        assert torch.equal(alone, together[i]), "E1: packing changed a request"
    t = program.tree()
    walker = program.fmt.walker(t.tree, verify=True)
    bound = bound_from_plans(t.tree, program.fmt, REQUESTS, walker.plan)
    forked = program.run_stream(bound.stream)
    for r, plain in enumerate(plain_streams(bound)):
        alone = program.run_stream(plain)
        width = len(plain.meta.reads[0].labels)
        assert torch.equal(alone[0, :width], forked[r, :width]), f"E3: read {r} != its plain pass"
