"""A run's results record for people: the fixed-width table (run.py prints it, BENCHMARKS.md's cells) and the
PNG of q/s beside the results JSON (matplotlib, Agg). A cell timed while compiling (measure.py) gets `*` on
its speeds with a line why, no bar, no fork-vs-solo speedup.
"""

from __future__ import annotations

from pathlib import Path


def fmt(v, nd: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return str(v)


def _marked(v, nd: int, compiling: bool) -> str:
    """A number timed while the engine still compiled keeps its value, with a `*` (the lines under the
    table say why)."""
    return fmt(v, nd) + ("*" if compiling and v is not None else "")


def table(result: dict) -> str:
    head = (
        "workload",
        "engine",
        "inst",
        "q",
        "q/s",
        "tok/s",
        "p50 ms",
        "p90 ms",
        "TFLOP/s",
        "%peak",
        "GiB",
        "max|dp|",
        "TV",
        "flips",
    )
    lines = []
    for r in result["cells"]:
        if r["status"] != "ok":
            lines.append((r["workload"], r["engine"], r["error"] or r["status"]))
            continue
        ex = r.get("exact") or {}
        inst = f"{r['instances']}/{r['of_instances']}" + ("c" if r["cold"] else "")
        speed, lat = r["compiling"], r["latency_compiling"]
        lines.append(
            (
                r["workload"],
                r["engine"],
                inst,
                str(r["questions"]),
                _marked(r["qps"], 1, speed),
                _marked(r["tok_s"], 0, speed),
                _marked(r["p50_ms"], 2, lat),
                _marked(r["p90_ms"], 2, lat),
                _marked(r["tflops"], 2, speed),
                _marked(r["peak_fraction"] and 100 * r["peak_fraction"], 1, speed),
                fmt(r["peak_mem_gib"], 2),
                fmt(ex.get("max_dp_points"), 3),
                fmt(ex.get("mean_tv"), 5),
                f"{ex['flips']}/{ex['reads']}" if ex else "-",
            )
        )
    widths = [
        max(len(h), *(len(x[i]) for x in lines if len(x) == len(head))) if lines else len(h)
        for i, h in enumerate(head)
    ]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    for x in lines:
        if len(x) == len(head):
            out.append("  ".join(v.ljust(w) for v, w in zip(x, widths, strict=True)))
        else:
            out.append(f"{x[0].ljust(widths[0])}  {x[1].ljust(widths[1])}  {x[2]}")
    for r in result["cells"]:
        for key, what in (
            ("compiling_reason", "q/s, tok/s, TFLOP/s, %peak"),
            ("latency_compiling_reason", "p50, p90"),
        ):
            if r.get(key):
                out.append(f"* {r['workload']} {r['engine']}: {what} include compile time: {r[key]}")
    out.append("")
    for c in result["comparisons"]:
        speedup = (
            "no speedup (a cell was compiling)" if c["compiling"] else f"{fmt(c['speedup'], 2)}x faster"
        )
        out.append(
            f"{c['workload']}: {c['fork']} vs {c['solo']}: {speedup}; "
            f"bitwise equal {c['bitwise_equal']}/{c['bitwise_compared']} reads"
        )
    for name, w in result["workloads"].items():
        if "error" not in w:
            out.append(
                f"{name}: {w['instances']} instances, {w['questions']} questions, sharing ratio "
                f"{w['sharing_ratio']} (one level: {w['one_level_sharing_ratio']})"
            )
    for e in result["engines"]:
        facts = (
            f"load {e.get('load_s')} s, first answer {e.get('first_answer_s')} s"
            if "error" not in e
            else e["error"]
        )
        out.append(f"engine {e['name']}: {facts}")
    out.append(
        f"(inst: instances measured / in the workload, c: cold, the warm-up run; q/s and tok/s: median of "
        f"the runs; tok/s counts every prompt whole; %peak of {result['matmul_peak_tflops']} TFLOP/s bf16; "
        f"*: timed while the engine still compiled new shapes, not its speed or latency: the * lines say why)"
    )
    return "\n".join(out)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["cells"] if r.get("qps") and not r["compiling"]]  # a bar reads as a speed
    workloads = list(dict.fromkeys(r["workload"] for r in result["cells"]))
    engines = list(dict.fromkeys(r["engine"] for r in rows))  # engines without a number get no bar
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(workloads)) + 1.6, 4.2))
    width = 0.8 / max(len(engines), 1)
    for k, e in enumerate(engines):
        xs, ys = [], []
        for i, w in enumerate(workloads):
            r = next((r for r in rows if r["engine"] == e and r["workload"] == w), None)
            if r:
                xs.append(i + (k - (len(engines) - 1) / 2) * width)
                ys.append(r["qps"])
        ax.bar(xs, ys, width, label=e)
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_yscale("log")
    ax.set_ylabel("questions / s")
    env = result["environment"]
    ax.set_title(f"{env.get('gpu') or env['device']}, {result['date']}, {result['commit']}", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
