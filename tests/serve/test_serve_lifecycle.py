"""The server's life around the queue: 503 while loading, 429 with Retry-After past the queue, 503 at the
request deadline (no client waits past it), a request over the artifact's bounds failing alone in a shared
run, a failed load, and a graceful shutdown that finishes what is in flight. A gated stand-in holds the
Program's runs so requests wait together; tests assert statuses and orders, and wall time only as upper
bounds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

WAIT = 60
GOOD = {"model": "jev-latest", "state": "I was charged twice.",
        "questions": {"q": {"type": "noul", "instructions": "Refund?"}}}


class Gated:
    """The Program with its runs held at a gate until `release()`; every other attribute is the Program's."""

    def __init__(self, program: Any):
        self.program = program
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.batches: list[int] = []

    def release(self) -> None:
        self.gate.set()

    def execute(self, requests: Sequence[Any]) -> None:
        self.entered.set()
        assert self.gate.wait(WAIT), "the test never released the gate"
        self.batches.append(len(requests))
        self.program.execute(requests)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.program, name)


def test_loading_answers_503_with_retry_after_then_ready(serve_live, program) -> None:
    loaded = threading.Event()

    def slow() -> Any:
        assert loaded.wait(WAIT)
        return program

    server = serve_live(slow, ready=False)
    health = server.get("/health")
    assert health.status == 503 and health.json == {"status": "loading"} and health.headers["retry-after"]
    busy = server.post("/v1/systemone", GOOD)
    assert busy.status == 503 and busy.json["detail"]["error_type"] == "overloaded_error"
    assert int(busy.headers["retry-after"]) >= 1
    assert "flidec_ready 0.0" in server.get("/metrics").body.decode()
    loaded.set()
    deadline = time.monotonic() + WAIT
    while server.get("/health").status != 200:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert server.post("/v1/systemone", GOOD).status == 200


def test_a_failed_load_is_reported_by_health(serve_live) -> None:
    def broken() -> Any:
        raise RuntimeError("no such artifact")

    server = serve_live(broken, ready=False)
    server.service.loaded.wait(WAIT)
    health = server.get("/health")
    assert health.status == 503 and health.json["status"] == "failed" and "no such" in health.json["x_error"]
    assert server.post("/v1/systemone", GOOD).status == 503


def test_past_the_queue_requests_get_429_with_retry_after(serve_live, program) -> None:
    gated = Gated(program)
    server = serve_live(lambda: gated, max_queue=1, max_batch=1)
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(server.post, "/v1/systemone", GOOD)
        assert gated.entered.wait(WAIT)
        queued = pool.submit(server.post, "/v1/systemone", GOOD)
        deadline = time.monotonic() + WAIT
        while server.service.queue.stats().depth < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        refused = server.post("/v1/systemone", GOOD)
        assert refused.status == 429 and refused.json["detail"]["error_type"] == "rate_limit_error"
        assert int(refused.headers["retry-after"]) >= 1 and int(refused.headers["retry-after-ms"]) >= 1
        gated.release()
        assert running.result(WAIT).status == 200 and queued.result(WAIT).status == 200
    assert "flidec_queue_refused_total 1.0" in server.get("/metrics").body.decode()


def test_no_request_waits_past_its_deadline(serve_live, program) -> None:
    gated = Gated(program)
    server = serve_live(lambda: gated, deadline_s=0.5, max_batch=1)
    with ThreadPoolExecutor(2) as pool:
        start = time.monotonic()
        running = pool.submit(server.post, "/v1/systemone", GOOD)  # held inside its run
        assert gated.entered.wait(WAIT)
        queued = pool.submit(server.post, "/v1/systemone", GOOD)  # waits behind it
        for reply in (running.result(WAIT), queued.result(WAIT)):
            assert reply.status == 503 and reply.json["detail"]["error_type"] == "overloaded_error"
            assert "deadline" in reply.json["detail"]["message"] and int(reply.headers["retry-after"]) >= 1
        assert time.monotonic() - start < 0.5 + 5
    gated.release()
    deadline = time.monotonic() + WAIT
    while server.service.queue.stats().depth:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert server.post("/v1/systemone", GOOD).status == 200


def test_a_request_over_the_bounds_is_refused_in_the_host_stage_while_a_run_holds_the_device(
        serve_live, program) -> None:
    gated = Gated(program)
    server = serve_live(lambda: gated, max_wait_s=0.05)
    words = " ".join(f"w{i}" for i in range(1000))  # a few KiB
    too_long = {**GOOD, "questions": {"q": {"type": "noul", "instructions": words}}}  # over 1,024 tokens
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(server.post, "/v1/systemone", GOOD)
        assert gated.entered.wait(WAIT)
        others = [pool.submit(server.post, "/v1/systemone", body) for body in (GOOD, too_long, GOOD)]
        assert others[1].result(WAIT).status == 413  # answered while the first run is still held
        deadline = time.monotonic() + WAIT
        while server.service.queue.stats().depth < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        gated.release()
        replies = [first.result(WAIT)] + [f.result(WAIT) for f in others]
    assert [r.status for r in replies] == [200, 200, 413, 200]
    assert replies[1].json == replies[3].json == replies[0].json
    assert gated.batches == [1, 2]  # the two waiting requests ran together; the refused one never ran


@pytest.mark.parametrize("route", ["/v1/systemone", "/v1/decisions"])
def test_shutdown_finishes_the_requests_in_flight(serve_live, program, route) -> None:
    gated = Gated(program)
    server = serve_live(lambda: gated)
    stop = server.stop
    body = GOOD if route == "/v1/systemone" else {"input": "I was charged twice.", "questions": [
        {"type": "predicate", "instructions": "Refund?"}]}
    with ThreadPoolExecutor(2) as pool:
        flight = pool.submit(server.post, route, body)
        assert gated.entered.wait(WAIT)
        stopping = pool.submit(stop)
        time.sleep(0.3)  # the server is shutting down with the request held in its run
        assert not stopping.done()
        gated.release()
        assert flight.result(WAIT).status == 200
        stopping.result(WAIT)
    assert server.service.queue.closed
