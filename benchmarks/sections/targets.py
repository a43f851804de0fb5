"""BENCHMARKS.md's targets table: each target flidec is measured against, its value in this run (and the run
before), the engine it is compared with, and whether it is met."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.sections import cell, num, speed


@dataclass(frozen=True, slots=True)
class Target:
    """flidec's `metric` on `workload` (as a ratio to `against`'s in the run: None, the value) vs `goal`."""

    what: str
    workload: str
    metric: str  # a cell field (qps, p50_ms, peak_fraction) or "speedup": the fork-vs-solo comparison
    against: str | None
    goal: float
    at_least: bool
    text: str


TARGETS = (
    Target("QuALITY-like q/s", "quality", "qps", "flide", 1.5, True, ">= 1.5x flide"),
    Target("RACE-like q/s", "race", "qps", "flide", 1.5, True, ">= 1.5x flide"),
    Target("mixed q/s", "mixed", "qps", "flide", 1.5, True, ">= 1.5x flide"),
    Target("independent p50 ms", "independent", "p50_ms", "flidec-solo", 1.0, False, "<= flidec-solo"),
    Target("RACE-like p50 ms", "race", "p50_ms", "flide", 0.5, False, "<= 0.5x flide"),
    Target("mixed p50 ms", "mixed", "p50_ms", "flide", 0.5, False, "<= 0.5x flide"),
    Target("QuALITY-like p50 ms", "quality", "p50_ms", "flide", 0.7, False, "<= 0.7x flide"),
    Target("QuALITY-like %peak", "quality", "peak_fraction", None, 0.65, True, ">= 65"),
    Target("fork vs solo, QuALITY-like", "quality", "speedup", None, 8.0, True, ">= 8x"),
)


def targets_table(run: dict, previous: dict | None) -> str:
    """Every target: flidec now (and in the earlier run), the engine it is measured against, the status."""
    earlier = [f"flidec {previous['commit']}"] if previous else []
    heads = [*earlier, f"flidec {run['commit']}", "same run", "ratio", "target", "status"]
    lines = ["| | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    for t in TARGETS:
        now = speed(run, "flidec", t.workload, t.metric)
        peer = t.against or "flide"
        other = speed(run, peer, t.workload, t.metric) if t.metric != "speedup" else None
        peer_text = "-"
        if other is not None:
            r = cell(run, peer, t.workload)
            part = f" ({r['instances']}/{r['of_instances']})" if r["instances"] < r["of_instances"] else ""
            peer_text = f"{peer} {num(other, t.metric)}{part}"
        ratio = now / other if t.against and now is not None and other else None
        value = ratio if t.against else now
        met = value is not None and (value >= t.goal if t.at_least else value <= t.goal)
        status = "not measured" if value is None else "met" if met else "not met"
        before = [num(speed(previous, "flidec", t.workload, t.metric), t.metric)] if previous else []
        row = [t.what, *before]
        row += [num(now, t.metric), peer_text, f"{ratio:.2f}x" if ratio else "-", t.text, status]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)
