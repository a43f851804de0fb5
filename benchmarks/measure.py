"""One cell of the benchmark: one engine on one workload, inside a time cap.

Consumes a loaded engine, its prepared workload, the Work and a cap in seconds; produces a Cell: the
offline run times (throughput mode, the same instances every run), the one-instance-at-a-time latencies,
the logits of the last offline run (for exactness), the instances measured and the peak device memory.
The procedure, so that a slow engine overshoots its cap by at most its first call and one instance:
1. warm-up: instance 0 offline twice (first use compiles, captures, autotunes: the cap counts from the end
   of the first call), then online (an online failure costs the row its latency only);
2. offline: every instance when an estimate (seconds per computed token, from the warm-up, then from each
   run) says a run fits in 60% of what is left, up to 3 runs; else the longest prefix of instances that
   fits once. When one instance takes most of the cap, the warm-up is the measurement (`cold: true`);
3. latency: the offline instances, up to 64, one at a time, a warm pass first when it is cheap, until
   the cap.
Engines report seconds per computed token across cells (`SpeedMemo`) so a cell whose first instance
cannot fit is skipped before it starts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from benchmarks.engines.base import Engine, Logits
from benchmarks.work import Work

MAX_LATENCY_INSTANCES = 64


@dataclass
class Cell:
    engine: str
    workload: str
    status: str = "ok"  # ok | error | skipped
    error: str | None = None
    computes: str = "solo"  # the engine's: which tokens it computes (engines/base.py)
    instances: list[int] = field(default_factory=list)  # measured offline
    offline_s: list[float] = field(default_factory=list)
    cold: bool = False  # the only offline run was the warm-up's
    latency_s: list[float] = field(default_factory=list)
    latency_error: str | None = None  # the one-at-a-time path failed; the offline numbers stand
    logits: Logits = field(default_factory=dict)
    peak_mem_bytes: int | None = None
    seconds: float = 0.0  # wall time the cell took, warm-up included


def computed_tokens(engine: Engine, work: Work, instances: Sequence[int]) -> int:
    return work.tokens(instances, engine.computes)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(
    engine: Engine, prepared: object, ids: Sequence[int], offline: bool, device: str
) -> tuple[float, Logits]:
    _sync(device)
    t0 = time.perf_counter()
    logits = engine.run(prepared, ids, offline)
    _sync(device)
    return time.perf_counter() - t0, logits


def measure(
    engine: Engine,
    prepared: object,
    work: Work,
    cap_s: float,
    device: str,
    seconds_per_token: float | None = None,
) -> Cell:
    """Measure one cell; exceptions propagate (the caller makes them error rows)."""
    start = time.perf_counter()
    end = start + cap_s
    cell = Cell(engine.name, work.name, computes=engine.computes)
    cost = lambda ids: computed_tokens(engine, work, ids)
    if seconds_per_token is not None and seconds_per_token * cost([0]) > 1.5 * cap_s:
        cell.status = "skipped"
        cell.error = (
            f"skipped: budget (one instance needs ~{seconds_per_token * cost([0]):.0f} s, "
            f"the cell has {cap_s:.0f} s)"
        )
        return cell
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()

    t_warm, logits = _timed(engine, prepared, [0], True, device)
    # A first call's compile or capture is the engine's start-up, not its speed: the cap counts from here
    # (the engine's share still pays for it, so the cells after this one get less).
    end = time.perf_counter() + cap_s
    left = lambda: end - time.perf_counter()
    t_again, logits = _timed(engine, prepared, [0], True, device)  # the first may have compiled or autotuned
    t_warm = min(t_warm, t_again)
    spt = t_warm / max(cost([0]), 1)
    if t_warm >= 0.6 * cap_s:  # one instance takes the cell's budget: its warm-up is the measurement
        cell.instances, cell.offline_s, cell.logits, cell.cold = [0], [t_warm], logits, True
    else:
        try:  # online warm-up (it may capture graphs: its time says nothing about offline speed)
            engine.run(prepared, [0], False)
        except Exception as e:  # noqa: BLE001 -- keep measuring offline; the row says why it has no latency
            cell.latency_error = f"{type(e).__name__}: {e}"[:300]
        every = list(range(work.instances))
        avail = 0.6 * left()
        if spt * cost(every) <= avail:
            ids, runs = every, max(1, min(3, int(avail // max(spt * cost(every), 1e-9))))
        else:
            ids, runs = [0], 1
            for n in range(2, work.instances + 1):
                if spt * cost(every[:n]) > avail:
                    break
                ids = every[:n]
        for k in range(runs):
            if k and cell.offline_s[-1] > 0.9 * left():
                break
            t, logits = _timed(engine, prepared, ids, True, device)
            cell.offline_s.append(t)
            spt = t / max(cost(ids), 1)
        cell.instances, cell.logits = ids, logits

        lat_ids = [] if cell.latency_error else cell.instances[:MAX_LATENCY_INSTANCES]
        one = lambda i: spt * cost([i])
        if lat_ids and sum(one(i) for i in lat_ids) < 0.25 * left():  # warm: shapes new here get captured
            for i in lat_ids:
                engine.run(prepared, [i], False)
        for i in lat_ids:
            if one(i) > left():
                break
            t, _ = _timed(engine, prepared, [i], False, device)
            cell.latency_s.append(t)
    if device.startswith("cuda"):
        cell.peak_mem_bytes = torch.cuda.max_memory_allocated()
    cell.seconds = time.perf_counter() - start
    return cell


def seconds_per_token(engine: Engine, work: Work, cell: Cell) -> float | None:
    """The cell's measured speed, for predicting the engine's next cells; None from a cold cell, whose one
    run may hold a compile."""
    if not cell.offline_s or cell.cold:
        return None
    return min(cell.offline_s) / max(computed_tokens(engine, work, cell.instances), 1)
