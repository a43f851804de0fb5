"""What the server tests share: the systemone and planner Programs (tests/conftest.py's cpu artifacts of the
tiny checkpoint, loaded once per session), and `live`: an app of flidec serve on uvicorn in a thread, on a
free loopback port, stopped (gracefully) when the test ends.

The server's worker runs torch on one thread: on a CPU shared with other work (CI's two cores run the
client, the server and the model), torch's default pool runs 10-200x slower.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SERVED = "flidec-tiny"
WAIT = 60  # seconds before a test gives up on the server instead of hanging


@pytest.fixture(scope="session")
def program(systemone_cpu_artifact: Path):
    """The systemone artifact (tests/conftest.py) on cpu (fp32 reference executor), saved states on."""
    from flidec.runtime.program import load

    return load(systemone_cpu_artifact, "cpu", served_name=SERVED)


@pytest.fixture(scope="session")
def planner_program(planner_cpu_artifact: Path):
    from flidec.runtime.program import load

    return load(planner_cpu_artifact, "cpu", served_name=SERVED)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Live:
    """A running server: its URL parts, service and a plain HTTP client."""

    host: str
    port: int
    service: Any
    server: Any
    stop: Callable[[], None] = lambda: None  # graceful; a second call does nothing

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def request(self, method: str, path: str, body: bytes | str | Mapping | list | None = None,
                headers: Mapping[str, str] | None = None, timeout: float = WAIT) -> Reply:
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body, ensure_ascii=False)
        if isinstance(body, str):
            body = body.encode("utf-8")
        h = {"Content-Type": "application/json"} if body is not None else {}
        h.update(headers or {})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def post(self, path: str, body: Any, **kw: Any) -> Reply:
        return self.request("POST", path, body, **kw)

    def get(self, path: str, **kw: Any) -> Reply:
        return self.request("GET", path, **kw)


def start_live(load_program: Callable[[], Any], **options: Any) -> tuple[Live, Callable[[], None]]:
    """An app over `load_program` on a free port; returns it and its stop (graceful: in-flight requests
    finish, the queue drains). `options`: ServiceOptions fields and AppOptions fields."""
    import uvicorn

    from flidec.runtime.http.app import AppOptions, create_app
    from flidec.runtime.http.service import Service, ServiceOptions

    service_fields = set(ServiceOptions.__dataclass_fields__)
    service = Service(load_program, ServiceOptions(**{"threads": 1, **{k: v for k, v in options.items()
                                                                        if k in service_fields}}))
    app = create_app(service, AppOptions(**{k: v for k, v in options.items() if k not in service_fields}))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=10, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT
    while not (server.started and server.servers):
        assert time.monotonic() < deadline and thread.is_alive(), "the test server did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    def stop() -> None:
        server.should_exit = True
        thread.join(WAIT)
        assert not thread.is_alive(), "the test server did not stop"

    return Live("127.0.0.1", port, service, server, stop), stop


def wait_ready(live: Live) -> None:
    """Wait for the load (and warm-up) to end, then /health must say ready (no 503 polls are counted)."""
    assert live.service.loaded.wait(WAIT), "the server never became ready"
    assert live.get("/health").status == 200, live.service.error


@pytest.fixture
def live(program) -> Iterator[Live]:
    """flidec serve over the systemone Program, no keys, ready."""
    server, stop = start_live(lambda: program)
    wait_ready(server)
    yield server
    stop()


@pytest.fixture
def serve_live() -> Iterator[Callable[..., Live]]:
    """start_live for a test's own options; every server it started is stopped at the end."""
    stops: list[Callable[[], None]] = []

    def make(load_program: Callable[[], Any], ready: bool = True, **options: Any) -> Live:
        server, stop = start_live(load_program, **options)
        stops.append(stop)
        if ready:
            wait_ready(server)
        return server

    yield make
    for stop in reversed(stops):
        stop()
