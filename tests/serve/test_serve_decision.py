"""flidec serve over a decision-format artifact: /v1/systemone answers with the checkpoint's own reading
(readout head, codes, temperatures), the Program's answers exactly; a question the format refuses is a 422
naming it, never a 5xx."""

from __future__ import annotations

from pathlib import Path

import pytest

from flidec.compile import compile_artifact
from flidec.testing.make_checkpoint import make_checkpoint

SPEC = Path(__file__).resolve().parents[1] / "formats" / "systemone_decision.flide"
REQUEST = {"model": "jev-latest", "state": "Order 17 is late and the customer wants a refund.",
           "questions": {"refund": {"type": "noul", "instructions": "Is a refund asked for?"},
                         "team": {"type": "choice", "instructions": "Which team?",
                                  "criteria": {"billing": "payments", "shipping": None}}}}


@pytest.fixture(scope="module")
def decision_program(tmp_path_factory):
    from flidec.runtime.program import load

    base = tmp_path_factory.mktemp("serve-decision")
    ckpt = make_checkpoint(base / "ckpt", "tiny", seed=0, decision="forms").path
    compile_artifact(SPEC, ckpt, "cpu", base / "art")
    return load(base / "art", "cpu", served_name="decider")


def test_systemone_reads_the_checkpoint_s_format(serve_live, decision_program) -> None:
    live = serve_live(lambda: decision_program)
    reply = live.post("/v1/systemone", REQUEST)
    assert reply.status == 200, reply.body
    (want,) = decision_program.run([{k: v for k, v in REQUEST.items() if k != "model"}])
    assert reply.json["answers"] == want["answers"]
    refused = live.post("/v1/systemone", {**REQUEST, "questions": {
        "how": {"type": "score", "instructions": "How bad?", "criteria": ["mild", "bad"]}}})
    assert refused.status == 422, refused.body
    assert "score" in refused.body.decode() and "how" in refused.body.decode()
