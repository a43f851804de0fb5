"""benchmarks/serve_load.py, the load client the H200 figures come from, against the cpu server: no errors,
every answer equal to its row sent alone, and a burst past a one-request queue refused with Retry-After."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROWS = [{"state": f"Ticket {i}: I was charged twice for invoice {i}.", "questions": {
    "r": {"type": "noul", "instructions": "Refund?"},
    "t": {"type": "choice", "criteria": {"billing": None, "tech": None}}}} for i in range(3)]


def _load_module():
    spec = importlib.util.spec_from_file_location("serve_load", ROOT / "benchmarks" / "serve_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_load_and_burst(serve_live, program) -> None:
    load = _load_module()
    server = serve_live(lambda: program)
    summary = load.run_load(server.url, ROWS, clients=6, requests=24)
    assert summary["errors"] == 0 and summary["differ_from_alone"] == 0 and summary["alone_errors"] == 0
    assert summary["statuses"] == {"200": 24} and summary["questions_per_s"] > 0
    assert summary["p50_ms"] <= summary["p99_ms"] <= summary["max_ms"]
    small = serve_live(lambda: program, max_queue=1, max_batch=1)
    burst = load.run_burst(small.url, ROWS, 12)
    assert set(burst["statuses"]) <= {"200", "429"}
    assert burst["refused"] == burst["refused_with_retry_after"]
