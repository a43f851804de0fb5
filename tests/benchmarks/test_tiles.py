"""The tile sweeps' shared parts and both scripts end to end on the CPU interpreter (tiny forest: the
checks run, the timing does not)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.tiles import parse_variant

ROOT = Path(__file__).resolve().parents[2]


def test_parse_variant() -> None:
    assert parse_variant("") == {}
    assert parse_variant("block_m=128, dot=tf32x3") == {"block_m": 128, "dot": "tf32x3"}


@pytest.mark.parametrize("script", ["attention_tiles.py", "gdn_tiles.py"])
def test_sweep_checks_each_variant_in_its_own_process(script, tmp_path) -> None:
    variant = "block_m=128" if script == "attention_tiles.py" else "prep_warps=8"
    out = tmp_path / "tiles.json"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    heads = "4,2,32" if script == "attention_tiles.py" else "2,4,16"  # the tiny checkpoint's shapes
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--forests", "tiny",
                          "--heads", heads, "--variants", f"{variant};no_such_field=1", "--out", str(out)],
                         env=env, capture_output=True, text=True, timeout=600, check=True)
    rows = json.loads(out.read_text())
    assert [r["variant"] for r in rows] == ["default", variant, "no_such_field=1"]
    for r in rows[:2]:
        assert r["close"] and r["fork_equals_plain"] and r["max_abs_err"] < 0.01, r
    assert "no_such_field" in rows[2]["error"]  # a failing variant is reported, not fatal
    assert len(run.stdout.splitlines()) == 3


@pytest.mark.parametrize("script", ["attention_tiles.py", "gdn_tiles.py"])
def test_sweep_sizes_tables_as_a_bucket_of_many_segments(script, tmp_path) -> None:
    """--bucket-segments: the launch walks a bucket's padding work as well, and the checks still hold."""
    out = tmp_path / "tiles.json"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    heads = "4,2,32" if script == "attention_tiles.py" else "2,4,16"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--forests", "tiny", "--heads", heads,
                    "--bucket-segments", "9", "--out", str(out)], env=env, capture_output=True, text=True,
                   timeout=600, check=True)
    (row,) = json.loads(out.read_text())
    assert row["bucket_segments"] == 9
    assert row["close"] and row["fork_equals_plain"] and row["max_abs_err"] < 0.01, row
