"""The Scheduler (runtime/scheduler.py) in front of a Door: a full queue refuses at once with a retry hint; a
run that raises (or leaves a request without a Result) is redone in halves by `execute_isolated`, so a
failing member fails only itself (on a stand-in and on the real Program over the systemone cpu artifact); a
request failing in prepare is answered without a run; runs take arrival order, filled first-fit by rows
within `streams * run_rows(tree)` (one over the budget alone runs alone), at most `max_batch`, of one tree;
`max_wait_s` gathers a lone request's company; cancelled futures are never run; deadlines; the worker's torch
threads; close; a worker stopped by its door; the stats counters; and random submit patterns from several
threads (hypothesis). Ordering is made deterministic by a stand-in whose execute blocks on a gate (and whose
prepare can block on another), so requests wait together; tests assert orders and counts, never wall time.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flidec.ir.errors import FlideError, InstanceError
from flidec.ir.template import Sizes
from flidec.runtime.binder import Plan
from flidec.runtime.program import load
from flidec.runtime.request import Request, Result
from flidec.runtime.scheduler import QueueFull, Scheduler, SchedulerClosed, execute_isolated

WAIT = 60  # seconds a test waits on a future or gate before it fails instead of hanging
STRANDED = 5  # seconds a test waits for an answer a stopped worker must still give
ALONE = "the run raised on this instance alone: "
THREAD_DIED = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


class Fatal(BaseException):  # noqa: N818 (what no `except Exception` catches: a door stopping the worker)
    pass


@dataclass
class Call:
    """One execute call of the stand-in."""

    ids: list[int]
    trees: list[str | None]
    costs: list[int]  # each request's Request.cost
    threads: int  # torch's intra-op threads in the calling thread
    ok: bool = False  # returned with every request answered


class Stand:
    """A Door stand-in over instances {"id", "rows", flags}. prepare: sizes of `rows` rows (None: no sizes,
    cost 1) and an empty Plan; fails an "invalid" instance (InstanceError), raises KeyError (a bug) on one
    without "rows", and with "hold" waits for `release_prepare()`. execute: answers {"id", "tree", "run"}
    per request (before raising: a run that raises part-way), raises if any is "poison" (ValueError;
    "flide": InstanceError; "fatal": a BaseException), records every call and, with `gated`, waits for
    `release()`. With `short`, a run of several returns answering nobody (a broken door). `rows`: run_rows,
    one for every tree or per tree."""

    def __init__(self, gated: bool = False, rows: int | dict[str | None, int] = 8, short: bool = False):
        self.calls: list[Call] = []
        self.answered: Counter[int] = Counter()  # ids in calls that returned
        self.prepared: list[int] = []  # ids, as prepare was called
        self.asked: list[str | None] = []  # the trees run_rows was asked about
        self.stale: list[int] = []  # ids that reached execute already holding a result
        self.started = threading.Event()
        self._gate = threading.Event()
        self._prepare_gate = threading.Event()
        self._lock = threading.Lock()
        if not gated:
            self._gate.set()
        self.rows = rows
        self.short = short

    def release(self) -> None:
        self._gate.set()

    def release_prepare(self) -> None:
        self._prepare_gate.set()

    def run_rows(self, tree: str | None = None) -> int:
        self.asked.append(tree)
        return self.rows[tree] if isinstance(self.rows, dict) else self.rows

    def prepare(self, request: Request) -> Request:
        instance: dict = request.instance  # type: ignore[assignment]
        with self._lock:
            self.prepared.append(instance["id"])
        if instance.get("hold"):
            opened(self._prepare_gate, "prepare")
        if instance.get("invalid"):
            request.fail(InstanceError([f"id {instance['id']}: invalid"]))
            return request
        rows = instance["rows"]
        request.sizes = None if rows is None else Sizes(rows, 1, 1, 1, 2)
        request.plan = Plan()
        return request

    def execute(self, requests: Sequence[Request]) -> None:
        self.started.set()
        opened(self._gate, "execute")
        instances: list[dict] = [r.instance for r in requests]  # type: ignore[misc]
        run = len(self.calls)
        call = Call([inst["id"] for inst in instances], [r.tree for r in requests],
                    [r.cost for r in requests], torch.get_num_threads())
        self.calls.append(call)
        self.stale.extend(i for i, r in zip(call.ids, requests, strict=True) if r.result is not None)
        if self.short and len(requests) > 1:
            return
        poisons = {inst.get("poison") for inst in instances} - {None, False}
        for r, inst in zip(requests, instances, strict=True):
            if not inst.get("poison"):
                r.result = Result({"id": inst["id"], "tree": r.tree, "run": run})
        if "fatal" in poisons:
            raise Fatal("the door stopped")
        if "flide" in poisons:
            raise InstanceError(["poison: refused"])
        if poisons:
            raise ValueError("poisoned")
        call.ok = True
        self.answered.update(call.ids)


def opened(gate: threading.Event, stage: str) -> None:
    """Wait for a test to open `gate`; past WAIT, open it for good and fail (once: a test that failed before
    releasing its gate then closes in one WAIT, not one per call)."""
    if not gate.wait(WAIT):
        gate.set()
        raise AssertionError(f"the test never released {stage}")


def inst(i: int, rows: int | None = 1, **flags: object) -> dict:
    return {"id": i, "rows": rows, **flags}


def held(stand: Stand, scheduler: Scheduler) -> Future:
    """Submit request 0 and wait until the worker is inside its run (blocked on the gate)."""
    first = scheduler.submit(inst(0))
    assert stand.started.wait(WAIT)
    return first


def settle(scheduler: Scheduler, queued: int | None = None, preparing: int = 0) -> None:
    """Wait until the host stage holds `preparing` requests (and `queued` wait to be run): a run takes what
    is prepared, so a test asserting a run's members lets them all arrive first. Reads the Scheduler's
    private queue under its own lock: no public counter tells preparing from prepared."""

    def done() -> bool:
        return scheduler._preparing == preparing and (queued is None or len(scheduler._ready) == queued)

    with scheduler._cond:
        assert scheduler._cond.wait_for(done, WAIT), "the host stage never finished"


def ids(stand: Stand) -> list[list[int]]:
    return [c.ids for c in stand.calls]


def runs(calls: list[Call]) -> list[Call]:
    """The Scheduler's runs among a door's calls, checking execute_isolated's order on the way: a call of
    several requests that raised (or left one without a result) is followed by its first half's calls, then
    its second half's."""
    out: list[Call] = []
    k = 0

    def walk(members: list[int]) -> None:
        nonlocal k
        call = calls[k]
        k += 1
        assert call.ids == members, "a run that raised was not redone as its two halves"
        if not call.ok and len(members) > 1:
            half = len(members) // 2
            walk(members[:half])
            walk(members[half:])

    while k < len(calls):
        out.append(calls[k])
        walk(calls[k].ids)
    return out


