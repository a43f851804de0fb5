"""Faults under load: `flidec serve` (its own process, the cpu artifact) taking SIGTERM while clients send
requests answers every request its app accepted, with the answer that request gets alone (200) or a 503
with Retry-After, never a half answer or a 5xx of another kind; what it never accepted fails at the socket
(refused or reset before any response byte), which a client may send again; the process exits 0."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

WAIT = 120
ROOT = Path(__file__).resolve().parents[2]


def body(i: int) -> dict:
    return {"state": f"Ticket {i % 5}: I was charged twice for invoice {i % 5}, and the refund never came.",
            "questions": {"r": {"type": "noul", "instructions": "Refund?"}}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, payload: dict) -> tuple[int, dict, dict] | str:
    """(status, headers, JSON body), or the name of the socket error when no response came."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request("POST", "/v1/systemone", json.dumps(payload), {"Content-Type": "application/json",
                                                                    "Connection": "close"})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(r.read())
    except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected) as e:
        return type(e).__name__
    finally:
        conn.close()


def test_sigterm_under_load_answers_or_refuses_every_request(systemone_cpu_artifact, tmp_path) -> None:
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 (closed below, after the process)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "flidec.cli", "serve", str(systemone_cpu_artifact),
                             "--device", "cpu", "--port", str(port), "--threads", "1",
                             "--log-level", "warning"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + WAIT
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the server never became ready"
            time.sleep(0.1)
        alone = {i: post(port, body(i)) for i in range(5)}
        assert all(a[0] == 200 for a in alone.values() if not isinstance(a, str)), alone
        got: list[tuple[int, tuple[int, dict, dict] | str, bool]] = []
        termed = threading.Event()
        lock = threading.Lock()

        def client(c: int) -> None:
            for k in range(200):
                i = c * 1000 + k
                after = termed.is_set()
                reply = post(port, body(i))
                with lock:
                    got.append((i, reply, after))
                if isinstance(reply, str) or (after and reply[0] != 200):
                    return

        threads = [threading.Thread(target=client, args=(c,)) for c in range(8)]
        for t in threads:
            t.start()
        while len(got) < 24:
            time.sleep(0.01)
        termed.set()
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(WAIT)
        assert proc.wait(WAIT) == 0, (tmp_path / "serve.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    statuses = [r if isinstance(r, str) else r[0] for _, r, _ in got]
    assert set(statuses) <= {200, 503, "ConnectionRefusedError", "ConnectionResetError", "RemoteDisconnected"}
    for i, reply, _ in got:
        if isinstance(reply, str):
            continue
        status, headers, payload = reply
        if status == 200:
            want = alone[i % 5][2]
            assert payload == want, "an answer under load differs from its request alone"
        else:
            assert int(headers["retry-after"]) >= 1 and payload["detail"]["error_type"] == "overloaded_error"
    assert statuses.count(200) >= 24
