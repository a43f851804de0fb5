"""The Scheduler: the one class that owns the batching policy in front of one Program (one device).

Consumes Requests from any thread (`submit` -> Future of the request's Result); produces each caller's own
Result. Continuous batching: each request's host stage (`Program.prepare`: session, validation, tokenizing,
plan) runs in a pool of host threads as it arrives, off the device's path; one worker takes the prepared
requests into runs and `Program.execute`s them, and whatever arrives during a run is prepared meanwhile and
joins the next, so the device does not wait for the host while work is queued. A run takes the oldest
prepared request of a tree and, in arrival order, every other one of that tree that fits beside it within
`streams` of its largest bucket's rows (by the ladder's rows, not by bytes), at most `max_batch`
requests; requests whose roots share a prefix are then computed once in it (runtime/sharing.py). Before a
run, requests past their deadline get DeadlineExceeded and those whose caller gave up (a cancelled Future:
a client that hung up) are dropped. A run that raises is redone in halves (`execute_isolated`, also what
`flidec run` uses), so only the members failing alone get an error record. Past `max_queue` requests
(preparing or waiting), submit raises QueueFull at once with a retry hint.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import torch

from flidec.ir.errors import FlideError
from flidec.runtime.request import Request, Result


class Door(Protocol):
    """What the Scheduler drives: Program, or a test's stand-in."""

    def prepare(self, request: Request) -> Request: ...

    def execute(self, requests: Sequence[Request]) -> None: ...

    def run_rows(self, tree: str | None = None) -> int: ...


class QueueFull(FlideError):
    """submit refused: `depth` requests wait, the `limit`; retry after about `retry_after_s` seconds."""

    def __init__(self, depth: int, limit: int, retry_after_s: float):
        self.depth = depth
        self.limit = limit
        self.retry_after_s = retry_after_s
        super().__init__(f"the queue is full ({depth} requests waiting, max_queue={limit}): retry in about "
                         f"{retry_after_s:.3g} s, or raise max_queue")


class SchedulerClosed(RuntimeError):
    """submit refused: close() was called; submit to a new Scheduler."""


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """A snapshot of a Scheduler's counters (for a metrics endpoint)."""

    depth: int  # requests preparing or waiting now
    submitted: int  # requests accepted
    refused: int  # submits refused with QueueFull
    answered: int  # futures given a result: answers and error records
    cancelled: int  # futures their caller cancelled before they ran
    expired: int  # requests answered with DeadlineExceeded instead of a run
    isolated: int  # requests answered with an error record because their run raised on them alone
    batches: int  # runs that returned
    failed_runs: int  # runs that raised (each then answered again in halves)
    batch_sizes: dict[int, int]  # requests in a returned run -> how many such runs


def failure_result(e: BaseException, stage: str = "the run") -> Result:
    """The Result of a request whose `stage` ("the run", or "preparing") raised with it alone."""
    if isinstance(e, FlideError):
        return Result.failed(e)
    return Result({"error": {"type": type(e).__name__, "problems": [
        f"{stage} raised on this instance alone: {e} (if the instance is valid, this is a flidec bug: "
        "report it with the instance)"]}})


def execute_isolated(door: Door, requests: list[Request]) -> tuple[int, list[Request]]:
    """`door.execute(requests)`; if it raises (or leaves a request without a Result), each half again on its
    own, down to single requests, so only those that fail alone get an error Result. Returns the runs that
    raised and the requests isolated (given the error of a run that raised on them alone)."""
    try:
        door.execute(requests)
        missing = sum(r.result is None for r in requests)
        if missing:
            raise RuntimeError(f"execute left {missing} of {len(requests)} requests without a result")
        return 0, []
    except Exception as e:  # noqa: BLE001 (a failed run is answered member by member, never the caller's end)
        if len(requests) == 1:
            requests[0].result = failure_result(e)
            return 1, requests
        for r in requests:
            r.result = None  # a run that raised part-way answers nobody: each half runs again
        half = len(requests) // 2
        a, b = execute_isolated(door, requests[:half]), execute_isolated(door, requests[half:])
        return 1 + a[0] + b[0], a[1] + b[1]


@dataclass(eq=False, slots=True)
class _Entry:
    request: Request
    deadline_s: float | None
    seq: int
    future: Future = field(default_factory=Future)