def test_a_full_queue_refuses_at_once_with_a_retry_hint() -> None:
    stand = Stand(gated=True)
    with Scheduler(stand, max_batch=8, max_queue=3) as scheduler:
        futures = [held(stand, scheduler)] + [scheduler.submit(inst(i)) for i in (1, 2, 3)]
        with pytest.raises(QueueFull, match=r"queue is full \(3 requests waiting, max_queue=3\): retry in") \
                as refused:
            scheduler.submit(inst(4))
        assert refused.value.depth == 3 and refused.value.limit == 3 and refused.value.retry_after_s > 0
        assert isinstance(refused.value, FlideError)
        assert scheduler.stats().depth == 3 and scheduler.stats().refused == 1
        stand.release()
        assert [f.result(WAIT).record["id"] for f in futures] == [0, 1, 2, 3]
        assert scheduler.answer(inst(5), timeout=WAIT).record["id"] == 5  # room again once the queue drained
    stats = scheduler.stats()
    assert (stats.submitted, stats.refused, stats.answered, stats.depth) == (5, 1, 5, 0)
    assert 4 not in stand.prepared


def test_a_failing_member_fails_only_itself() -> None:
    rng = random.Random(23)
    poisoned = set(rng.sample(range(1, 65), 12))
    stand = Stand(gated=True)
    with Scheduler(stand, max_batch=16) as scheduler:
        futures = [held(stand, scheduler)] + [scheduler.submit(inst(i, poison=i in poisoned))
                                               for i in range(1, 65)]
        stand.release()
        results = [f.result(WAIT) for f in futures]
        assert scheduler.answer(inst(65), timeout=WAIT).record["id"] == 65  # the worker still serves
    stats = scheduler.stats()
    for i, result in enumerate(results):
        if i in poisoned:
            error = result.record["error"]
            assert error["type"] == "ValueError" and error["problems"][0].startswith(ALONE + "poisoned")
            assert not result.ok and result.error is None  # not a FlideError: a bug's record, not its error
        else:
            assert result.ok and result.record == {"id": i, "tree": None, "run": result.record["run"]}
            assert stand.calls[result.record["run"]].ok  # answered by a run that returned, never a raised one
    assert stand.answered == Counter({i: 1 for i in range(66) if i not in poisoned})  # each good one run once
    assert stand.stale == []  # a run that raised part-way answered nobody: its halves ran afresh
    runs(stand.calls)
    assert stats.isolated == 12 and stats.answered == 66 and stats.expired == 0
    assert stats.failed_runs == sum(not c.ok for c in stand.calls) > 12


