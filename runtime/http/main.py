"""`flidec serve`: the app on uvicorn, the artifact loading in the background meanwhile.

Consumes ServeOptions (the CLI's flags); runs until SIGINT or SIGTERM, then shuts down gracefully: uvicorn
stops accepting connections and finishes the requests in flight (for up to the request deadline), then the
queue answers what it holds. Loading starts with the server, so GET /health says 503 until the Program is
ready; a load that fails stops the server and is raised to the caller (the CLI prints it).
"""

from __future__ import annotations

import datetime
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from fastapi import FastAPI

from flidec.runtime.http.app import AppOptions, create_app
from flidec.runtime.http.auth import Keys
from flidec.runtime.http.service import Service, ServiceOptions
from flidec.runtime.program import Program, load

log = logging.getLogger("uvicorn.error")  # uvicorn's own log: shown at its --log-level


@dataclass(frozen=True)
class ServeOptions:
    artifact: Path
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: tuple[str, ...] = ()
    api_key_files: tuple[str, ...] = ()
    served_name: str | None = None
    checkpoints: str | None = None
    device: str = "cpu"
    dtype: str | None = None
    trust_weights: bool = False
    max_queue: int = 1024
    max_batch: int = 256
    deadline_s: float = 60.0
    max_body_bytes: int = 8 << 20
    body_timeout_s: float = 30.0
    threads: int | None = None
    log_level: str = "info"


def loader(o: ServeOptions) -> Callable[[], Program]:
    def load_program() -> Program:
        start = time.monotonic()
        program = load(o.artifact, o.device, dtype=o.dtype, served_name=o.served_name,
                       verify_weights=not o.trust_weights, checkpoints=o.checkpoints)
        log.info("flidec serve: %s loaded on %s in %.1f s, serving %s as %r", o.artifact, o.device,
                 time.monotonic() - start, ", ".join(program.trees), program.served_name)
        return program
    return load_program


def build(o: ServeOptions, load_program: Callable[[], Program] | None = None, service: Service | None = None
          ) -> tuple[Service, FastAPI]:
    """The Service and app of the options (`load_program`: a stand-in loader, for tests; `service`: one
    standing in for the Program, such as runtime/replicas' RoutedService)."""
    keys = Keys.load(o.api_keys, o.api_key_files)
    service = service or Service(load_program or loader(o), ServiceOptions(
        max_queue=o.max_queue, max_batch=o.max_batch, deadline_s=o.deadline_s, threads=o.threads))
    manifest = Path(o.artifact) / "manifest.json"
    built = datetime.datetime.fromtimestamp(manifest.stat().st_mtime, datetime.UTC).date().isoformat() \
        if manifest.exists() else None
    about = f"flidec artifact {Path(o.artifact).name} on {o.device}"
    app = create_app(service, AppOptions(keys=keys, max_body_bytes=o.max_body_bytes, description=about,
                                         body_timeout_s=o.body_timeout_s, release_date=built))
    return service, app


def serve(o: ServeOptions, service: Service | None = None, extend: Callable[[FastAPI], None] | None = None
          ) -> None:
    """Serve until interrupted; raise the load's error if the artifact cannot be loaded. `service` and
    `extend` (called with the app before it starts): runtime/replicas' RoutedService and its middleware."""
    import uvicorn

    if o.threads is not None:
        torch.set_num_threads(o.threads)
    service, app = build(o, service=service)
    if extend is not None:
        extend(app)
    config = uvicorn.Config(app, host=o.host, port=o.port, log_level=o.log_level, access_log=False,
                            timeout_graceful_shutdown=max(1, int(o.deadline_s) + 5), server_header=False)
    server = uvicorn.Server(config)

    def failed(e: BaseException) -> None:
        log.error("flidec serve: the artifact did not load: %s", e)
        server.should_exit = True

    service.on_failure = failed
    # uvicorn raises the SIGINT or SIGTERM that stopped it again once it has shut down gracefully, with the
    # handlers it found restored: these let that end the process with status 0 instead of by the signal
    before = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if service.error is not None:
        raise service.error


def _ignore(signum: int, frame: object) -> None:
    log.info("flidec serve: stopped by signal %d", signum)
