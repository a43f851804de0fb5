"""A mutation fuzz of instance rows (issue 23): mutated JSON lines between good rows, through `flidec.run.run`
on the demo spec and the embedded demo model (CPU, the spec reference path). Whatever the mutations, the run
returns, every line gets exactly one record in order, and every good row's answer equals its answer alone.

The model is loaded once (the module's Answerer stands in for every run's); a few hundred examples run by
default, a few thousand under `-m slow`.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flidec.run
from flidec.frontend import load_spec
from flidec.models import DEMO_MODEL

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO = EXAMPLES / "demo.flide"
POOL = [line.encode() for line in (EXAMPLES / "demo.jsonl").read_text(encoding="utf-8").splitlines()[:4]]
# What a mutation may splice in: escapes that decode to lone surrogates or NUL, JSON structure, huge and odd
# numbers, bytes that are not UTF-8 (a lone continuation byte, a truncated sequence, an encoded surrogate).
PIECES = [b"\\ud800", b"\\udfff", b"\\ud83d\\ude00", b"\\u0000", b'"', b"\\", b"{", b"}", b"[", b"]", b",",
          b":", b"9" * 5000, b"-" + b"1" * 4001, b"1e999", b"NaN", b"-Infinity", b"null", b"true", b"\x80",
          b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xef\xbb\xbf", b'"state": "dup", ', b'"questions": {}, ',
          b"\t", b"\r"]


@pytest.fixture(scope="module")
def answerer() -> flidec.run.Answerer:
    spec, _ = load_spec(DEMO)
    tree = flidec.run.pick_tree(spec, None)
    return flidec.run.Answerer(DEMO, tree.name, str(DEMO_MODEL), "cpu", "fp32", None)


def run_lines(answerer: flidec.run.Answerer, lines: list[bytes]) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(flidec.run, "Answerer", lambda *a: answerer):
        src = Path(tmp) / "in.jsonl"
        src.write_bytes(b"\n".join(lines) + b"\n")
        summary = flidec.run.run(str(DEMO), str(DEMO_MODEL), str(src), str(Path(tmp) / "out"), progress=False)
        text = (Path(tmp) / "out" / "results.jsonl").read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines()]
    assert summary.instances == len(records) == summary.answered + summary.failed
    return records


@pytest.fixture(scope="module")
def alone(answerer: flidec.run.Answerer) -> list[dict]:
    """Each pool row's answer in a run of its own."""
    return [run_lines(answerer, [row])[0] for row in POOL]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    row = draw(st.sampled_from(POOL))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["replace", "delete", "insert", "splice", "nest", "truncate"]))
        i = draw(st.integers(0, len(row)))
        if kind == "replace" and i < len(row):
            row = row[:i] + bytes([draw(st.integers(0, 255))]) + row[i + 1:]
        elif kind == "delete":
            row = row[:i] + row[i + draw(st.integers(1, 40)):]
        elif kind == "insert":
            row = row[:i] + draw(st.binary(min_size=1, max_size=8)) + row[i:]
        elif kind == "splice":
            row = row[:i] + draw(st.sampled_from(PIECES)) + row[i:]
        elif kind == "nest":
            n = draw(st.sampled_from([1, 127, 128, 129, 1000, 100_000]))
            row = b"[" * n + row + b"]" * n if draw(st.booleans()) else b'{"state": ' * n + row + b"}" * n
        else:
            row = row[:i]
    row = row.replace(b"\n", b" ")  # one line stays one line
    return row if row.strip() else b"x"


def check_rows(answerer: flidec.run.Answerer, alone: list[dict], data: st.DataObject) -> None:
    lines: list[bytes] = []
    good: dict[int, int] = {}  # line index -> pool index
    for _ in range(data.draw(st.integers(1, 2))):  # few rows an example: the model's passes are the cost
        k = data.draw(st.integers(0, len(POOL) - 1))
        good[len(lines)] = k
        lines.append(POOL[k])
        lines.append(data.draw(mutated()))
    records = run_lines(answerer, lines)
    assert len(records) == len(lines)
    for i, record in enumerate(records):
        if i in good:
            assert record == alone[good[i]]
        elif "error" in record:
            problems = record["error"]["problems"]
            assert problems and all(isinstance(p, str) and p for p in problems)
            assert not any(p.startswith("internal error") for p in problems), problems
        else:
            assert isinstance(record["answers"], dict) and record["answers"]  # a mutation that still fits


SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW_OK)
@given(data=st.data())
def test_mutated_rows_between_good_rows(answerer, alone, data):
    check_rows(answerer, alone, data)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=SLOW_OK)
@given(data=st.data())
def test_mutated_rows_between_good_rows_many(answerer, alone, data):
    check_rows(answerer, alone, data)