def test_execute_isolated_redoes_a_raising_run_in_halves_down_to_the_members_failing_alone() -> None:
    stand = Stand()
    requests = [stand.prepare(Request(inst(i, poison={2: "value", 5: "flide"}.get(i, False))))
                for i in range(8)]
    failed, isolated = execute_isolated(stand, requests)
    assert ids(stand) == [[0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3], [0, 1], [2, 3], [2], [3], [4, 5, 6, 7],
                          [4, 5], [4], [5], [6, 7]]
    assert failed == 7 and isolated == [requests[2], requests[5]]
    assert [r.result.record.get("run") for r in requests] == [2, 2, None, 5, 8, None, 10, 10]
    error = requests[2].result.record["error"]
    assert error["type"] == "ValueError" and error["problems"][0].startswith(ALONE + "poisoned")
    assert requests[5].result.record == {"error": {"type": "InstanceError", "problems": ["poison: refused"]}}
    assert isinstance(requests[5].result.error, InstanceError)  # a FlideError is the member's own record
    assert stand.stale == []


def test_execute_leaving_a_request_without_a_result_is_redone_in_halves() -> None:
    stand = Stand(gated=True, short=True)
    with Scheduler(stand, max_batch=8) as scheduler:
        futures = [held(stand, scheduler)] + [scheduler.submit(inst(i)) for i in range(1, 6)]
        settle(scheduler, 5)
        stand.release()
        assert [f.result(WAIT).record["id"] for f in futures] == [0, 1, 2, 3, 4, 5]
    # the calls that left requests without a result: [1..5], then [1, 2] and [3, 4, 5], then [4, 5]
    assert ids(stand) == [[0], [1, 2, 3, 4, 5], [1, 2], [1], [2], [3, 4, 5], [3], [4, 5], [4], [5]]
    assert [c.ids for c in runs(stand.calls)] == [[0], [1, 2, 3, 4, 5]]
    stats = scheduler.stats()
    assert (stats.failed_runs, stats.isolated, stats.answered, stats.batches) == (4, 0, 6, 1)
    assert stats.batch_sizes == {1: 1}  # a run that raised is not a returned batch, whatever its halves did


def test_a_request_failing_in_prepare_is_answered_without_a_run() -> None:
    stand = Stand(gated=True)
    with Scheduler(stand) as scheduler:
        held(stand, scheduler)
        invalid, broken = scheduler.submit(inst(1, invalid=True)), scheduler.submit({"id": 2})
        # answered while the worker is still held inside its run: no run was needed
        want = {"error": {"type": "InstanceError", "problems": ["id 1: invalid"]}}
        assert invalid.result(WAIT).record == want
        assert isinstance(invalid.result(0).error, InstanceError)
        error = broken.result(WAIT).record["error"]
        assert error["type"] == "KeyError"
        assert error["problems"][0].startswith("preparing raised on this instance alone: 'rows'")
        stand.release()
    assert ids(stand) == [[0]]
    stats = scheduler.stats()
    assert (stats.answered, stats.isolated, stats.batches, stats.failed_runs) == (3, 0, 1, 0)


