"""`flidec run`: spec + model + JSON lines -> results.jsonl in input order, errors per line, a summary."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from flidec.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_cli(tmp_path: Path, model: Path, lines: list[str], *extra: str, gz: bool = False) -> list[dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / ("in.jsonl.gz" if gz else "in.jsonl")
    data = "\n".join(lines) + "\n"
    if gz:
        with gzip.open(src, "wt", encoding="utf-8") as f:
            f.write(data)
    else:
        src.write_text(data, encoding="utf-8")
    out = tmp_path / "out"
    argv = ["run", str(EXAMPLES / "systemone.flide"), "--model", str(model), "--instances", str(src),
            "--out", str(out), "--quiet", *extra]
    assert main(argv) == 0
    return [json.loads(x) for x in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]


def test_sample_instances_answer_in_order_with_per_line_errors(tmp_path, tiny_checkpoint):
    lines = (EXAMPLES / "systemone.jsonl").read_text(encoding="utf-8").splitlines()
    results = run_cli(tmp_path, tiny_checkpoint, lines[:2] + ["{not json"] + lines[2:],
                      "--served-name", "jev-latest")
    assert len(results) == 5
    first, second, bad, empty_state, no_questions = results
    assert first["model"] == "jev-latest" and list(first["answers"]) == ["refund", "topic", "urgency"]
    assert set(first["answers"]["topic"]["probabilities"]) == {"billing", "technical", "account"}
    assert set(second["answers"]["cause"]["probabilities"]) == {
        "a recent deploy", "a traffic spike", "a database outage"}
    assert sum(second["answers"]["cause"]["probabilities"].values()) == pytest.approx(1.0)
    assert bad["error"]["problems"][0].startswith("line 3: not JSON")
    assert empty_state["answers"]["empty"]["type"] == "noul"
    assert no_questions["error"]["problems"] == ["questions: 0 questions, expected 1 to 64"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    counts = (summary["instances"], summary["answered"], summary["failed"], summary["questions"])
    assert counts == (5, 3, 2, 6)


def test_packing_never_changes_answers_and_gzip_input_reads(tmp_path, tiny_checkpoint):
    lines = (EXAMPLES / "systemone.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    alone = [run_cli(tmp_path / f"a{i}", tiny_checkpoint, [line])[0] for i, line in enumerate(lines)]
    packed = run_cli(tmp_path / "b", tiny_checkpoint, lines, gz=True)
    assert alone == packed


def test_bad_inputs_are_errors_not_tracebacks(tmp_path, tiny_checkpoint, capsys):
    argv = ["run", str(EXAMPLES / "systemone.flide"), "--model", str(tmp_path / "nope"), "--instances",
            str(EXAMPLES / "systemone.jsonl"), "--out", str(tmp_path / "o")]
    assert main(argv) == 1
    assert "flidec: error:" in capsys.readouterr().err
    argv[3] = str(tiny_checkpoint)
    argv[5] = str(tmp_path / "missing.jsonl")
    assert main(argv) == 1
    assert "cannot read instances" in capsys.readouterr().err
