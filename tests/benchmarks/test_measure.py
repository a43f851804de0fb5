"""The cell procedure of benchmarks/measure.py with a scripted engine (sleeps stand in for work): a first
call that compiles does not make the cell cold or mislead the speed estimate of the next cells; an engine
slower than the cap gives a cold cell and no estimate; a known speed skips a cell that cannot fit. Then,
on a virtual clock (exact numbers), an engine that compiles for every new shape: one that says so gets a
shape warm-up and clean timed runs, or, when the warm-up takes the cap, one marked run; one that does not
say so is marked by its slow timed run; latencies met at new shapes are marked; an engine that compiles
only on its first call is measured as before."""

from __future__ import annotations

import time

import pytest
import torch

from benchmarks import measure as measure_module
from benchmarks.measure import measure, seconds_per_token
from benchmarks.work import Read, Work


def work(instances: int = 6, tokens: int = 100) -> Work:
    reads = tuple(Read(i, tuple(range(tokens)), tokens, (1, 2), "noul", 0) for i in range(instances))
    forests = tuple(((-1, tuple(range(tokens))),) for _ in range(instances))
    return Work("scripted", forests, reads, tuple((i,) for i in range(instances)), 0.0, None)


class Scripted:
    """Sleeps `compile_s` on its first call, then `per_token_s` per computed token."""

    name, computes = "scripted", "solo"

    def __init__(self, compile_s: float, per_token_s: float):
        self.compile_s, self.per_token_s, self.calls = compile_s, per_token_s, 0

    def run(self, w: Work, instances, offline: bool):
        self.calls += 1
        compile_s = self.compile_s if self.calls == 1 else 0
        time.sleep(compile_s + self.per_token_s * w.tokens(instances, "solo"))
        return {r: torch.zeros(2) for r in w.read_ids(instances)}


def test_a_compiling_first_call_is_not_the_measurement() -> None:
    w = work()
    cell = measure(Scripted(compile_s=1.0, per_token_s=1e-5), w, w, cap_s=0.8, device="cpu")
    assert not cell.cold and cell.instances == list(range(6)) and len(cell.offline_s) >= 1
    assert max(cell.offline_s) < 0.5  # 600 tokens at 10 us, never the compile
    spt = seconds_per_token(Scripted(0, 0), w, cell)
    assert spt is not None and spt < 1e-3


def test_an_engine_slower_than_the_cap_is_cold_and_predicts_nothing() -> None:
    w = work()
    cell = measure(Scripted(compile_s=0.0, per_token_s=4e-3), w, w, cap_s=0.5, device="cpu")  # 0.4 s each
    assert cell.cold and cell.instances == [0] and len(cell.offline_s) == 1
    assert seconds_per_token(Scripted(0, 0), w, cell) is None


def test_a_known_speed_skips_a_cell_that_cannot_fit() -> None:
    w = work()
    engine = Scripted(compile_s=0.0, per_token_s=0.0)
    cell = measure(engine, w, w, cap_s=1.0, device="cpu", seconds_per_token=0.1)  # 10 s an instance
    assert cell.status == "skipped" and "one instance needs ~10 s" in cell.error and engine.calls == 0


