"""BENCHMARKS.md's sections, one module each concept: targets.py (every target's status), kernels.py (where
the device time goes, by kernel class), serving.py (the agent workload, the server under load, replicas),
compute.py (numerics against their cost, other model sizes, the GEMMs beside cuBLAS), decision.py (the
decision formats); benchmarks/page.py puts them in page.md. Here: how they all read a harness results file.
"""

from __future__ import annotations


def cell(result: dict, engine: str, workload: str) -> dict | None:
    return next((r for r in result["cells"] if r["engine"] == engine and r["workload"] == workload), None)


def speed(result: dict, engine: str, workload: str, metric: str) -> float | None:
    """A cell's number (or flidec's fork-vs-solo speedup), None when missing or timed while compiling."""
    if metric == "speedup":
        c = next((c for c in result["comparisons"] if (c["fork"], c["workload"]) == (engine, workload)), None)
        return None if c is None or c["compiling"] else c["speedup"]
    r = cell(result, engine, workload)
    marked = "latency_compiling" if metric == "p50_ms" else "compiling"
    return None if r is None or r.get(metric) is None or r[marked] else r[metric]


def num(v: float | None, metric: str) -> str:
    """A metric's value as the page writes it: q/s, p50 ms, %peak; a ratio (the speedup) else."""
    if v is None:
        return "-"
    forms = {"qps": f"{v:,.1f}", "p50_ms": f"{v:,.2f}", "peak_fraction": f"{100 * v:.1f}"}
    return forms.get(metric, f"{v:.2f}x")