@pytest.mark.parametrize(("streams", "want"), [
    (2, [[0], [1], [2, 4, 5], [3, 6, 7]]),
    (1, [[0], [1], [2], [3], [4, 5, 7], [6]]),
])
def test_runs_take_arrival_order_filled_first_fit_within_streams_times_run_rows(streams, want) -> None:
    """run_rows 4: a run holds `streams` * 4 rows. Request 1 (20 rows) is over any budget: it runs alone; a
    request that does not fit beside the oldest is skipped for a later smaller one; 5 has no sizes: cost 1."""
    rows = {1: 20, 2: 5, 3: 4, 4: 2, 5: None, 6: 3, 7: 1}
    stand = Stand(gated=True, rows=4)
    with Scheduler(stand, streams=streams) as scheduler:
        held(stand, scheduler)
        futures = [scheduler.submit(inst(i, rows[i])) for i in rows]
        settle(scheduler, len(rows))
        stand.release()
        assert [f.result(WAIT).record["id"] for f in futures] == list(rows)
    assert ids(stand) == want
    assert all(c.costs == [rows.get(i) or 1 for i in c.ids] for c in stand.calls[1:])
    assert scheduler.stats().batch_sizes == dict(Counter(len(run) for run in want))


def test_runs_take_arrival_order_when_the_host_stage_finishes_out_of_order() -> None:
    stand = Stand(gated=True)
    with Scheduler(stand, max_batch=1, host_threads=2) as scheduler:
        held(stand, scheduler)
        slow, fast = scheduler.submit(inst(1, hold=True)), scheduler.submit(inst(2))
        settle(scheduler, 1, preparing=1)  # 2 prepared before 1
        stand.release_prepare()
        settle(scheduler, 2)
        stand.release()
        assert slow.result(WAIT).record["run"] == 1 and fast.result(WAIT).record["run"] == 2
    assert ids(stand) == [[0], [1], [2]]


def test_max_batch_caps_a_run() -> None:
    stand = Stand(gated=True)
    with Scheduler(stand, max_batch=3) as scheduler:
        held(stand, scheduler)
        futures = [scheduler.submit(inst(i)) for i in range(1, 8)]
        settle(scheduler, 7)
        stand.release()
        assert [f.result(WAIT).record["id"] for f in futures] == list(range(1, 8))
    assert ids(stand) == [[0], [1, 2, 3], [4, 5, 6], [7]]
    assert scheduler.stats().batch_sizes == {1: 2, 3: 2}


def test_a_run_holds_one_tree_within_that_trees_budget() -> None:
    """run_rows per tree, two streams: tree a holds 2 one-row requests a run, tree b 8."""
    trees = {1: "a", 2: "b", 3: "a", 4: "b", 5: "a", 6: None, 7: "b"}
    stand = Stand(gated=True, rows={None: 8, "a": 1, "b": 4})
    with Scheduler(stand) as scheduler:
        held(stand, scheduler)
        futures = {i: scheduler.submit(inst(i), tree) for i, tree in trees.items()}
        settle(scheduler, len(trees))
        stand.release()
        for i, f in futures.items():
            assert f.result(WAIT).record["tree"] == trees[i]
    assert ids(stand) == [[0], [1, 3], [2, 4, 7], [5], [6]]
    assert all(len(set(c.trees)) == 1 for c in stand.calls)
    assert stand.asked == [None, "a", "b", "a", None]  # each run's budget is its oldest request's tree's


def test_a_cancelled_future_is_never_prepared_or_executed() -> None:
    stand = Stand(gated=True)
    with Scheduler(stand, host_threads=1) as scheduler:
        held(stand, scheduler)
        first = scheduler.submit(inst(1, hold=True))  # holds the one host thread
        waiting = scheduler.submit(inst(2))  # waits for the host thread
        assert waiting.cancel()
        queued, last = scheduler.submit(inst(3)), scheduler.submit(inst(4))
        stand.release_prepare()
        settle(scheduler, 3)
        assert queued.cancel()  # prepared, waiting for the worker
        assert scheduler.stats().depth == 3
        stand.release()
        assert first.result(WAIT).record["id"] == 1 and last.result(WAIT).record["id"] == 4
    assert waiting.cancelled() and queued.cancelled()
    assert ids(stand) == [[0], [1, 4]]
    assert 2 not in stand.prepared
    stats = scheduler.stats()
    assert (stats.submitted, stats.cancelled, stats.answered, stats.depth) == (5, 2, 3, 0)


