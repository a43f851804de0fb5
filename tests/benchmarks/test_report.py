"""benchmarks/report.py on hand-made cells: a cell timed while its engine still compiled keeps its numbers
but carries the mark in the JSON, gets `*` on its speeds and a line saying why in the table, and gives no
fork-vs-solo speedup; the same cell unmarked does."""

from __future__ import annotations

import argparse

from benchmarks import report
from benchmarks.measure import Cell
from benchmarks.work import Read, Work


def work(instances: int = 2, tokens: int = 100) -> Work:
    reads = tuple(Read(i, tuple(range(tokens)), tokens, (1, 2), "noul", 0) for i in range(instances))
    forests = tuple(((-1, tuple(range(tokens))),) for _ in range(instances))
    return Work("scripted", forests, reads, tuple((i,) for i in range(instances)), 0.0, None)


SHAPES = "no timed run fit after the shape warm-up (0.50 s over 2 instances): the one run holds the compiles"
ONLINE = "no warm pass fit: 1 of the 2 timed requests were their instance's first online call"


def assemble(model, cells: list[Cell]) -> dict:
    args = argparse.Namespace(
        model=model,
        engines=["flide", "flide-solo"],
        workloads=["scripted"],
        commit="test",
        argv=[],
        scale=1.0,
        seed=0,
        time_budget_s=1.0,
    )
    return report.assemble(
        args,
        device="cpu",
        flidec_from="source",
        made_model=False,
        works={"scripted": work()},
        work_errors={},
        engines=[],
        cells=cells,
        peak_tflops=None,
        setup_s=0.0,
        elapsed_s=0.0,
    )


def test_a_compiling_cell_is_marked_and_not_read_as_a_speed(tiny_checkpoint) -> None:
    compiling = Cell(
        "flide",
        "scripted",
        instances=[0, 1],
        offline_s=[0.5],
        shape_warmup_s=0.5,
        compiling=SHAPES,
        latency_s=[0.01, 0.2],
        latency_compiling=ONLINE,
    )
    solo = Cell("flide-solo", "scripted", instances=[0, 1], offline_s=[0.2, 0.2], latency_s=[0.01, 0.01])
    result = assemble(tiny_checkpoint, [compiling, solo])

    rows = {r["engine"]: r for r in result["cells"]}
    fork = rows["flide"]
    assert fork["compiling"] is True and fork["compiling_reason"] == SHAPES and fork["shape_warmup_s"] == 0.5
    assert fork["latency_compiling"] is True and fork["latency_compiling_reason"] == ONLINE
    assert fork["qps"] == 4.0  # 2 questions in 0.5 s: kept, beside the mark
    assert rows["flide-solo"]["compiling"] is False and rows["flide-solo"]["latency_compiling"] is False
    (cmp,) = result["comparisons"]
    assert cmp["compiling"] is True and cmp["speedup"] is None

    lines = report.table(result).splitlines()
    cols = {line.split()[1]: line.split() for line in lines if line.startswith("scripted ")}
    # workload engine inst q q/s tok/s p50 p90 TFLOP/s ...
    assert cols["flide"][4:8] == ["4.0*", "400*", "105.00*", "181.00*"]
    assert cols["flide"][8].endswith("*")
    assert cols["flide-solo"][4:8] == ["10.0", "1,000", "10.00", "10.00"]
    assert "*" not in " ".join(cols["flide-solo"])
    assert f"* scripted flide: q/s, tok/s, TFLOP/s, %peak include compile time: {SHAPES}" in lines
    assert f"* scripted flide: p50, p90 include compile time: {ONLINE}" in lines
    assert any("flide vs flide-solo: no speedup (a cell was compiling)" in line for line in lines)


def test_the_same_cell_unmarked_is_a_speed(tiny_checkpoint) -> None:
    clean = Cell("flide", "scripted", instances=[0, 1], offline_s=[0.5], latency_s=[0.01, 0.2])
    solo = Cell("flide-solo", "scripted", instances=[0, 1], offline_s=[0.2, 0.2], latency_s=[0.01, 0.01])
    result = assemble(tiny_checkpoint, [clean, solo])
    (cmp,) = result["comparisons"]
    assert cmp["compiling"] is False and cmp["speedup"] == 0.4
    lines = report.table(result).splitlines()
    assert not any(line.startswith("* ") for line in lines)
    fork = next(line.split() for line in lines if line.startswith("scripted  flide "))
    assert fork[4:8] == ["4.0", "400", "105.00", "181.00"]
    assert any("flide vs flide-solo: 0.40x faster" in line for line in lines)
