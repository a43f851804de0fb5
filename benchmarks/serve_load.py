"""Load on a System One server (flidec serve, or a peer such as flide serve): many clients, the same rows.

Consumes a URL and a JSONL file of request bodies; sends each row once alone (the reference answers), then
the rows again from `--clients` threads at once (`--requests` in all, rows in turn), and, with `--burst N`,
N requests at the same instant to see the server refuse past its queue. Produces a JSON summary: requests a
second, questions a second, p50 / p99 / max latency, statuses (errors by status), how many answers differ
from the same row sent alone (E1: 0 for flidec), and for the burst how many refusals carried Retry-After and
the longest any request waited; with `--max-s`, nothing is sent after that many seconds (the summary
counts what was: `sent`, `alone_sent`; the burst is left out). Standard library only, so it runs on a box
with nothing but Python.

    python benchmarks/serve_load.py http://127.0.0.1:8000 --rows rows.jsonl --clients 64 --requests 2048
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any


class Client:
    """One keep-alive connection (reopened after an error), as a load client holds one."""

    def __init__(self, url: str, key: str | None, timeout: float):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.headers = {"Content-Type": "application/json"}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"
        self.timeout = timeout
        self.conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes, float]:
        start = time.perf_counter()
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request("POST", path, body=body, headers=self.headers)
                r = self.conn.getresponse()
                data = r.read()
                return r.status, {k.lower(): v for k, v in r.getheaders()}, data, time.perf_counter() - start
            except (ConnectionError, http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    return 0, {}, b"", time.perf_counter() - start
        raise AssertionError("unreachable")


def _questions(row: dict) -> int:
    q = row.get("questions")
    return len(q) if isinstance(q, (dict, list)) else 0


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run_load(url: str, rows: list[dict], *, clients: int, requests: int, path: str = "/v1/systemone",
             key: str | None = None, timeout: float = 300.0, check_alone: bool = True,
             max_s: float | None = None) -> dict[str, Any]:
    """`max_s`: no request is sent after this many seconds (rows not sent alone by then are not checked,
    and the load stops short: `sent` says how many it sent)."""
    stop_at = time.monotonic() + max_s if max_s else float("inf")
    bodies = [json.dumps(r, ensure_ascii=False).encode() for r in rows]
    alone: list[Any] = [None] * len(rows)
    if check_alone:
        c = Client(url, key, timeout)
        for i, b in enumerate(bodies):
            if time.monotonic() > stop_at:
                break
            status, _, data, _ = c.post(path, b)
            alone[i] = json.loads(data) if status == 200 else ("status", status)
    lock = threading.Lock()
    next_index = [0]
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    differ: list[int] = []
    questions = [0]
    barrier = threading.Barrier(clients)

    def client() -> None:
        c = Client(url, key, timeout)
        barrier.wait()
        while True:
            with lock:
                n = next_index[0]
                if n >= requests or time.monotonic() > stop_at:
                    return
                next_index[0] += 1
            i = n % len(rows)
            status, _, data, seconds = c.post(path, bodies[i])
            with lock:
                statuses[status] += 1
                latencies.append(seconds)
                if status == 200:
                    questions[0] += _questions(rows[i])
                    if check_alone and alone[i] is not None and json.loads(data) != alone[i]:
                        differ.append(i)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ok = statuses.get(200, 0)
    return {"url": url, "path": path, "clients": clients, "requests": requests, "rows": len(rows),
            "sent": sum(statuses.values()), "alone_sent": sum(a is not None for a in alone),
            "wall_s": round(wall, 3), "requests_per_s": round(ok / wall, 2),
            "questions_per_s": round(questions[0] / wall, 2),
            "p50_ms": round(_pct(latencies, 50) * 1000, 2), "p99_ms": round(_pct(latencies, 99) * 1000, 2),
            "max_ms": round(max(latencies, default=0.0) * 1000, 2),
            "mean_ms": round(statistics.fmean(latencies) * 1000, 2) if latencies else None,
            "statuses": {str(k): v for k, v in sorted(statuses.items())},
            "errors": sum(statuses.values()) - ok,
            "checked_alone": check_alone, "differ_from_alone": len(differ),
            "alone_errors": sum(1 for a in alone if isinstance(a, tuple))}


def run_burst(url: str, rows: list[dict], n: int, *, path: str = "/v1/systemone", key: str | None = None,
              timeout: float = 300.0) -> dict[str, Any]:
    """n requests released at one instant: past the server's queue they should be refused at once (429 or
    503 with Retry-After), and none should wait past the server's deadline."""
    bodies = [json.dumps(rows[i % len(rows)], ensure_ascii=False).encode() for i in range(n)]
    barrier = threading.Barrier(n)
    out: list[tuple[int, dict[str, str], float]] = [(0, {}, 0.0)] * n

    def one(i: int) -> None:
        c = Client(url, key, timeout)
        barrier.wait()
        status, headers, _, seconds = c.post(path, bodies[i])
        out[i] = (status, headers, seconds)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    refused = [(s, h) for s, h, _ in out if s in (429, 503)]
    return {"burst": n, "statuses": {str(k): v for k, v in sorted(Counter(s for s, _, _ in out).items())},
            "refused": len(refused),
            "refused_with_retry_after": sum(1 for _, h in refused if "retry-after" in h),
            "max_wait_ms": round(max(s for _, _, s in out) * 1000, 2),
            "max_refusal_ms": round(max((s for st, _, s in out if st in (429, 503)), default=0.0) * 1000, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url")
    p.add_argument("--rows", required=True, type=Path, help="JSONL: one request body a line")
    p.add_argument("--path", default="/v1/systemone")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=1024)
    p.add_argument("--key")
    p.add_argument("--burst", type=int, default=0, help="also release this many requests at one instant")
    p.add_argument("--no-check", action="store_true", help="skip the answers-alone comparison")
    p.add_argument("--max-s", type=float, help="send nothing after this many seconds (a partial summary)")
    p.add_argument("--out", type=Path, help="write the summary here too")
    a = p.parse_args(argv)
    rows = [json.loads(line) for line in a.rows.read_text(encoding="utf-8").splitlines() if line.strip()]
    start = time.monotonic()
    summary = run_load(a.url, rows, clients=a.clients, requests=a.requests, path=a.path, key=a.key,
                       check_alone=not a.no_check, max_s=a.max_s)
    if a.burst and not (a.max_s and time.monotonic() - start > a.max_s):
        summary["burst"] = run_burst(a.url, rows, a.burst, path=a.path, key=a.key)
    text = json.dumps(summary, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n", encoding="utf-8")
    return 0 if summary["errors"] == 0 and summary["differ_from_alone"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