def test_a_request_past_its_deadline_gets_deadline_exceeded_instead_of_a_run() -> None:
    stand = Stand(gated=True)
    with Scheduler(stand, max_batch=8) as scheduler:
        held(stand, scheduler)
        late, fine = scheduler.submit(inst(1), deadline_s=0.0), scheduler.submit(inst(2), deadline_s=3600.0)
        gone = scheduler.submit(inst(3), deadline_s=0.0)
        settle(scheduler, 3)
        assert gone.cancel()  # a cancelled one past its deadline counts as cancelled, not expired
        stand.release()
        error = late.result(WAIT).record["error"]
        assert error["type"] == "DeadlineExceeded"
        assert error["problems"][0].startswith("the request waited ")
        assert "s, past its deadline, before it was run" in error["problems"][0]
        assert not late.result(0).ok
        assert fine.result(WAIT).record == {"id": 2, "tree": None, "run": 1}
        # a queue holding only expired requests runs nothing
        alone = scheduler.submit(inst(4), deadline_s=0.0).result(WAIT)
        assert alone.record["error"]["type"] == "DeadlineExceeded"
        assert scheduler.answer(inst(5), timeout=WAIT).record["id"] == 5
    assert ids(stand) == [[0], [2], [5]]  # the late ones never ran
    stats = scheduler.stats()
    assert (stats.expired, stats.cancelled, stats.answered, stats.batches) == (2, 1, 5, 3)


@pytest.mark.parametrize("threads", [None, 1])
def test_the_worker_runs_with_the_threads_setting_or_the_constructing_threads_count(monkeypatch,
                                                                                   threads) -> None:
    calls: list[tuple[str, int]] = []
    real = torch.set_num_threads
    main = torch.get_num_threads()

    def recording(n: int) -> None:
        calls.append((threading.current_thread().name, n))
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", recording)
    stand = Stand()
    try:
        with Scheduler(stand, threads=threads) as scheduler:
            scheduler.answer(inst(0), timeout=WAIT)
    finally:  # a thread's setting becomes new threads' default: give them the main thread's back
        restore = threading.Thread(target=real, args=(main,))
        restore.start()
        restore.join()
    want = threads or main
    assert calls == [("flidec-scheduler", want)]
    assert stand.calls[0].threads == want


def test_close_answers_what_is_preparing_and_queued_and_refuses_new_submits() -> None:
    stand = Stand(gated=True)
    scheduler = Scheduler(stand, max_batch=2)
    futures = [held(stand, scheduler)] + [scheduler.submit(inst(i)) for i in range(1, 6)]
    settle(scheduler, 5)
    futures.append(scheduler.submit(inst(6, hold=True)))  # still preparing when close() is called
    closer = threading.Thread(target=scheduler.close)
    closer.start()
    while not scheduler.closed:  # close() sets the flag at once, then waits for the worker
        closer.join(0.001)
    with pytest.raises(SchedulerClosed, match="closed"):
        scheduler.submit(inst(9))
    assert closer.is_alive()
    stand.release_prepare()
    settle(scheduler, 6)
    stand.release()
    closer.join(WAIT)
    assert not closer.is_alive()
    assert [f.result(0).record["id"] for f in futures] == [0, 1, 2, 3, 4, 5, 6]
    assert ids(stand) == [[0], [1, 2], [3, 4], [5, 6]]
    scheduler.close()  # again: nothing left to do
    assert scheduler.stats().submitted == 7 and scheduler.stats().answered == 7
    assert isinstance(SchedulerClosed("x"), RuntimeError)  # callers catching RuntimeError keep working


