"""One cell of the benchmark: one engine on one workload, inside a time cap.

Consumes a loaded engine, its prepared workload, the Work and a cap in seconds; produces a Cell: the
offline run times (throughput mode, the same instances every run), the one-instance-at-a-time latencies,
the logits of the last offline run (for exactness), the instances measured and the peak device memory.
The procedure, so that a slow engine overshoots its cap by at most its first call and one instance (and,
for an engine that compiles per shape, the compiles of one pass):
1. warm-up: instance 0 offline twice (first use compiles, captures, autotunes: the cap counts from the end
   of the first call), then online (an online failure costs the row its latency only);
2. offline: every instance when an estimate (seconds per computed token, from the warm-up, then from each
   run) says a run fits in 60% of what is left, up to 3 runs; else the longest prefix of instances that
   fits once. When one instance takes most of the cap, the warm-up is the measurement (`cold: true`).
   An engine with `compiles_per_shape` (flide: a JIT compile for every new input shape) first gets one
   untimed pass over exactly the call it will time (the shape warm-up, planned as one more run, so fewer
   instances may fit); when its compiles leave no time for a timed run, it is the one run, marked;
3. latency: the offline instances, up to 64, one at a time, a warm pass first when it is cheap, until
   the cap.
A cell whose offline runs hold compile work is marked `compiling` with the reason (its times are not a
speed): the shape warm-up was the only run, or a timed run took over SLOW_RUN times the fastest (the same
instances every run: the slow one did work the others did not, whatever the engine says of itself). Its
latencies are marked `latency_compiling` when a per-shape engine met instances' online shapes first there.
Engines report seconds per computed token across cells (`seconds_per_token`) so a cell whose first instance
cannot fit is skipped before it starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from benchmarks.engines.base import Engine, Logits
from benchmarks.work import Work

MAX_LATENCY_INSTANCES = 64
SLOW_RUN = 1.5  # a timed run this many times the fastest one's time did work the others did not


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
    shape_warmup_s: float | None = None  # the untimed pass over the timed call (engines compiling per shape)
    compiling: str | None = None  # why the offline times hold compile work (no speed); None: they do not
    latency_s: list[float] = field(default_factory=list)
    latency_error: str | None = None  # the one-at-a-time path failed; the offline numbers stand
    latency_compiling: str | None = None  # why the latencies hold compiles of new shapes; None: they do not
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


def _plan(
    instances: int, cost: Callable[[Sequence[int]], int], spt: float, avail: float, shape_warmup: bool
) -> tuple[list[int], int]:
    """The instances the offline runs time and how many runs, in `avail` seconds at `spt` seconds per
    computed token: every instance, up to 3 runs, when that fits, else the longest prefix that fits once.
    A shape warm-up is one more pass of the same call, except over instance 0 alone (warm already)."""
    every = list(range(instances))

    def passes(ids: Sequence[int]) -> int:
        return 2 if shape_warmup and len(ids) > 1 else 1

    if passes(every) * spt * cost(every) <= avail:
        return every, max(1, min(3, int(avail // max(spt * cost(every), 1e-9)) - passes(every) + 1))
    ids = [0]
    for n in range(2, instances + 1):
        if passes(every[:n]) * spt * cost(every[:n]) > avail:
            break
        ids = every[:n]
    return ids, 1


def _slow_runs(offline_s: Sequence[float]) -> str | None:
    """Why runs of the same call are not one speed: some took over SLOW_RUN times the fastest (compiles for
    shapes new to them, most likely); None when they agree."""
    fastest = max(min(offline_s, default=0.0), 1e-9)
    slow = [k + 1 for k, t in enumerate(offline_s) if t > SLOW_RUN * fastest]
    if not slow:
        return None
    return (
        f"timed run {', '.join(map(str, slow))} of {len(offline_s)} took up to "
        f"{max(offline_s) / fastest:.1f}x the fastest over the same instances: work the others did not do "
        f"(compiles for new shapes)"
    )


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

    def cost(ids: Sequence[int]) -> int:
        return computed_tokens(engine, work, ids)

    compiles = getattr(engine, "compiles_per_shape", False)
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

    def left() -> float:
        return end - time.perf_counter()

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
        ids, runs = _plan(work.instances, cost, spt, 0.6 * left(), compiles)
        if compiles and len(ids) > 1:  # the shape warm-up: the very call timed next, so it meets its shapes
            t, logits = _timed(engine, prepared, ids, True, device)
            cell.shape_warmup_s = t
            if spt * cost(ids) > left():  # its compiles took the cap: it is the one run, and no speed
                cell.offline_s, runs = [t], 0
                cell.compiling = (
                    f"no timed run fit after the shape warm-up ({t:.2f} s over {len(ids)} instances): "
                    f"the one run holds the compiles"
                )
        for k in range(runs):
            if k and cell.offline_s[-1] > 0.9 * left():
                break
            t, logits = _timed(engine, prepared, ids, True, device)
            cell.offline_s.append(t)
            spt = t / max(cost(ids), 1)
        cell.compiling = cell.compiling or _slow_runs(cell.offline_s)
        cell.instances, cell.logits = ids, logits

        lat_ids = [] if cell.latency_error else cell.instances[:MAX_LATENCY_INSTANCES]

        def one(i: int) -> float:
            return spt * cost([i])

        warm = bool(lat_ids) and sum(one(i) for i in lat_ids) < 0.25 * left()
        if warm:  # shapes new here get compiled or captured before they are timed
            for i in lat_ids:
                engine.run(prepared, [i], False)
        for i in lat_ids:
            if one(i) > left():
                break
            t, _ = _timed(engine, prepared, [i], False, device)
            cell.latency_s.append(t)
        if compiles and not warm and len(cell.latency_s) > 1:  # instance 0 alone had its online warm-up
            cell.latency_compiling = (
                f"no warm pass fit: {len(cell.latency_s) - 1} of the {len(cell.latency_s)} timed requests "
                f"were their instance's first online call, where an engine compiling per shape compiles"
            )
    if device.startswith("cuda"):
        cell.peak_mem_bytes = torch.cuda.max_memory_allocated()
    cell.seconds = time.perf_counter() - start
    return cell


def seconds_per_token(engine: Engine, work: Work, cell: Cell) -> float | None:
    """The cell's measured speed, for predicting the engine's next cells; None from a cold cell or one
    whose only run held compiles (of several runs, the fastest is taken as warm)."""
    if not cell.offline_s or cell.cold or (cell.compiling and len(cell.offline_s) == 1):
        return None
    return min(cell.offline_s) / max(computed_tokens(engine, work, cell.instances), 1)
