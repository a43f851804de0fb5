"""The Server queue: a full queue refuses at once with a retry hint, a batch member whose run raises fails
only itself (on a stand-in Program and on the real one over the systemone cpu artifact), small requests pass
larger ones within the aging bound, deadlines, the worker's torch threads, close, the stats counters, and
random submit patterns from several threads (hypothesis). Ordering is made deterministic by a stand-in
whose run blocks on a gate, so requests wait together; tests assert orders and counts, never wall time.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flidec.runtime.program import load
from flidec.runtime.serve import QueueFull, Server, ServerClosed

WAIT = 60  # seconds a test waits on a future or gate before it fails instead of hanging


class Stand:
    """A Program stand-in: answers {"id", "tree"} per instance, raises if any instance is poisoned, records
    every call (ids, tree, torch's thread count) and, with `gated`, holds its first call until `release()`."""

    def __init__(self, gated: bool = False, after: Callable[[int], None] | None = None):
        self.calls: list[tuple[list[int], str | None, int]] = []
        self.answered: Counter[int] = Counter()  # ids in runs that returned
        self.started = threading.Event()
        self._gate = threading.Event()
        if not gated:
            self._gate.set()
        self._after = after

    def release(self) -> None:
        self._gate.set()

    def run(self, instances: Sequence[object], tree: str | None = None) -> list[dict]:
        self.started.set()
        assert self._gate.wait(WAIT), "the test never released the gate"
        ids = [inst["id"] for inst in instances]  # type: ignore[index]
        self.calls.append((ids, tree, torch.get_num_threads()))
        if self._after is not None:
            self._after(len(self.calls))
        if any(inst.get("poison") for inst in instances):  # type: ignore[attr-defined]
            raise ValueError("poisoned")
        self.answered.update(ids)
        return [{"id": i, "tree": tree} for i in ids]


def req(i: int, size: int = 0, poison: bool = False) -> dict:
    return {"id": i, "text": "x" * size, "poison": poison}


def held(stand: Stand, server: Server) -> Future:
    """Submit request 0 and wait until the worker is inside its run (blocked on the gate)."""
    first = server.submit(req(0))
    assert stand.started.wait(WAIT)
    return first


def test_a_full_queue_refuses_at_once_with_a_retry_hint() -> None:
    stand = Stand(gated=True)
    with Server(stand, max_batch=8, max_queue=3) as server:
        futures = [held(stand, server)] + [server.submit(req(i)) for i in (1, 2, 3)]
        with pytest.raises(QueueFull, match=r"queue is full \(3 requests waiting, max_queue=3\)") as refused:
            server.submit(req(4))
        assert refused.value.depth == 3 and refused.value.limit == 3 and refused.value.retry_after_s > 0
        assert server.stats().depth == 3 and server.stats().refused == 1
        stand.release()
        assert [f.result(WAIT)["id"] for f in futures] == [0, 1, 2, 3]
        assert server.answer(req(5), timeout=WAIT)["id"] == 5  # room again once the queue drained
    assert server.stats().submitted == 5 and server.stats().answered == 5


def test_a_failing_member_fails_only_itself() -> None:
    rng = random.Random(23)
    poisoned = set(rng.sample(range(1, 65), 12))
    stand = Stand(gated=True)
    with Server(stand, max_batch=16) as server:
        futures = [held(stand, server)] + [server.submit(req(i, poison=i in poisoned)) for i in range(1, 65)]
        stand.release()
        results = [f.result(WAIT) for f in futures]
        assert server.answer(req(65), timeout=WAIT)["id"] == 65  # the worker still serves
        stats = server.stats()
    for i, result in enumerate(results):
        if i in poisoned:
            error = result["error"]
            assert error["type"] == "ValueError" and "alone: poisoned" in error["problems"][0]
        else:
            assert result == {"id": i, "tree": None}
    assert stand.answered == Counter({i: 1 for i in range(66) if i not in poisoned})  # each good one run once
    assert stats.isolated == 12 and stats.answered == 66 and stats.failed_runs > 0


def test_instances_json_cannot_write_are_queued_and_fail_only_themselves() -> None:
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    odd = [object(), {"id": 1, "n": 10**5000}, deep, {"id": 2}]
    with Server(Stand(), max_batch=8, max_wait_s=0.05) as server:
        results = [f.result(WAIT) for f in [server.submit(x) for x in odd]]
    assert [r.get("id") for r in results] == [None, 1, None, 2]  # sized without raising, then run
    assert [results[k]["error"]["type"] for k in (0, 2)] == ["TypeError", "TypeError"]  # the stand's own


class Short(Stand):
    """A broken Program that returns no results for a batch of several instances."""

    def run(self, instances: Sequence[object], tree: str | None = None) -> list[dict]:
        results = super().run(instances, tree)
        return results if len(results) == 1 else []


def test_a_run_returning_the_wrong_number_of_results_is_redone_in_halves() -> None:
    stand = Short(gated=True)
    with Server(stand, max_batch=8) as server:
        futures = [held(stand, server)] + [server.submit(req(i)) for i in range(1, 6)]
        stand.release()
        assert [f.result(WAIT) for f in futures] == [{"id": i, "tree": None} for i in range(6)]
    # the runs that raised: [1..5], then [1, 2] and [3, 4, 5], then [4, 5]
    assert server.stats().failed_runs == 4 and server.stats().isolated == 0


class SurrogateProgram:
    """The real Program behind a tokenizer-like step that raises on a state holding a lone surrogate."""

    def __init__(self, program):
        self.program = program

    def run(self, instances: Sequence[object], tree: str | None = None) -> list[dict]:
        for inst in instances:
            inst["state"].encode("utf-8")  # type: ignore[index]
        return self.program.run(instances, tree)


def systemone_question(i: int) -> dict:
    state = f"Instance number {i} talks about colours." + ("\ud800" if i % 6 == 5 else "")
    return {"state": state, "questions": {f"q{i}": {"type": "noul", "instructions": f"Is {i} even?"}}}


def test_a_failing_member_fails_only_itself_on_the_real_program(systemone_cpu_artifact) -> None:
    program = load(systemone_cpu_artifact, "cpu", dtype="fp32", served_name="jev")
    good = [i for i in range(24) if i % 6 != 5]
    want = {i: program.run([systemone_question(i)])[0] for i in good}
    with Server(SurrogateProgram(program), max_batch=8, max_wait_s=0.05) as server:
        futures = [server.submit(systemone_question(i)) for i in range(24)]
        got = [f.result(WAIT * 5) for f in futures]
    for i, result in enumerate(got):
        if i in want:
            assert result == want[i]
        else:
            assert result["error"]["type"] == "UnicodeEncodeError"
    assert server.stats().isolated == 4 and server.stats().answered == 24


def test_a_small_request_passes_a_larger_one_queued_before_it() -> None:
    stand = Stand(gated=True)
    with Server(stand, max_batch=8, max_batch_cost=1000) as server:
        held(stand, server)
        large, small = server.submit(req(1, size=5000)), server.submit(req(2))
        stand.release()
        assert large.result(WAIT)["id"] == 1 and small.result(WAIT)["id"] == 2
    assert [ids for ids, _, _ in stand.calls] == [[0], [2], [1]]


def test_small_requests_share_a_batch_within_the_cost_budget_and_a_large_one_runs_alone() -> None:
    stand = Stand(gated=True)
    with Server(stand, max_batch=8, max_batch_cost=2000) as server:
        held(stand, server)
        futures = [server.submit(req(1, size=3000))] + [server.submit(req(i, size=100)) for i in range(2, 6)]
        stand.release()
        assert [f.result(WAIT)["id"] for f in futures] == [1, 2, 3, 4, 5]
    assert [ids for ids, _, _ in stand.calls] == [[0], [2, 3, 4, 5], [1]]


@pytest.mark.parametrize("max_overtake", [0, 3])
def test_a_large_request_is_passed_over_at_most_max_overtake_times(max_overtake: int) -> None:
    """Two new small requests arrive during every run; without aging the large one would wait for all 38."""
    submitted = []

    def more(calls: int) -> None:
        if calls < 20:
            submitted.extend(server.submit(req(100 + 2 * calls + k)) for k in range(2))

    stand = Stand(gated=True, after=more)
    with Server(stand, max_batch=1, max_overtake=max_overtake) as server:
        held(stand, server)
        large = server.submit(req(1, size=5000))
        stand.release()
        assert large.result(WAIT)["id"] == 1
        assert all(f.result(WAIT)["id"] >= 100 for f in submitted)
    order = [ids[0] for ids, _, _ in stand.calls]
    assert order.index(1) == 1 + max_overtake  # after the held request and exactly max_overtake newer ones
    assert len(order) == 2 + len(submitted)


def test_a_request_past_its_deadline_gets_a_timeout_error_instead_of_a_run() -> None:
    stand = Stand(gated=True)
    with Server(stand, max_batch=8) as server:
        held(stand, server)
        late, fine = server.submit(req(1), deadline_s=0.0), server.submit(req(2), deadline_s=3600.0)
        stand.release()
        error = late.result(WAIT)["error"]
        assert error["type"] == "DeadlineExceeded" and "deadline_s=0" in error["problems"][0]
        assert fine.result(WAIT) == {"id": 2, "tree": None}
    assert [ids for ids, _, _ in stand.calls] == [[0], [2]]  # the late one never ran
    assert server.stats().expired == 1


def test_the_worker_runs_with_the_constructing_threads_torch_thread_count(monkeypatch) -> None:
    calls: list[tuple[str, int]] = []
    real = torch.set_num_threads

    def recording(n: int) -> None:
        calls.append((threading.current_thread().name, n))
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", recording)
    main = torch.get_num_threads()
    stand = Stand()
    with Server(stand) as server:
        server.answer(req(0), timeout=WAIT)
    assert calls == [("flidec-server", main)]
    assert stand.calls[0][2] == main


def test_close_answers_what_is_queued_and_refuses_new_submits() -> None:
    stand = Stand(gated=True)
    server = Server(stand, max_batch=2)
    futures = [held(stand, server)] + [server.submit(req(i)) for i in range(1, 6)]
    closer = threading.Thread(target=server.close)
    closer.start()
    while not server.closed:  # close() sets the flag at once, then waits for the worker
        closer.join(0.001)
    with pytest.raises(ServerClosed, match="closed"):
        server.submit(req(9))
    stand.release()
    closer.join(WAIT)
    assert not closer.is_alive()
    assert [f.result(0)["id"] for f in futures] == [0, 1, 2, 3, 4, 5]
    assert isinstance(ServerClosed("x"), RuntimeError)  # callers catching RuntimeError keep working


def test_stats_count_depth_batches_and_sizes() -> None:
    stand = Stand(gated=True)
    with Server(stand, max_batch=8) as server:
        held(stand, server)
        futures = [server.submit(req(i)) for i in range(1, 6)]
        futures[4].cancel()
        assert server.stats().depth == 5
        stand.release()
        for f in futures[:4]:
            f.result(WAIT)
    stats = server.stats()
    assert (stats.depth, stats.submitted, stats.answered, stats.cancelled) == (0, 6, 5, 1)
    assert (stats.batches, stats.batch_sizes, stats.failed_runs, server.batches) == (2, {1: 1, 4: 1}, 0, 2)


op = st.tuples(st.integers(0, 3000), st.booleans(), st.sampled_from([None, "b"]), st.booleans())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans=st.lists(st.lists(op, max_size=12), min_size=1, max_size=4), max_queue=st.integers(1, 12),
       max_batch=st.integers(1, 6), max_batch_cost=st.integers(1, 4000), max_overtake=st.integers(0, 4))
