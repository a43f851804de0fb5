"""What stands behind the routes: the Program, loaded (and warmed) in the background, and its Scheduler.

Consumes a loader (a function returning a Program: `load(...)` in production, an already loaded Program in
tests) and ServiceOptions; produces, per HTTP request, each instance's Result (runtime/request.py) within
the request's deadline. The queue is runtime/scheduler.py's Scheduler: concurrent requests of one tree share
a run, and each answer is the one its request gets alone (E1). A client that hangs up has its requests
dropped before they run. Raises ApiError for what is no answer: 503 while loading, shutting down or past the
deadline, 429 when the queue is full (with Retry-After).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from flidec.runtime.http.errors import ApiError, retry_headers
from flidec.runtime.program import Program
from flidec.runtime.request import Request, Result
from flidec.runtime.scheduler import QueueFull, Scheduler, SchedulerClosed

DISCONNECT_POLL_S = 0.05  # how often a waiting request checks that its client is still there


@dataclass(frozen=True, slots=True)
class ServiceOptions:
    max_queue: int = 1024  # requests preparing or waiting; past it 429
    max_batch: int = 256  # requests a run
    max_wait_s: float = 0.0  # how long a lone request waits for others to join its run
    deadline_s: float = 60.0  # from arrival to answer; past it 503
    threads: int | None = None  # torch intra-op threads of the worker (None: the loading thread's)
    warm: bool = True  # run every bucket once before /health says ready


class Served(Protocol):
    """What the routes read of the loaded artifact: its trees by name (each with its `.tree`) and the name it
    serves as. A Program is one; a replica ingress holds a view of one (runtime/replicas/service.py)."""

    @property
    def trees(self) -> Mapping[str, Any]: ...

    @property
    def served_name(self) -> str: ...


class Service:
    def __init__(self, loader: Callable[[], Program | None], options: ServiceOptions = ServiceOptions()):
        self.options = options
        self._loader = loader
        self.program: Served | None = None  # what the routes read (set once loaded)
        self._local: Program | None = None  # the Program this process runs (None behind replicas)
        self.queue: Scheduler | None = None
        self.error: BaseException | None = None
        self.loaded = threading.Event()  # set once loading ended, loaded or failed
        self._thread: threading.Thread | None = None
        self.on_failure: Callable[[BaseException], None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Load in a background thread; the routes answer 503 until it is done."""
        self._thread = threading.Thread(target=self._load, name="flidec-load", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        try:
            program = self._loader()
            assert program is not None, "a Service's loader returns the Program it serves"
            o = self.options
            if o.warm:
                program.warm()  # each bucket run once (graph capture, first calls) before /health is ready
            self.queue = Scheduler(program, max_batch=o.max_batch, max_wait_s=o.max_wait_s,
                                   max_queue=o.max_queue, threads=o.threads)
            self._local = self.program = program
        except BaseException as e:  # noqa: BLE001 (reported by the CLI, which stops the server)
            self.error = e
            if self.on_failure is not None:
                self.on_failure(e)
        finally:
            self.loaded.set()

    def close(self) -> None:
        """Answer what is queued, then stop the worker (graceful shutdown's last step)."""
        if self._thread is not None:
            self._thread.join()
        if self.queue is not None:
            self.queue.close()

    @property
    def ready(self) -> bool:
        return self.program is not None

    def ready_program(self) -> Served:
        if self.program is None:
            raise ApiError(503, "overloaded_error", "the server is still loading its artifact: retry shortly",
                           retry_headers(1.0))
        return self.program

    def live(self) -> dict | None:
        """What /metrics reads at scrape time (None while loading)."""
        if self._local is None or self.queue is None:
            return None
        device = getattr(self._local.engine, "device", None)
        cuda = device if getattr(device, "type", None) == "cuda" else None
        stats = self._local.stats
        return {"queue": self.queue.stats(), "program": stats, "buckets": dict(stats.buckets), "cuda": cuda}

    # -- answering ------------------------------------------------------------------------------------------

    async def run(self, instances: Sequence[Any], tree: str | None, arrived: float,
                  disconnected: Callable[[], Awaitable[bool]] | None = None) -> list[Result]:
        """Each instance's Result, queued together (a Decisions request's runs of questions), answered by
        `arrived + deadline_s` (time.monotonic()) or ApiError 503; 429 if the queue cannot take them.
        `disconnected`: polled while waiting; once it says the client hung up, the requests not yet run are
        dropped (and the answer, which nobody reads, is a 499-like ApiError)."""
        self.ready_program()
        assert self.queue is not None
        left = self.options.deadline_s - (time.monotonic() - arrived)
        futures = []
        try:
            for inst in instances:
                request = Request(inst, tree, arrived=arrived)
                futures.append(self.queue.submit(request, deadline_s=max(left, 0.0)))
        except QueueFull as e:
            for f in futures:
                f.cancel()
            raise ApiError(429, "rate_limit_error", str(e), retry_headers(e.retry_after_s)) from None
        except SchedulerClosed:
            for f in futures:
                f.cancel()
            raise ApiError(503, "overloaded_error", "the server is shutting down: retry on another replica",
                           retry_headers(1.0)) from None
        answered = asyncio.ensure_future(asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))
        answered.add_done_callback(lambda f: f.cancelled() or f.exception())  # read, so never logged
        try:
            end = time.monotonic() + max(left, 0.001)
            while not answered.done():
                wait = min(DISCONNECT_POLL_S, end - time.monotonic())
                if wait <= 0:
                    raise TimeoutError
                await asyncio.wait([answered], timeout=wait)
                if not answered.done() and disconnected is not None and await disconnected():
                    raise ApiError(499, "client_closed", "the client closed the connection: its requests "
                                   "were dropped")
            return list(answered.result())
        except TimeoutError:
            raise ApiError(503, "overloaded_error", f"no answer within the request deadline of "
                           f"{self.options.deadline_s:g} s: retry later or with fewer questions",
                           retry_headers(1.0)) from None
        finally:
            if not answered.done():
                for f in futures:
                    f.cancel()
                answered.cancel()
