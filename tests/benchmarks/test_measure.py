"""The cell procedure of benchmarks/measure.py with a scripted engine (sleeps stand in for work): a first
call that compiles does not make the cell cold or mislead the speed estimate of the next cells; an engine
slower than the cap gives a cold cell and no estimate; a known speed skips a cell that cannot fit."""

from __future__ import annotations

import time

import torch

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
        time.sleep((self.compile_s if self.calls == 1 else 0) + self.per_token_s * w.tokens(instances, "solo"))
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