class Clock:
    """measure()'s time in the tests below: engines advance it instead of sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(measure_module, "time", c)
    return c


class Jit:
    """Takes `compile_s` the first time it meets a call's shape (offline: the instances as one batch; online:
    the instance), or only on its very first call (`per_shape=False`), plus `per_token_s` per computed token;
    says `compiles_per_shape` only when `declares`. `calls`: (offline, instances, compiled) per call."""

    name, computes = "jit", "solo"

    def __init__(self, clock: Clock, compile_s: float, per_token_s: float, per_shape=True, declares=True):
        self.clock, self.compile_s, self.per_token_s = clock, compile_s, per_token_s
        self.per_shape = per_shape
        if declares:
            self.compiles_per_shape = True
        self.seen: set = set()
        self.calls: list[tuple[bool, tuple[int, ...], bool]] = []

    def run(self, w: Work, instances, offline: bool):
        shape = (offline, tuple(instances)) if self.per_shape else ()
        compiled = shape not in self.seen
        self.seen.add(shape)
        self.clock.now += self.compile_s * compiled + self.per_token_s * w.tokens(instances, "solo")
        self.calls.append((offline, tuple(instances), compiled))
        return {r: torch.zeros(2) for r in w.read_ids(instances)}


ALL = tuple(range(6))  # work(): 6 instances of 100 tokens


def test_a_per_shape_engine_gets_a_shape_warm_up_and_clean_timed_runs(clock: Clock) -> None:
    w = work()
    engine = Jit(clock, compile_s=1.0, per_token_s=1e-4)  # 10 ms an instance, 1 s a new shape
    cell = measure(engine, w, w, cap_s=10.0, device="cpu")
    assert cell.instances == list(ALL) and cell.compiling is None and cell.latency_compiling is None
    assert cell.shape_warmup_s == pytest.approx(1.06)  # the compile and one pass, untimed
    assert cell.offline_s == pytest.approx([0.06] * 3)
    assert cell.latency_s == pytest.approx([0.01] * 6)  # the warm pass compiled each online shape
    assert [c for off, ids, c in engine.calls if off and ids == ALL] == [True, False, False, False]
    assert cell.seconds <= 1.01 + 10.0  # the first call, then the cap (the shape warm-up inside it)
    assert seconds_per_token(engine, w, cell) == pytest.approx(1e-4)


def test_a_shape_warm_up_that_takes_the_cap_is_the_one_run_and_marked(clock: Clock) -> None:
    w = work()
    engine = Jit(clock, compile_s=1.0, per_token_s=1e-4)
    cell = measure(engine, w, w, cap_s=2.0, device="cpu")  # 0.98 s left when the warm-up starts
    assert cell.instances == list(ALL) and cell.offline_s == pytest.approx([1.06])
    assert cell.shape_warmup_s == pytest.approx(1.06)
    assert cell.compiling.startswith("no timed run fit after the shape warm-up (1.06 s over 6 instances)")
    assert [ids for off, ids, _ in engine.calls if off].count(ALL) == 1  # no timed run after it
    assert cell.seconds == pytest.approx(1.01 + 0.01 + 1.01 + 1.06)  # over the cap by the warm-up's compile
    assert seconds_per_token(engine, w, cell) is None  # its one run holds the compiles


def test_an_undeclared_compile_in_a_timed_run_marks_the_cell(clock: Clock) -> None:
    w = work()
    engine = Jit(clock, compile_s=1.0, per_token_s=1e-4, declares=False)
    cell = measure(engine, w, w, cap_s=10.0, device="cpu")
    assert cell.shape_warmup_s is None and cell.offline_s == pytest.approx([1.06, 0.06, 0.06])
    assert cell.compiling.startswith("timed run 1 of 3 took up to 17.7x the fastest")
    assert seconds_per_token(engine, w, cell) == pytest.approx(1e-4)  # the fastest run is warm


def test_latencies_timed_at_new_shapes_are_marked(clock: Clock) -> None:
    w = work()
    engine = Jit(clock, compile_s=0.05, per_token_s=1e-3)  # 0.1 s an instance: no time for a warm pass
    cell = measure(engine, w, w, cap_s=2.5, device="cpu")
    assert cell.compiling is None and cell.offline_s == pytest.approx([0.6])
    assert cell.latency_s == pytest.approx([0.1] + [0.15] * 5)
    assert cell.latency_compiling.startswith("no warm pass fit: 5 of the 6 timed requests")


def test_an_engine_compiling_on_its_first_call_only_is_measured_as_before(clock: Clock) -> None:
    w = work()
    engine = Jit(clock, compile_s=1.0, per_token_s=1e-4, per_shape=False, declares=False)
    cell = measure(engine, w, w, cap_s=10.0, device="cpu")
    one_by_one = [(False, (i,)) for i in ALL]
    expected = [(True, (0,)), (True, (0,)), (False, (0,))] + [(True, ALL)] * 3 + one_by_one * 2
    assert [(off, ids) for off, ids, _ in engine.calls] == expected  # no shape warm-up
    assert cell.shape_warmup_s is None and cell.compiling is None and cell.latency_compiling is None
    assert cell.offline_s == pytest.approx([0.06] * 3) and cell.latency_s == pytest.approx([0.01] * 6)