def test_close_waits_for_a_request_still_in_the_host_stage_with_nothing_queued() -> None:
    stand = Stand()
    scheduler = Scheduler(stand)
    preparing = scheduler.submit(inst(1, hold=True))
    closer = threading.Thread(target=scheduler.close)
    closer.start()
    while not scheduler.closed:
        closer.join(0.001)
    stand.release_prepare()
    assert preparing.result(WAIT).record == {"id": 1, "tree": None, "run": 0}
    closer.join(WAIT)
    assert not closer.is_alive() and ids(stand) == [[1]]


def test_max_wait_s_holds_the_oldest_request_for_company_until_max_batch_or_close() -> None:
    """With a max_wait_s far past WAIT, only max_batch requests ready (or close) end the wait: a scheduler
    that waited it out fails on WAIT instead."""
    stand = Stand()
    scheduler = Scheduler(stand, max_batch=3, max_wait_s=10 * WAIT)
    futures = [scheduler.submit(inst(i)) for i in range(3)]
    assert [f.result(WAIT).record["id"] for f in futures] == [0, 1, 2]
    lone = scheduler.submit(inst(3))
    settle(scheduler, 1)
    closer = threading.Thread(target=scheduler.close)
    closer.start()
    closer.join(WAIT)
    assert not closer.is_alive()
    assert lone.result(0).record["id"] == 3
    assert ids(stand) == [[0, 1, 2], [3]]


@pytest.mark.parametrize("bad", [{"max_batch": 0}, {"max_queue": 0}, {"streams": 0}, {"max_wait_s": -1.0},
                                 {"threads": 0}, {"host_threads": 0}])
def test_settings_below_their_minimum_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        Scheduler(Stand(), **bad)


def test_a_submitted_request_is_prepared_in_place_and_answered_with_the_result_its_run_set() -> None:
    stand = Stand(rows={"a": 8})
    request = Request(inst(1, rows=3), "a")
    with Scheduler(stand) as scheduler:
        result = scheduler.submit(request).result(WAIT)
    assert result is request.result and result.record == {"id": 1, "tree": "a", "run": 0}
    assert request.sizes == Sizes(3, 1, 1, 1, 2) and request.cost == 3
    assert Request(None).cost == 1 and Request(None, sizes=Sizes(0, 1, 1, 1, 2)).cost == 1


@THREAD_DIED
def test_a_worker_stopped_by_its_door_fails_what_it_held_and_what_waits_and_closes() -> None:
    stand = Stand(gated=True)
    scheduler = Scheduler(stand, max_batch=2)
    first = scheduler.submit(inst(0, poison="fatal"))  # a BaseException: execute_isolated does not catch it
    assert stand.started.wait(WAIT)
    queued = [scheduler.submit(inst(i)) for i in (1, 2, 3)]
    settle(scheduler, 3)
    stand.release()
    for f in [first, *queued]:
        with pytest.raises(RuntimeError, match=r"the scheduler's worker stopped \(Fatal"):
            f.result(WAIT)
    assert scheduler.closed
    with pytest.raises(SchedulerClosed):
        scheduler.submit(inst(4))
    scheduler.close()  # the worker is gone: returns at once
    assert ids(stand) == [[0]]


@THREAD_DIED
def test_a_request_still_preparing_when_the_worker_stops_is_failed_too() -> None:
    stand = Stand()
    scheduler = Scheduler(stand, host_threads=2)
    preparing = scheduler.submit(inst(1, hold=True))
    fatal = scheduler.submit(inst(2, poison="fatal"))
    with pytest.raises(RuntimeError, match="worker stopped"):
        fatal.result(WAIT)
    stand.release_prepare()
    try:
        with pytest.raises(RuntimeError, match="worker stopped"):
            preparing.result(STRANDED)
    finally:
        scheduler.close()


@THREAD_DIED
def test_a_request_carrying_its_own_deadline_gets_deadline_exceeded() -> None:
    stand = Stand()
    with Scheduler(stand) as scheduler:
        late = scheduler.submit(Request(inst(1), deadline=time.monotonic() - 1))
        assert late.result(STRANDED).record["error"]["type"] == "DeadlineExceeded"
        assert scheduler.answer(inst(2), timeout=WAIT).record["id"] == 2
    assert ids(stand) == [[2]]


