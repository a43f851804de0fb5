"""A thread-safe queue in front of one Program: many callers, one device, several instances per replay.

Consumes instances submitted from any thread (`submit` -> Future, or the blocking `answer`); produces each
caller's own answer. One worker thread takes whatever is waiting (up to `max_batch` instances of one tree,
after waiting at most `max_wait_s` for more to arrive once the first is there) and answers the batch with
one Program.run, which packs it into as few bucket replays as fit; results are routed back by position.
An exception in a run fails that batch's futures only; the worker keeps serving. Relies on Program.run
returning one result per instance in order (per-instance errors are results, not exceptions).
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from flidec.runtime.program import Program


@dataclass
class _Request:
    instance: object
    tree: str | None
    future: Future = field(default_factory=Future)


class Server:
    """Batches concurrent callers' instances onto one Program. Use as a context manager, or call close()."""

    def __init__(self, program: Program, max_batch: int = 64, max_wait_s: float = 0.002):
        self.program = program
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.batches = 0  # Program.run calls made (for tests and stats)
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._held: _Request | None = None  # a request of another tree, first in the next batch
        self._worker = threading.Thread(target=self._serve, name="flidec-server", daemon=True)
        self._closed = False
        self._worker.start()

    def submit(self, instance: object, tree: str | None = None) -> Future:
        """A Future of the instance's result (an answer object or {"error": ...})."""
        if self._closed:
            raise RuntimeError("the server is closed")
        request = _Request(instance, tree)
        self._queue.put(request)
        return request.future

    def answer(self, instance: object, tree: str | None = None, timeout: float | None = None) -> dict:
        return self.submit(instance, tree).result(timeout)

    def close(self) -> None:
        """Answer what is queued, then stop the worker."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._worker.join()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self) -> tuple[list[_Request], bool]:
        """The next batch (one tree) and whether the queue was closed meanwhile."""
        first = self._held or self._queue.get()
        self._held = None
        if first is None:
            return [], True
        batch, stop = [first], False
        deadline = time.monotonic() + self.max_wait_s
        while len(batch) < self.max_batch:
            try:
                nxt = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if nxt is None:
                stop = True
                break
            if nxt.tree != first.tree:
                self._held = nxt
                break
            batch.append(nxt)
        return batch, stop

    def _serve(self) -> None:
        while True:
            batch, stop = self._take()  # a held request is always taken before the closing sentinel
            if batch:
                self._answer(batch)
            if stop:
                return

    def _answer(self, batch: list[_Request]) -> None:
        live = [r for r in batch if r.future.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            results = self.program.run([r.instance for r in live], live[0].tree)
        except Exception as e:  # noqa: BLE001 (a failed run fails its own callers, never the server)
            for r in live:
                r.future.set_exception(e)
            return
        self.batches += 1
        for r, result in zip(live, results, strict=True):
            r.future.set_result(result)
