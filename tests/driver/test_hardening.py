"""`flidec run` and `flidec compile` against hostile rows and surroundings (issue 23): each bad row gets its
own error, every other row its answer; every expected failure is one line and an exit code, never a traceback.

The row tests run the demo spec on the embedded demo model on the CPU (`flidec run SPEC`) and once on a cpu
artifact (`flidec run ARTIFACT`); the output tests put a stub in place of the model (`StubAnswerer`), since
they are about where results go, not what they say.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import flidec.compile
import flidec.run
from flidec.cli import EXIT_INTERNAL, EXIT_INTERRUPTED, main
from flidec.models import DEMO_MODEL
from flidec.run import Summary
from flidec.runtime.binder import Plan
from flidec.runtime.request import Request, Result

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO = EXAMPLES / "demo.flide"
GOOD = [line.encode() for line in (EXAMPLES / "demo.jsonl").read_text(encoding="utf-8").splitlines()[:2]]
NOUL = b'"questions": {"a": {"type": "noul", "instructions": "Is it urgent?"}}'
BAD_ROWS = [  # (line, the start of its one problem, after "line N: " where the reader found it)
    (b'{"state": "x\\ud800", ' + NOUL + b"}", "state: holds a lone surrogate \\ud800"),
    (b'{"state": "x", "questions": {"a\\udc00": {"type": "noul"}}}', 'questions["a\\udc00"]: the key holds'),
    (b'{"state": "x", "questions": {"a": {"type": "choice", "criteria": {"r\\ud800": null, "b": null}}}}',
     'questions.a.criteria["r\\ud800"]: the key holds a lone surrogate'),
    (b'{"state": ' + b"7" * 5000 + b", " + NOUL + b"}", "an integer of 5000 digits"),
    (b"[" * 100_000 + b"]" * 100_000, "arrays and objects nested too deeply"),
    (b'{"state": "x", "questions": {"a": {"type": "choice", "criteria": {"red": null, "red": "the colour", '
     b'"blue": null}}}}', "questions.a.criteria.red: duplicate key"),
    (b'{"state": "x", "questions": {"a": {"type": "noul"}, "a": {"type": "noul"}}}',
     "questions.a: duplicate key"),
    (b'{"state": "caf\xe9", ' + NOUL + b"}", "not UTF-8 (byte 0xe9 at byte 15)"),
    (b'{"state": NaN, ' + NOUL + b"}", "NaN is not JSON"),
    (b'{"state": "' + b"x" * (2048 * 128 + 1) + b'", ' + NOUL + b"}",  # the validation's: no line number
     "state: 262145 bytes, more than its bound"),
]


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def results_of(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]


def run_rows(tmp_path: Path, source: Path, lines: list[bytes], name: str) -> tuple[int, list[dict], dict]:
    out = tmp_path / name
    code = main(["run", str(source), "--instances", str(write_lines(tmp_path / f"{name}.jsonl", lines)),
                 "--out", str(out), "--quiet"])
    return code, results_of(out), json.loads((out / "summary.json").read_text())


def check_bad_rows(tmp_path: Path, source: Path, capsys) -> None:
    lines = [GOOD[0], *(row for row, _ in BAD_ROWS), GOOD[1]]
    code, results, summary = run_rows(tmp_path, source, lines, "mixed")
    assert code == 0
    assert "Traceback" not in capsys.readouterr().err
    _, alone, _ = run_rows(tmp_path, source, GOOD, "alone")
    assert len(results) == len(lines)
    assert [results[0], results[-1]] == alone
    for k, (_, start) in enumerate(BAD_ROWS, 1):
        (problem,) = results[k]["error"]["problems"]
        assert problem.startswith(start if start.startswith("state: 262145") else f"line {k + 1}: {start}")
    assert (summary["instances"], summary["answered"], summary["failed"]) == (len(lines), 2, len(BAD_ROWS))


def test_each_bad_row_gets_its_own_error_on_the_spec_path(tmp_path, capsys):
    check_bad_rows(tmp_path, DEMO, capsys)


def test_each_bad_row_gets_its_own_error_on_the_artifact_path(tmp_path, capsys):
    artifact = tmp_path / "demo.cpu"
    assert main(compile_argv(artifact)) == 0
    check_bad_rows(tmp_path, artifact, capsys)


# ---- output handling, with a stub in place of the model --------------------------------------------------


class StubAnswerer:
    """Answers an instance with its state; `fail_on` (a state) makes every batch holding it raise."""

    fail_on: object = None
    interrupt = False
    made = 0

    def __init__(self, *args: object):
        StubAnswerer.made += 1
        self.summary = Summary()
        self.program = SimpleNamespace(stats=SimpleNamespace(saved=None))  # no saved states

    def run_rows(self, tree: str | None = None) -> int:
        return 1 << 20

    def prepare(self, request: Request) -> Request:
        request.plan = Plan()  # the stub plans nothing: execute answers from the instance
        return request

    def execute(self, requests: list[Request]) -> None:
        if StubAnswerer.interrupt:
            raise KeyboardInterrupt
        states = [r.instance.get("state") if isinstance(r.instance, dict) else None for r in requests]
        if StubAnswerer.fail_on in states:
            raise ValueError("the stub's bad batch")
        for r, s in zip(requests, states, strict=True):
            r.result = Result({"state": s})


@pytest.fixture
def stub(monkeypatch):
    monkeypatch.setattr(flidec.run, "Answerer", StubAnswerer)
    monkeypatch.setattr(StubAnswerer, "fail_on", None)
    monkeypatch.setattr(StubAnswerer, "interrupt", False)
    monkeypatch.setattr(StubAnswerer, "made", 0)
    return StubAnswerer


def rows(*states: str) -> list[bytes]:
    return [json.dumps({"state": s, "questions": {"a": {"type": "noul"}}}).encode() for s in states]


def run_argv(tmp_path: Path, out: Path, lines: list[bytes], *extra: str) -> list[str]:
    src = write_lines(tmp_path / "in.jsonl", lines)
    return ["run", str(DEMO), "--model", str(DEMO_MODEL), "--instances", str(src), "--out", str(out),
            "--quiet", *extra]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if not line.startswith("flidec: no --model")]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_a_batch_that_fails_is_answered_row_by_row(tmp_path, stub):
    stub.fail_on = "b"
    out = tmp_path / "out"
    assert main(run_argv(tmp_path, out, rows("a", "b", "c"))) == 0
    a, b, c = results_of(out)
    assert a == {"state": "a"} and c == {"state": "c"}
    (problem,) = b["error"]["problems"]
    assert b["error"]["type"] == "ValueError"
    assert problem.startswith("the run raised on this instance alone: the stub's bad batch (if the "
                              "instance is valid, this is a flidec bug")


def test_an_interrupted_run_leaves_the_old_results_intact(tmp_path, stub, capsys):
    out = tmp_path / "out"
    assert main(run_argv(tmp_path, out, rows("old"))) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    stub.interrupt = True
    assert main(run_argv(tmp_path, out, rows("new"))) == EXIT_INTERRUPTED
    assert "interrupted" in one_error_line(capsys)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no .partial, nothing half-replaced


def test_a_new_run_replaces_results_and_clears_the_old_partial(tmp_path, stub):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl.partial").write_text("stale\n")
    (out / "notes.txt").write_text("mine\n")
    assert main(run_argv(tmp_path, out, rows("x"))) == 0
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "results.jsonl", "summary.json"]
    assert results_of(out) == [{"state": "x"}]
    assert not [p for p in tmp_path.iterdir() if "flidec-partial" in p.name]


def test_out_that_is_a_file_is_refused_before_loading(tmp_path, stub, capsys):
    out = tmp_path / "taken"
    out.write_text("x")
    assert main(run_argv(tmp_path, out, rows("x"))) == 1
    assert one_error_line(capsys) == (f"flidec: error: --out {out}: exists and is not a directory; name a "
                                      "directory (created if missing)")
    assert stub.made == 0


def test_out_on_a_read_only_filesystem_is_one_line(tmp_path, stub, monkeypatch, capsys):
    def read_only(parent: Path, name: str) -> Path:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(parent))

    monkeypatch.setattr(flidec.run, "staging_dir", read_only)
    out = tmp_path / "out"
    assert main(run_argv(tmp_path, out, rows("x"))) == 1
    assert one_error_line(capsys) == (f"flidec: error: --out {out}: cannot write there (Read-only file "
                                      "system); choose a writable directory")
    assert stub.made == 0


def test_instances_inside_the_out_results_are_refused(tmp_path, stub, capsys):
    out = tmp_path / "out"
    assert main(run_argv(tmp_path, out, rows("x"))) == 0
    argv = run_argv(tmp_path, out, rows("x"))
    argv[argv.index("--instances") + 1] = str(out / "results.jsonl")
    assert main(argv) == 1
    assert "is this run's own output" in one_error_line(capsys)
    assert results_of(out) == [{"state": "x"}]


def test_a_directory_that_is_not_an_artifact_says_so(tmp_path, capsys):
    half = tmp_path / "half"
    (half / "kernels").mkdir(parents=True)
    argv = ["run", str(half), "--instances", str(write_lines(tmp_path / "i.jsonl", GOOD)), "--out",
            str(tmp_path / "o")]
    assert main(argv) == 1
    assert "is a directory but not an artifact (no manifest.json)" in one_error_line(capsys)


def test_devices(tmp_path, stub, monkeypatch, capsys):
    with pytest.raises(SystemExit) as e:
        main(run_argv(tmp_path, tmp_path / "o", rows("x"), "--device", "tpu"))
    assert e.value.code == 2
    assert "'tpu' is not a device flidec runs on: use cpu, cuda or cuda:N" in capsys.readouterr().err
    monkeypatch.setattr(flidec.run.torch.cuda, "is_available", lambda: False)
    assert main(run_argv(tmp_path, tmp_path / "o", rows("x"), "--device", "cuda")) == 1
    assert "--device cuda: no CUDA device is available here" in one_error_line(capsys)
    assert stub.made == 0


def test_an_unexpected_exception_is_reported_as_a_bug(tmp_path, monkeypatch, capsys):
    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(flidec.run, "run", broken)
    assert main(run_argv(tmp_path, tmp_path / "o", rows("x"))) == EXIT_INTERNAL
    line = one_error_line(capsys)
    assert line.startswith("flidec: internal error: ZeroDivisionError: division by zero; this is a bug in "
                           "flidec; please report it with the command and input")


def test_an_os_error_is_one_line(tmp_path, monkeypatch, capsys):
    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/somewhere/results.jsonl")

    monkeypatch.setattr(flidec.run, "run", full)
    assert main(run_argv(tmp_path, tmp_path / "o", rows("x"))) == 1
    assert one_error_line(capsys) == "flidec: error: /somewhere/results.jsonl: No space left on device"


# ---- compile -o -------------------------------------------------------------------------------------------


def compile_argv(out: Path) -> list[str]:
    return ["compile", str(DEMO), "--model", str(DEMO_MODEL), "--target", "cpu", "-o", str(out)]


def test_compile_out_is_checked_first(tmp_path, monkeypatch, capsys):
    def never(*args: object) -> None:
        raise AssertionError("compiled")

    monkeypatch.setattr(flidec.compile, "_compile_into", never)
    taken = tmp_path / "file"
    taken.write_text("x")
    assert main(compile_argv(taken)) == 1
    assert "exists and is not a directory" in one_error_line(capsys)
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    assert main(compile_argv(full)) == 1
    assert "the output directory is not empty" in one_error_line(capsys)


def test_a_killed_compile_leaves_nothing_behind(tmp_path, monkeypatch, capsys):
    real = flidec.compile._compile_into

    def interrupted(out: Path, *args: object) -> None:
        real(out, *args)  # the whole artifact written into the staging directory, then the interrupt
        raise KeyboardInterrupt

    monkeypatch.setattr(flidec.compile, "_compile_into", interrupted)
    out = tmp_path / "art"
    assert main(compile_argv(out)) == EXIT_INTERRUPTED
    assert list(tmp_path.iterdir()) == []


def test_a_compile_lands_whole_with_the_usual_mode(tmp_path):
    out = tmp_path / "art"
    out.mkdir()  # an empty directory is fine
    assert main(compile_argv(out)) == 0
    assert (out / "manifest.json").is_file() and [p.name for p in tmp_path.iterdir()] == ["art"]
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask
