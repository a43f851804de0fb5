"""What stands behind the routes: the Program, loaded in the background, and the queue that batches onto it.

Consumes a loader (a function returning a Program: `load(...)` in production, an already loaded Program in
tests) and ServiceOptions; produces, per request, each instance's result and the state tokens it resumed
from saved states, within the request's deadline. The queue is runtime/serve.py's Server: concurrent
requests of one tree share a run, and each answer is the one its request gets alone (E1). Raises ApiError
for what is no answer: 503 while loading or past the deadline, 429 when the queue is full (with
Retry-After).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flidec.runtime.http.errors import ApiError, retry_headers
from flidec.runtime.http.metrics import BucketCounter
from flidec.runtime.program import Program
from flidec.runtime.serve import QueueFull, Server, ServerClosed


@dataclass(frozen=True, slots=True)
class ServiceOptions:
    max_queue: int = 1024  # requests waiting; past it 429
    max_batch: int = 64  # instances a run
    max_wait_s: float = 0.002  # how long the oldest waiting request waits for others to join its run
    deadline_s: float = 60.0  # from arrival to answer; past it 503
    threads: int | None = None  # torch intra-op threads of the worker (None: the loading thread's)


@dataclass(frozen=True, slots=True)
class Ran:
    """One instance's result (an answer object or an error record) and its state tokens resumed."""

    result: dict
    reused: int = 0


class _Runner:
    """The Server's view of the Program: each result with the state tokens its instance resumed."""

    def __init__(self, program: Program):
        self.program = program

    def run(self, instances: Sequence[object], tree: str | None = None) -> list[Ran]:
        reused: list[int] = []
        results = self.program.run(instances, tree, reused=reused)
        if len(reused) != len(results):
            reused = [0] * len(results)
        return [Ran(r, n) for r, n in zip(results, reused, strict=True)]


class Service:
    def __init__(self, loader: Callable[[], Program], options: ServiceOptions = ServiceOptions()):
        self.options = options
        self._loader = loader
        self.program: Program | None = None
        self.queue: Server | None = None
        self.buckets: BucketCounter | None = None
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
            engine = program.engine  # counted once, however many services share the Program (tests do)
            self.buckets = engine if isinstance(engine, BucketCounter) else BucketCounter(engine)
            program.engine = self.buckets  # type: ignore[assignment]
            o = self.options
            self.queue = Server(_Runner(program), max_batch=o.max_batch, max_wait_s=o.max_wait_s,
                                max_queue=o.max_queue, threads=o.threads)
            self.program = program
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

    def ready_program(self) -> Program:
        if self.program is None:
            raise ApiError(503, "overloaded_error", "the server is still loading its artifact: retry shortly",
                           retry_headers(1.0))
        return self.program

    def live(self) -> dict | None:
        """What /metrics reads at scrape time (None while loading)."""
        if self.program is None or self.queue is None or self.buckets is None:
            return None
        device = getattr(self.program.engine, "device", None)
        cuda = device if getattr(device, "type", None) == "cuda" else None
        return {"queue": self.queue.stats(), "program": self.program.stats,
                "buckets": dict(self.buckets.counts), "cuda": cuda}

    # -- answering ------------------------------------------------------------------------------------------

    async def run(self, instances: Sequence[Any], tree: str | None, arrived: float) -> list[Ran]:
        """Each instance's result, queued together (a Decisions request's runs of questions), answered by
        `arrived + deadline_s` (time.monotonic()) or ApiError 503; 429 if the queue cannot take them."""
        self.ready_program()
        assert self.queue is not None
        left = self.options.deadline_s - (time.monotonic() - arrived)
        futures = []
        try:
            for inst in instances:
                futures.append(self.queue.submit(inst, tree, deadline_s=max(left, 0.0)))
        except QueueFull as e:
            for f in futures:
                f.cancel()
            raise ApiError(429, "rate_limit_error", str(e), retry_headers(e.retry_after_s)) from None
        except ServerClosed:
            raise ApiError(503, "overloaded_error", "the server is shutting down: retry on another replica",
                           retry_headers(1.0)) from None
        waiting = [asyncio.wrap_future(f) for f in futures]
        try:
            done = await asyncio.wait_for(asyncio.gather(*waiting), max(left, 0.001))
        except TimeoutError:
            for f in futures:
                f.cancel()
            raise ApiError(503, "overloaded_error", f"no answer within the request deadline of "
                           f"{self.options.deadline_s:g} s: retry later or with fewer questions",
                           retry_headers(1.0)) from None
        return [d if isinstance(d, Ran) else Ran(d) for d in done]