def test_deadline_s_counts_from_submit_for_a_request_that_arrived_earlier() -> None:
    """runtime/http/service.py submits Request(inst, tree, arrived=arrived) with deadline_s = the seconds
    left: counted from the arrival, that time would be taken off twice."""
    stand = Stand()
    with Scheduler(stand) as scheduler:
        request = Request(inst(1), arrived=time.monotonic() - 3600)
        result = scheduler.submit(request, deadline_s=WAIT * 10).result(WAIT)
    assert result.record == {"id": 1, "tree": None, "run": 0}


def test_stats_count_depth_batches_and_sizes() -> None:
    stand = Stand(gated=True)
    with Scheduler(stand, max_batch=8) as scheduler:
        held(stand, scheduler)
        futures = [scheduler.submit(inst(i)) for i in range(1, 6)]
        settle(scheduler, 5)
        assert futures[4].cancel()
        assert scheduler.stats().depth == 5
        stand.release()
        for f in futures[:4]:
            f.result(WAIT)
    stats = scheduler.stats()
    assert (stats.depth, stats.submitted, stats.answered, stats.cancelled, stats.refused) == (0, 6, 5, 1, 0)
    assert (stats.batches, stats.batch_sizes, stats.failed_runs, scheduler.batches) == (2, {1: 1, 4: 1}, 0, 2)
    assert (stats.expired, stats.isolated) == (0, 0)


# rows (None: no sizes), poison, tree, past its deadline, invalid, cancelled by its caller
op = st.tuples(st.one_of(st.none(), st.integers(0, 12)), st.sampled_from([False, "value", "flide"]),
               st.sampled_from([None, "b"]), st.booleans(), st.booleans(), st.booleans())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans=st.lists(st.lists(op, max_size=10), min_size=1, max_size=4), max_queue=st.integers(1, 12),
       max_batch=st.integers(1, 6), streams=st.integers(1, 3), rows=st.tuples(st.integers(1, 6),
                                                                              st.integers(1, 6)))
