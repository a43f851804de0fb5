"""A bounded, thread-safe queue in front of one Program: many callers, one device, several instances a replay.

Consumes instances from any thread (`submit` -> Future, or `answer`); produces each caller's own answer or
error record. Past `max_queue` waiting requests, submit raises QueueFull at once, with a retry hint. A worker
forms batches by size (an instance's JSON text length): the smallest waiting request leads, joined by the next
smallest of its tree within `max_batch` members and `max_batch_cost` (a larger one runs alone); a request
passed over by `max_overtake` batches of newer ones makes the oldest waiting request lead until it has run.
A run is never interrupted: a request arriving during one waits for it. A run that raises is redone in halves,
so only members failing alone get an error record; a request past its deadline gets DeadlineExceeded instead.
Relies on Program.run returning one result per instance, in order.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

import torch

from flidec.ir.errors import FlideError
from flidec.runtime.program import error_record


class Runner(Protocol):
    """What the Server drives: Program, or a test's stand-in."""

    def run(self, instances: Sequence[object], tree: str | None = None) -> list[dict]: ...


class QueueFull(FlideError):
    """submit refused: `depth` requests wait, the `limit`; retry after about `retry_after_s` seconds."""

    def __init__(self, depth: int, limit: int, retry_after_s: float):
        self.depth = depth
        self.limit = limit
        self.retry_after_s = retry_after_s
        super().__init__(f"the queue is full ({depth} requests waiting, max_queue={limit}): retry in about "
                         f"{retry_after_s:.3g} s, or raise max_queue")


class ServerClosed(RuntimeError):
    """submit refused: close() was called; submit to a new Server."""


@dataclass(frozen=True, slots=True)
class ServerStats:
    """A snapshot of a Server's counters (for a metrics endpoint)."""

    depth: int  # requests waiting now
    submitted: int  # requests accepted
    refused: int  # submits refused with QueueFull
    answered: int  # futures given a result: answers and error records
    cancelled: int  # futures their caller cancelled before they ran
    expired: int  # requests answered with DeadlineExceeded instead of a run
    isolated: int  # requests answered with an error record because their run raised on them alone
    batches: int  # Program.run calls that returned
    failed_runs: int  # Program.run calls that raised (each then answered again in halves)
    batch_sizes: dict[int, int]  # instances in a returned run -> how many such runs


@dataclass(eq=False, slots=True)
class _Request:
    instance: object
    tree: str | None
    cost: int  # estimated size: the instance's JSON text length
    seq: int  # arrival order
    deadline: float | None  # time.monotonic() past which it is not run
    deadline_s: float | None
    arrived: float
    overtaken: int = 0  # batches that took a newer request while this one waited
    future: Future = field(default_factory=Future)


def _cost(instance: object) -> int:
    """The instance's JSON text length (its token count grows with it); 1 for what is not JSON, which
    Program.run refuses at once."""
    try:
        return max(1, len(json.dumps(instance, ensure_ascii=False)))
    except (TypeError, ValueError, RecursionError):
        return 1


def _failure_record(e: Exception) -> dict:
    """The error record of a request whose run raised with it alone."""
    if isinstance(e, FlideError):
        return error_record(e)
    return {"error": {"type": type(e).__name__, "problems": [
        f"the run raised on this instance alone: {e} (if the instance is valid, this is a flidec bug: "
        "report it with the instance)"]}}