def test_random_submits_from_several_threads_are_each_answered_once(plans, max_queue, max_batch,
                                                                    max_batch_cost, max_overtake) -> None:
    """Every accepted request gets exactly its own answer (or its error record) once, every refused one a
    QueueFull, batches hold one tree and at most max_batch members, and the counters add up."""
    stand = Stand()
    accepted: dict[int, tuple[Future, bool, str | None, bool]] = {}
    refused: list[int] = []
    lock = threading.Lock()

    def caller(t: int, plan: list[tuple[int, bool, str | None, bool]]) -> None:
        for k, (size, poison, tree, expires) in enumerate(plan):
            i = 1000 * t + k
            try:
                future = server.submit(req(i, size, poison), tree, deadline_s=0.0 if expires else None)
            except QueueFull:
                with lock:
                    refused.append(i)
                continue
            with lock:
                accepted[i] = (future, poison, tree, expires)

    with Server(stand, max_batch=max_batch, max_queue=max_queue, max_batch_cost=max_batch_cost,
                max_overtake=max_overtake) as server:
        threads = [threading.Thread(target=caller, args=(t, plan)) for t, plan in enumerate(plans)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        results = {i: (future.result(WAIT), *rest) for i, (future, *rest) in accepted.items()}
    stats = server.stats()
    assert len(accepted) + len(refused) == sum(len(plan) for plan in plans)
    answered = Counter()
    for i, (result, poison, tree, expires) in results.items():
        if "error" in result:
            assert result["error"]["type"] == ("DeadlineExceeded" if expires else "ValueError")
        else:
            assert not poison and result == {"id": i, "tree": tree}
            answered[i] += 1
    assert stand.answered == answered  # every good answer computed by exactly one returned run
    for ids, tree, _ in stand.calls:
        assert len(ids) <= max_batch and {accepted[i][2] for i in ids} == {tree}
    assert (stats.submitted, stats.refused, stats.answered, stats.depth) == (len(accepted), len(refused),
                                                                              len(accepted), 0)
    assert sum(size * n for size, n in stats.batch_sizes.items()) == len(answered)
    assert stats.isolated + stats.expired == len(accepted) - len(answered)