def test_random_submits_from_several_threads_are_each_answered_once(plans, max_queue, max_batch, streams,
                                                                    rows) -> None:
    """Every accepted request gets exactly its own answer or error record once (or stays cancelled), every
    refused one a QueueFull; runs hold one tree, at most max_batch members, within the rows budget unless
    alone, in each caller's order; the counters add up."""
    budget = {None: rows[0], "b": rows[1]}
    stand = Stand(rows=budget)
    accepted: dict[int, tuple[Future, tuple, bool]] = {}
    refused: list[int] = []
    lock = threading.Lock()

    def caller(t: int, plan: list[tuple]) -> None:
        for k, spec in enumerate(plan):
            size, poison, tree, expires, invalid, cancel = spec
            i = 1000 * t + k
            try:
                future = scheduler.submit(inst(i, size, poison=poison, invalid=invalid), tree,
                                          deadline_s=0.0 if expires else None)
            except QueueFull as e:
                assert e.retry_after_s > 0 and e.limit == max_queue
                with lock:
                    refused.append(i)
                continue
            dropped = cancel and future.cancel()
            with lock:
                accepted[i] = (future, spec, dropped)

    with Scheduler(stand, max_batch=max_batch, max_queue=max_queue, streams=streams) as scheduler:
        threads = [threading.Thread(target=caller, args=(t, plan)) for t, plan in enumerate(plans)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        results = {i: future.result(WAIT) for i, (future, _, dropped) in accepted.items() if not dropped}
    stats = scheduler.stats()
    assert len(accepted) + len(refused) == sum(len(plan) for plan in plans)
    ran = {i for c in stand.calls for i in c.ids}
    good: Counter[int] = Counter()
    kinds: Counter[str] = Counter()
    for i, (future, (_, poison, tree, expires, invalid, _), dropped) in accepted.items():
        if dropped:
            assert future.cancelled() and i not in ran
            continue
        record = results[i].record
        if invalid:
            kinds["prepare"] += 1
            assert record == {"error": {"type": "InstanceError", "problems": [f"id {i}: invalid"]}}
            assert i not in ran
        elif expires:
            kinds["expired"] += 1
            assert record["error"]["type"] == "DeadlineExceeded" and i not in ran
        elif poison:
            kinds["isolated"] += 1
            want = "InstanceError" if poison == "flide" else "ValueError"
            assert record["error"]["type"] == want
        else:
            assert record == {"id": i, "tree": tree, "run": record["run"]}
            assert stand.calls[record["run"]].ok and i in stand.calls[record["run"]].ids
            good[i] += 1
    assert stand.answered == good  # every good answer computed by exactly one returned run
    assert stand.stale == []
    top = runs(stand.calls)
    for run in top:
        tree = accepted[run.ids[0]][1][2]
        assert len(run.ids) <= max_batch and set(run.trees) == {tree}
        assert len(run.ids) == 1 or sum(run.costs) <= streams * budget[tree]
        for t in range(len(plans)):
            mine = [i for i in run.ids if i // 1000 == t]
            assert mine == sorted(mine)  # arrival order
    dropped = sum(d for _, _, d in accepted.values())
    assert (stats.submitted, stats.refused, stats.depth) == (len(accepted), len(refused), 0)
    assert (stats.answered, stats.cancelled) == (len(accepted) - dropped, dropped)
    assert (stats.expired, stats.isolated) == (kinds["expired"], kinds["isolated"])
    assert stats.failed_runs == sum(not c.ok for c in stand.calls)
    assert stats.batches == sum(run.ok for run in top)
    assert stats.batch_sizes == dict(Counter(len(run.ids) for run in top if run.ok))


class Touchy:
    """The real Program as a door whose execute, once its gate opens, runs the requests and then raises on
    a run holding an instance whose state says "poison": a run that raised part-way."""

    def __init__(self, program):
        self.program = program
        self.sizes: list[int] = []  # requests per execute call
        self.started = threading.Event()
        self.gate = threading.Event()

    def prepare(self, request: Request) -> Request:
        return self.program.prepare(request)

    def run_rows(self, tree: str | None = None) -> int:
        return self.program.run_rows(tree)

    def execute(self, requests: Sequence[Request]) -> None:
        self.started.set()
        opened(self.gate, "execute")
        self.sizes.append(len(requests))
        self.program.execute(requests)
        if any("poison" in r.instance["state"] for r in requests):  # type: ignore[index]
            raise ValueError("poisoned")


def question(i: int) -> dict:
    state = f"Instance number {i} " + ("is poison." if i % 6 == 5 else "talks about colours.")
    return {"state": state, "questions": {f"q{i}": {"type": "noul", "instructions": f"Is {i} even?"}}}


def test_concurrent_callers_get_their_own_answers_from_the_real_program(systemone_cpu_artifact) -> None:
    program = load(systemone_cpu_artifact, "cpu", dtype="fp32")
    good = [i for i in range(24) if i % 6 != 5]
    want = {i: program.run([question(i)])[0] for i in good}
    door = Touchy(program)
    futures: dict[object, Future] = {}
    with Scheduler(door) as scheduler:
        futures[0] = scheduler.submit(question(0))
        assert door.started.wait(WAIT)  # the first run holds the worker while the callers submit

        def caller(t: int) -> None:
            for i in range(1 + t, 24, 4):
                futures[i] = scheduler.submit(question(i))

        threads = [threading.Thread(target=caller, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        futures["invalid"] = scheduler.submit("not an object")
        for thread in threads:
            thread.join(WAIT)
        settle(scheduler)
        door.gate.set()
        got = {i: f.result(WAIT * 5) for i, f in futures.items()}
    invalid = got.pop("invalid")
    assert invalid.record["error"]["type"] == "InstanceError" and isinstance(invalid.error, InstanceError)
    for i, result in got.items():
        if i in want:
            assert result.ok and result.record == want[i]
        else:
            error = result.record["error"]
            assert error["type"] == "ValueError" and error["problems"][0].startswith(ALONE + "poisoned")
    assert door.sizes[:2] == [1, 23]  # the callers' requests shared one run, redone in halves
    stats = scheduler.stats()
    assert (stats.answered, stats.isolated, stats.expired, stats.cancelled) == (25, 4, 0, 0)
