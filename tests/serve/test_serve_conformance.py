"""`flidec serve` as a user runs it, checked by the public conformance suite: the CLI serves the systemone cpu
artifact in a process of its own (GET /health 503 while loading, then 200), `jevcompat test URL` passes
every MUST and every SHOULD without keys and with `--key` (the auth requirements apply only then), and
SIGTERM stops the server cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

WAIT = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None  # not listening yet


def _serve(artifact: Path, *flags: str) -> tuple[subprocess.Popen, str, list[int | None]]:
    """`flidec serve` in a process of its own, ready; the statuses /health gave on the way."""
    port = _free_port()
    cmd = [sys.executable, "-m", "flidec.cli", "serve", str(artifact), "--port", str(port), "--device", "cpu",
           "--threads", "1", "--served-name", "flidec-tiny", "--log-level", "warning", *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    seen: list[int | None] = []
    deadline = time.monotonic() + WAIT
    while True:
        status = _health(url)
        if not seen or seen[-1] != status:
            seen.append(status)
        if status == 200:
            return proc, url, seen
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"flidec serve did not become ready: {proc.communicate()[0][-3000:]}")
        time.sleep(0.05)


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("flidec serve did not stop on SIGTERM") from None
    assert proc.returncode == 0, out[-3000:]
    return out


def _jevcompat(url: str, report: Path, *flags: str) -> dict:
    cmd = [sys.executable, "-m", "jevcompat.cli", "test", url, "--json", str(report), "--timeout", "60",
           *flags]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False,
                         env={**os.environ, "NO_COLOR": "1"})
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    out = json.loads(report.read_text(encoding="utf-8"))
    out["line"] = summary
    return out


@pytest.mark.parametrize("keyed", [False, True], ids=["keyless", "keyed"])
def test_jevcompat_passes_every_must_and_should(systemone_cpu_artifact, tmp_path, keyed) -> None:
    flags: list[str] = []
    if keyed:
        (tmp_path / "keys").write_text("k-jevcompat-1\n")
        flags = ["--api-key-file", str(tmp_path / "keys")]
    proc, url, seen = _serve(systemone_cpu_artifact, *flags)
    try:
        assert set(seen) <= {None, 503, 200}  # not listening, loading, ready
        report = _jevcompat(url, tmp_path / "r.json", *(["--key", "k-jevcompat-1"] if keyed else []))
    finally:
        _stop(proc)
    s = report["summary"]
    assert s["verdict"] == "conformant" and not s["untested_musts"], report["line"]
    assert s["MUST"] == {"passed": 32, "failed": 0, "skipped": 1, "tested": 32}  # one of the two auth MUSTs
    should = 15 if keyed else 13  # auth.missing and auth.invalid apply with a key
    assert s["SHOULD"]["failed"] == 0 and s["SHOULD"]["passed"] == should, report["line"]
    assert report["line"] == f"conformant to spec 0.1: MUST 32/32, SHOULD {should}/{should}"
    assert not report["inconclusive"] and not report["case_errors"]