class Server:
    """Batches concurrent callers' instances onto one Program. Use as a context manager, or call close()."""

    def __init__(self, program: Runner, max_batch: int = 64, max_wait_s: float = 0.002, *,
                 max_queue: int = 4096, max_batch_cost: int = 65536, max_overtake: int = 8,
                 threads: int | None = None):
        """`threads`: torch's intra-op threads in the worker (default: the caller's). One thread serves a CPU
        box whose cores other work shares: torch's pool oversubscribed there runs 10-200x slower."""
        for name, value in (("max_batch", max_batch), ("max_queue", max_queue),
                            ("max_batch_cost", max_batch_cost)):
            if value < 1:
                raise ValueError(f"Server {name}={value}: it must be at least 1")
        if max_overtake < 0 or max_wait_s < 0:
            raise ValueError("Server max_overtake and max_wait_s must be at least 0")
        if threads is not None and threads < 1:
            raise ValueError(f"Server threads={threads}: it must be at least 1")
        self.program = program
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.max_batch_cost = max_batch_cost
        self.max_overtake = max_overtake
        # a new thread may start with torch's default intra-op pool, not the caller's (4-5x slower on the CPU)
        self._threads = threads or torch.get_num_threads()
        self._cond = threading.Condition()
        self._pending: list[_Request] = []  # in arrival order
        self._closed = False
        self._seq = 0
        self._counts: Counter[str] = Counter()
        self._batch_sizes: Counter[int] = Counter()
        self._run_s_per_request = 0.0  # moving average of a returned run's time per member, for retry hints
        self._worker = threading.Thread(target=self._serve, name="flidec-server", daemon=True)
        self._worker.start()

    # -- callers --------------------------------------------------------------------------------------------

    def submit(self, instance: object, tree: str | None = None, *, deadline_s: float | None = None) -> Future:
        """A Future of the instance's result (an answer object or {"error": ...}). `deadline_s`: seconds from
        now after which it is answered with a DeadlineExceeded record instead of run. Raises QueueFull when
        max_queue requests wait, ServerClosed after close()."""
        cost = _cost(instance)  # in the caller's thread: the worker only compares numbers
        now = time.monotonic()
        with self._cond:
            if self._closed:
                raise ServerClosed("the server is closed: submit to a new Server")
            if len(self._pending) >= self.max_queue:
                self._counts["refused"] += 1
                raise QueueFull(len(self._pending), self.max_queue, self._retry_after())
            deadline = None if deadline_s is None else now + deadline_s
            request = _Request(instance, tree, cost, self._seq, deadline, deadline_s, now)
            self._seq += 1
            self._pending.append(request)
            self._counts["submitted"] += 1
            self._cond.notify_all()
        return request.future

    def answer(self, instance: object, tree: str | None = None, timeout: float | None = None, *,
               deadline_s: float | None = None) -> dict:
        return self.submit(instance, tree, deadline_s=deadline_s).result(timeout)

    def close(self) -> None:
        """Refuse new submits, answer what is queued, then stop the worker."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._worker:
            self._worker.join()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def batches(self) -> int:
        """Program.run calls that returned."""
        return self._counts["batches"]

    def stats(self) -> ServerStats:
        with self._cond:
            c = self._counts
            return ServerStats(len(self._pending), c["submitted"], c["refused"], c["answered"],
                               c["cancelled"], c["expired"], c["isolated"], c["batches"], c["failed_runs"],
                               dict(self._batch_sizes))

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the worker -----------------------------------------------------------------------------------------

    def _retry_after(self) -> float:
        """About when a batch is next taken from the queue: one full batch's run time (lock held)."""
        return max(self.max_wait_s, 0.001, self._run_s_per_request * self.max_batch)

    def _serve(self) -> None:
        torch.set_num_threads(self._threads)
        taken: list[_Request] = []
        try:
            while True:
                picked = self._next_batch()
                if picked is None:
                    return
                taken, expired = picked
                for r in expired:
                    if not r.future.set_running_or_notify_cancel():
                        self._count("cancelled")
                        continue
                    self._resolve(r, {"error": {"type": "DeadlineExceeded", "problems": [
                        f"the request waited past its deadline_s={r.deadline_s:.3g} before it was run: "
                        "submit it again with a longer deadline or when the queue is shorter"]}}, "expired")
                live = [r for r in taken if r.future.set_running_or_notify_cancel()]
                if len(live) < len(taken):
                    self._count("cancelled", len(taken) - len(live))
                if live:
                    self._run(live)
                taken = []
        except BaseException as e:
            # never leave a caller waiting on a worker that is gone: fail what it held and what waits
            with self._cond:
                self._closed = True
                stranded, self._pending = taken + self._pending, []
            for r in stranded:
                if not r.future.done():
                    r.future.set_exception(RuntimeError(f"the server's worker stopped ({e!r}): submit again "
                                                        "to a new Server"))
            raise

    def _next_batch(self) -> tuple[list[_Request], list[_Request]] | None:
        """The next batch and the requests found past their deadline; None once closed and drained."""
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if not self._pending:
                return None
            # give the oldest request max_wait_s from its arrival for others to join it
            end = self._pending[0].arrived + self.max_wait_s
            while len(self._pending) < self.max_batch and not self._closed:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._pick()

    def _pick(self) -> tuple[list[_Request], list[_Request]]:
        """Take a batch from the waiting requests (lock held): see the module docstring."""
        now = time.monotonic()
        expired = [r for r in self._pending if r.deadline is not None and now >= r.deadline]
        if expired:
            self._pending = [r for r in self._pending if r.deadline is None or now < r.deadline]
            if not self._pending:
                return [], expired
        oldest = self._pending[0]
        by_cost = sorted(self._pending, key=lambda r: (r.cost, r.seq))
        head = oldest if oldest.overtaken >= self.max_overtake else by_cost[0]
        batch, used = [head], head.cost
        for r in by_cost:
            if len(batch) >= self.max_batch:
                break
            if r is head or r.tree != head.tree:
                continue
            if used + r.cost > self.max_batch_cost:
                break  # sorted by cost: no later request fits either
            batch.append(r)
            used += r.cost
        newest = max(r.seq for r in batch)
        chosen = {id(r) for r in batch}
        rest = [r for r in self._pending if id(r) not in chosen]
        for r in rest:
            if r.seq < newest:
                r.overtaken += 1
        self._pending = rest
        return sorted(batch, key=lambda r: r.seq), expired

    def _run(self, batch: list[_Request]) -> None:
        """Answer the batch with one Program.run; if the run raises, answer each half on its own, down to
        single requests, so only those that fail alone get an error record and every other is answered
        once."""
        start = time.monotonic()
        try:
            results = self.program.run([r.instance for r in batch], batch[0].tree)
            if len(results) != len(batch):
                raise RuntimeError(f"Program.run returned {len(results)} results for {len(batch)} instances")
        except Exception as e:  # noqa: BLE001 (a failed run is answered member by member, never the server's end)
            self._count("failed_runs")
            if len(batch) == 1:
                self._resolve(batch[0], _failure_record(e), "isolated")
                return
            half = len(batch) // 2
            self._run(batch[:half])
            self._run(batch[half:])
            return
        per_request = (time.monotonic() - start) / len(batch)
        with self._cond:
            self._counts["batches"] += 1
            self._batch_sizes[len(batch)] += 1
            self._run_s_per_request += 0.2 * (per_request - self._run_s_per_request)
        for r, result in zip(batch, results, strict=True):
            self._resolve(r, result, None)

    def _count(self, kind: str, n: int = 1) -> None:
        with self._cond:
            self._counts[kind] += n

    def _resolve(self, request: _Request, result: dict, kind: str | None) -> None:
        """Give one running request its result, counted (outside the lock: a Future's callbacks run here)."""
        with self._cond:
            self._counts["answered"] += 1
            if kind is not None:
                self._counts[kind] += 1
        request.future.set_result(result)
