"""One request on its way through the runtime: the object every stage reads and fills, and its Result.

A Request is made where an instance arrives (an HTTP route, `flidec run`, a replica, a test) and passes, as
the same object, through the Program's host stage (`Program.prepare`: the session, validation, the plan,
its split), the Scheduler's queue (runtime/scheduler.py: its rows, deadline and arrival order decide when it
runs) and the Program's device stage (`Program.execute`: resumed from a saved point, its root shared with
the requests beside it, packed, run, answered). It ends with exactly one Result.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from flidec.ir.errors import FlideError, InstanceError
from flidec.ir.template import Sizes
from flidec.runtime.binder import Plan, Shape
from flidec.runtime.saved.resume import Session


def error_record(e: FlideError) -> dict:
    """The result of an instance that could not be answered (one line of results.jsonl)."""
    problems = list(e.problems) if isinstance(e, InstanceError) else [str(e)]
    return {"error": {"type": type(e).__name__, "problems": problems}}


@dataclass(frozen=True, slots=True)
class Result:
    """What one request got: its answer object (a System One response for wire="systemone" trees) or its
    error record `{"error": {"type", "problems"}}`, and how it was computed."""

    record: dict
    input_tokens: int = 0  # the sum of its reads' whole prompt lengths
    reused: int = 0  # its state's positions resumed from a saved point
    shared: int = 0  # its state's positions computed once with another request of the same run
    buckets: tuple[str, ...] = ()  # the buckets of the streams it ran in
    logits: torch.Tensor | None = None  # [reads, its most labels] float32 label logits (-inf past a read's)
    error: FlideError | None = None  # why it was not answered, when that was a FlideError

    @property
    def ok(self) -> bool:
        return self.error is None and "error" not in self.record

    @classmethod
    def failed(cls, e: FlideError) -> Result:
        return cls(error_record(e), error=e)


@dataclass(eq=False)
class Request:
    """One instance of one tree. `tree` None: the artifact's only tree. `deadline`: time.monotonic() past
    which it is answered with DeadlineExceeded instead of run (None: never)."""

    instance: object
    tree: str | None = None
    deadline: float | None = None
    arrived: float = field(default_factory=time.monotonic)
    # the host stage (Program.prepare)
    session: Session | None = None
    plan: Plan | None = None
    shape: Shape | None = None
    sizes: Sizes | None = None  # what the whole plan needs of a bucket
    parts: list[tuple[Plan, tuple[int, ...]]] | None = None  # sub-plans and their reads; None: runs whole
    # the device stage (Program.execute)
    rows: list[torch.Tensor | None] = field(default_factory=list)  # per read: its label logits row
    input_tokens: int = 0
    reused: int = 0
    shared: int = 0
    buckets: set[str] = field(default_factory=set)
    result: Result | None = None  # set once, by whichever stage ends it

    @property
    def cost(self) -> int:
        """The rows it computes alone (a queue's measure of its work; 1 for one that ended before)."""
        return max(1, self.sizes.rows) if self.sizes is not None else 1

    def fail(self, e: FlideError) -> None:
        self.result = Result.failed(e)
