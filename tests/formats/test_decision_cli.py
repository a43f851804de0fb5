"""The decision format at the command line: compile picks the checkpoint's decision_config.json up and says
so, `--format FILE` reads a description from elsewhere, `--format next_token` keeps the generic reading,
inspect prints the format and where questions fork, and a foreign decision_config.json is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from flidec.cli import main

SPEC = Path(__file__).resolve().parent / "systemone_decision.flide"


def test_compile_inspect_and_the_format_flag(decision_checkpoint, tmp_path, capsys):
    ckpt = decision_checkpoint("standalone")
    assert (
        main(["compile", str(SPEC), "--model", str(ckpt), "--target", "cpu", "-o", str(tmp_path / "a")]) == 0
    )
    assert "read as its decision_config.json defines" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "a")]) == 0
    shown = capsys.readouterr().out
    assert "format   decision, from decision_config.json: a raw prompt; head output head" in shown
    assert "state cut to 48 tokens" in shown and "then fork" in shown

    plain = tmp_path / "plain"  # the same checkpoint without its decision_config.json: --format FILE
    shutil.copytree(ckpt, plain)
    (plain / "decision_config.json").rename(tmp_path / "described.json")
    out = tmp_path / "b"
    assert (
        main(
            [
                "compile",
                str(SPEC),
                "--model",
                str(plain),
                "--target",
                "cpu",
                "-o",
                str(out),
                "--format",
                str(tmp_path / "described.json"),
            ]
        )
        == 0
    )
    described = json.loads((out / "format.json").read_text())
    assert described.pop("source") == "described.json"  # a file's name, never a path: artifacts are portable
    from_checkpoint = json.loads((tmp_path / "a" / "format.json").read_text())
    assert from_checkpoint.pop("source") == "decision_config.json" and described == from_checkpoint

    assert (
        main(
            [
                "compile",
                str(SPEC),
                "--model",
                str(ckpt),
                "--target",
                "cpu",
                "-o",
                str(tmp_path / "c"),
                "--format",
                "next_token",
            ]
        )
        == 0
    )
    assert not (tmp_path / "c" / "format.json").exists()


def test_a_foreign_decision_config_is_refused(decision_checkpoint, tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(decision_checkpoint("standalone"), ckpt)
    (ckpt / "decision_config.json").write_text(json.dumps({"format_version": 1, "codes": ["A", "B"]}))
    assert (
        main(["compile", str(SPEC), "--model", str(ckpt), "--target", "cpu", "-o", str(tmp_path / "a")]) != 0
    )
    err = capsys.readouterr().err
    assert "does not declare" in err and "--format next_token" in err
    assert not (tmp_path / "a").exists()