class Scheduler:
    """Batches concurrent callers' requests onto one Program. Use as a context manager, or call close()."""

    def __init__(self, door: Door, *, max_queue: int = 4096, max_batch: int = 256, streams: int = 2,
                 max_wait_s: float = 0.0, threads: int | None = None, host_threads: int | None = None):
        """`streams`: a run's rows budget in largest buckets (two keep the device busy while the host binds
        the next stream). `max_wait_s`: how long a lone request waits for others before it runs alone (0:
        none; a busy device gathers them anyway). `threads`: torch's intra-op threads in the worker (default:
        the caller's; one thread serves a CPU box whose cores other work shares). `host_threads`: the host
        stage's pool (default: the cores)."""
        for name, value in (("max_batch", max_batch), ("max_queue", max_queue), ("streams", streams)):
            if value < 1:
                raise ValueError(f"Scheduler {name}={value}: it must be at least 1")
        if max_wait_s < 0:
            raise ValueError("Scheduler max_wait_s must be at least 0")
        for name, n in (("threads", threads), ("host_threads", host_threads)):
            if n is not None and n < 1:
                raise ValueError(f"Scheduler {name}={n}: it must be at least 1")
        self.door = door
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.streams = streams
        self.max_wait_s = max_wait_s
        # a new thread may start with torch's default intra-op pool, not the caller's (4-5x slower on the CPU)
        self._threads = threads or torch.get_num_threads()
        self._host = ThreadPoolExecutor(host_threads or os.cpu_count() or 1, thread_name_prefix="flidec-host")
        self._cond = threading.Condition()
        self._preparing = 0
        self._ready: list[_Entry] = []  # prepared, in arrival order
        self._closed = False
        self._stopped: RuntimeError | None = None  # set when the worker stopped on an error
        self._seq = 0
        self._counts: Counter[str] = Counter()
        self._batch_sizes: Counter[int] = Counter()
        self._run_s_per_request = 0.0  # moving average of a returned run's time per member, for retry hints
        self._worker = threading.Thread(target=self._serve, name="flidec-scheduler", daemon=True)
        self._worker.start()

    # -- callers --------------------------------------------------------------------------------------------

    def submit(self, request: Request | object, tree: str | None = None, *,
               deadline_s: float | None = None) -> Future:
        """A Future of the request's Result (an instance is made a Request of `tree`). `deadline_s`: seconds
        from now after which it is answered with a DeadlineExceeded record instead of run. Cancel the Future
        to drop the request before it runs. Raises QueueFull when max_queue requests wait, SchedulerClosed
        after close()."""
        if not isinstance(request, Request):
            request = Request(request, tree)
        with self._cond:
            if self._closed:
                raise SchedulerClosed("the server is closed: submit to a new Scheduler")
            depth = self._preparing + len(self._ready)
            if depth >= self.max_queue:
                self._counts["refused"] += 1
                raise QueueFull(depth, self.max_queue, self._retry_after())
            if deadline_s is not None:
                request.deadline = time.monotonic() + deadline_s
            entry = _Entry(request, deadline_s, self._seq)
            self._seq += 1
            self._preparing += 1
            self._counts["submitted"] += 1
        self._host.submit(self._prepare, entry)
        return entry.future

    def answer(self, request: Request | object, tree: str | None = None, timeout: float | None = None, *,
               deadline_s: float | None = None) -> Result:
        return self.submit(request, tree, deadline_s=deadline_s).result(timeout)

    def close(self) -> None:
        """Refuse new submits, answer what is preparing or queued, then stop the worker and the host pool."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._worker:
            self._worker.join()
        self._host.shutdown(wait=True)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def batches(self) -> int:
        """Runs that returned."""
        return self._counts["batches"]

    def stats(self) -> SchedulerStats:
        with self._cond:
            c = self._counts
            return SchedulerStats(self._preparing + len(self._ready), c["submitted"], c["refused"],
                                  c["answered"], c["cancelled"], c["expired"], c["isolated"], c["batches"],
                                  c["failed_runs"], dict(self._batch_sizes))

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the host stage ------------------------------------------------------------------------------------

    def _prepare(self, entry: _Entry) -> None:
        r = entry.request
        if entry.future.cancelled():
            ended = True
        else:
            try:
                self.door.prepare(r)
            except Exception as e:  # noqa: BLE001 (a bug in preparing one request ends that request only)
                r.result = failure_result(e, "preparing")
            ended = r.result is not None
        with self._cond:
            self._preparing -= 1
            stopped = self._stopped
            if not ended and stopped is None:
                self._ready.append(entry)
                self._ready.sort(key=lambda e: e.seq)  # hosts finish out of order: runs take arrival order
            self._cond.notify_all()
        if not ended and stopped is not None:  # the worker is gone: nothing would run it
            if not entry.future.done():
                entry.future.set_exception(stopped)
        elif ended:
            if entry.future.set_running_or_notify_cancel():
                self._resolve(entry, None)
            else:
                self._count("cancelled")

    # -- the worker -----------------------------------------------------------------------------------------

    def _retry_after(self) -> float:
        """About when the queue's work is done: its depth at the moving run time per request (lock held)."""
        return max(self.max_wait_s, 0.001, self._run_s_per_request * (self._preparing + len(self._ready)))

    def _serve(self) -> None:
        torch.set_num_threads(self._threads)
        taken: list[_Entry] = []
        expired: list[_Entry] = []
        try:
            while True:
                picked = self._next_batch()
                if picked is None:
                    return
                taken, expired = picked
                for e in expired:
                    if not e.future.set_running_or_notify_cancel():
                        self._count("cancelled")
                        continue
                    waited = time.monotonic() - e.request.arrived
                    e.request.result = Result({"error": {"type": "DeadlineExceeded", "problems": [
                        f"the request waited {waited:.3g} s, past its deadline, before it was run: submit it "
                        "again with a longer deadline or when the queue is shorter"]}})
                    self._resolve(e, "expired")
                expired = []
                live = [e for e in taken if e.future.set_running_or_notify_cancel()]
                if len(live) < len(taken):
                    self._count("cancelled", len(taken) - len(live))
                if live:
                    self._run(live)
                taken = []
        except BaseException as e:
            # never leave a caller waiting on a worker that is gone: fail what it held, what waits and what
            # is still preparing (_prepare sees _stopped)
            stopped = RuntimeError(f"the scheduler's worker stopped ({e!r}): submit again to a new Scheduler")
            with self._cond:
                self._closed = True
                self._stopped = stopped
                stranded, self._ready = taken + expired + self._ready, []
            for s in stranded:
                if not s.future.done():
                    s.future.set_exception(stopped)
            raise

    def _next_batch(self) -> tuple[list[_Entry], list[_Entry]] | None:
        """The next run and the requests found past their deadline; None once closed and drained."""
        with self._cond:
            while not self._ready and (self._preparing or not self._closed):
                self._cond.wait()
            if not self._ready:
                return None
            if self.max_wait_s > 0:  # give the oldest request max_wait_s from its arrival for others to join
                end = self._ready[0].request.arrived + self.max_wait_s
                while len(self._ready) < self.max_batch and not self._closed:
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            return self._pick()

    def _pick(self) -> tuple[list[_Entry], list[_Entry]]:
        """Take a run from the prepared requests (lock held): see the module docstring."""
        now = time.monotonic()
        expired = [e for e in self._ready if e.request.deadline is not None and now >= e.request.deadline]
        if expired:
            self._ready = [e for e in self._ready if e.request.deadline is None or now < e.request.deadline]
            if not self._ready:
                return [], expired
        head = self._ready[0]
        tree = head.request.tree
        budget = self.streams * self.door.run_rows(tree)
        batch, used = [head], head.request.cost
        for e in self._ready[1:]:
            if len(batch) >= self.max_batch:
                break
            if e.request.tree == tree and used + e.request.cost <= budget:
                batch.append(e)
                used += e.request.cost
        chosen = {id(e) for e in batch}
        self._ready = [e for e in self._ready if id(e) not in chosen]
        return batch, expired

    def _run(self, batch: list[_Entry]) -> None:
        start = time.monotonic()
        requests = [e.request for e in batch]
        failed, isolated = execute_isolated(self.door, requests)
        alone = {id(r) for r in isolated}
        per_request = (time.monotonic() - start) / len(batch)
        with self._cond:
            if failed:
                self._counts["failed_runs"] += failed
            else:
                self._counts["batches"] += 1
                self._batch_sizes[len(batch)] += 1
                self._run_s_per_request += 0.2 * (per_request - self._run_s_per_request)
        for e in batch:
            self._resolve(e, "isolated" if id(e.request) in alone else None)

    def _count(self, kind: str, n: int = 1) -> None:
        with self._cond:
            self._counts[kind] += n

    def _resolve(self, entry: _Entry, kind: str | None) -> None:
        """Give one running request its Result, counted (outside the lock: a Future's callbacks run here)."""
        with self._cond:
            self._counts["answered"] += 1
            if kind is not None:
                self._counts[kind] += 1
        entry.future.set_result(entry.request.result)
