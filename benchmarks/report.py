"""The benchmark's report: a run's cells -> result rows, a table, the results JSON and PNG; and BENCHMARKS.md.

Consumes the run's arguments, the Works, the engines' load facts and the measured Cells (with logits);
produces the result dict (JSON-ready), a fixed-width table, one compact JSON line and
benchmarks/results/<date>-<commit>.json with a PNG of q/s beside it (matplotlib, Agg). Exactness compares each
engine's logits with fp32-ref's on the reads both measured; fork == solo pairs each fork engine with its solo
twin (engines.SOLO_OF); metrics.py defines the metrics. A cell timed while compiling (measure.py) keeps its
numbers with `compiling` and the reason: `*` on its speeds with a line why, no bar, no fork-vs-solo speedup.
`python -m benchmarks.report --run R --profile P --peer F [--previous R0]` writes BENCHMARKS.md from those
results files and benchmarks/page.md (the prose): the targets, every cell, where the time goes, what limits.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import platform
import string
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from benchmarks import decision_report, metrics
from benchmarks.engines import REFERENCE, SOLO_OF
from benchmarks.measure import Cell
from benchmarks.prose import corpus_sha256
from benchmarks.work import Work

GIB = 1024**3


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment(device: str) -> dict:
    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device,
        "host": platform.node(),
    }
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(device)
    for dist in ("transformers", "triton", "flide", "flash-linear-attention", "numpy", "tokenizers"):
        env[dist] = _version(dist)
    return env


def commit_id(given: str | None) -> str:
    if given:
        return given
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, nd)


def cell_row(cell: Cell, work: Work | None, cfg, peak: float | None) -> dict:
    row: dict = {"engine": cell.engine, "workload": cell.workload, "status": cell.status, "error": cell.error}
    if cell.status != "ok" or work is None or not cell.offline_s:
        return row
    ids, computes = cell.instances, cell.computes
    t = metrics.median(cell.offline_s)
    questions = len(work.read_ids(ids))
    computed = work.tokens(ids, computes)
    flops = metrics.span_flops(cfg, work.spans(ids, computes), work.labels(ids))
    tflops = flops / t / 1e12
    row.update(
        {
            "instances": len(ids),
            "of_instances": work.instances,
            "questions": questions,
            "runs": len(cell.offline_s),
            "cold": cell.cold,
            "compiling": cell.compiling is not None,  # q/s, tok/s, TFLOP/s and %peak are no speed
            "compiling_reason": cell.compiling,
            "shape_warmup_s": _r(cell.shape_warmup_s, 4),
            "offline_s": [_r(x, 4) for x in cell.offline_s],
            "qps": _r(metrics.rate(questions, t), 2),
            "tok_s": _r(metrics.rate(work.tokens(ids, "solo"), t), 0),
            "computed_tok_s": _r(metrics.rate(computed, t), 0),
            "computed_tokens": computed,
            "tflops": _r(tflops, 2),
            "peak_fraction": _r(tflops / peak, 4) if peak else None,
            "latency_n": len(cell.latency_s),
            "latency_error": cell.latency_error,
            "latency_compiling": cell.latency_compiling is not None,  # p50 and p90 hold compiles
            "latency_compiling_reason": cell.latency_compiling,
            "p50_ms": _r(metrics.percentile(cell.latency_s, 50) * 1e3, 2) if cell.latency_s else None,
            "p90_ms": _r(metrics.percentile(cell.latency_s, 90) * 1e3, 2) if cell.latency_s else None,
            "peak_mem_gib": _r(cell.peak_mem_bytes / GIB, 2) if cell.peak_mem_bytes is not None else None,
            "cell_s": _r(cell.seconds, 1),
        }
    )
    return row


def assemble(
    args: argparse.Namespace,
    *,
    device: str,
    flidec_from: str,
    made_model: bool,
    works: dict[str, Work],
    work_errors: dict[str, str],
    engines: list[dict],
    cells: list[Cell],
    peak_tflops: float | None,
    setup_s: float,
    elapsed_s: float,
) -> dict:
    from flidec.models.config import TextConfig

    cfg = TextConfig.from_dir(args.model)
    by_key = {(c.engine, c.workload): c for c in cells}
    order = {(e, w): (i, j) for j, e in enumerate(args.engines) for i, w in enumerate(args.workloads)}
    rows = []
    for c in sorted(cells, key=lambda c: order[c.engine, c.workload]):
        row = cell_row(c, works.get(c.workload), cfg, peak_tflops)
        ref = by_key.get((REFERENCE, c.workload))
        if row.get("qps") is not None and ref is not None and ref.logits and c.engine != REFERENCE:
            kinds = {r: read.kind for r, read in enumerate(works[c.workload].reads)}
            ex = metrics.exactness(ref.logits, c.logits, kinds)
            row["exact"] = (
                None
                if ex is None
                else {k: _r(v, 6) if isinstance(v, float) else v for k, v in dataclasses.asdict(ex).items()}
            )
        rows.append(row)
    comparisons = []
    for fork, solo in SOLO_OF.items():
        for w in args.workloads:
            a, b = by_key.get((fork, w)), by_key.get((solo, w))
            if not (a and b and a.offline_s and b.offline_s):
                continue
            ra = next(r for r in rows if r["engine"] == fork and r["workload"] == w)
            rb = next(r for r in rows if r["engine"] == solo and r["workload"] == w)
            equal, compared = metrics.bitwise_equal(a.logits, b.logits)
            compiling = ra["compiling"] or rb["compiling"]  # a time with compiles in it divides into nothing
            comparisons.append(
                {
                    "workload": w,
                    "fork": fork,
                    "solo": solo,
                    "speedup": _r(ra["qps"] / rb["qps"], 2) if rb.get("qps") and not compiling else None,
                    "compiling": compiling,
                    "bitwise_equal": equal,
                    "bitwise_compared": compared,
                }
            )
    workloads = {}
    for name in args.workloads:
        if name in work_errors:
            workloads[name] = {"error": work_errors[name]}
            continue
        w = works[name]
        every = list(range(w.instances))
        plain, tree = w.tokens(every, "solo"), w.tokens(every, "tree")
        workloads[name] = {
            "instances": w.instances,
            "questions": len(w.reads),
            "plain_tokens": plain,
            "tree_tokens": tree,
            "one_level_tokens": w.tokens(every, "one-level"),
            "sharing_ratio": _r(metrics.sharing_ratio(plain, tree), 3),
            "one_level_sharing_ratio": _r(metrics.sharing_ratio(plain, w.tokens(every, "one-level")), 3),
            "bind_s": _r(w.bind_s, 2),
        }
    for info in engines:
        for key in ("load_s", "first_answer_s", "load_to_first_answer_s"):
            if key in info:
                info[key] = _r(info[key], 3)
    now = datetime.datetime.now(datetime.UTC)
    return {
        "schema": "flidec-bench/1",
        "date": now.strftime("%Y-%m-%d"),
        "time_utc": now.strftime("%H:%M:%S"),
        "commit": commit_id(args.commit),
        "command": " ".join(["benchmarks/run.py", *args.argv]),
        "environment": environment(device) | {"flidec_from": flidec_from},
        "model": {
            "dir": str(args.model),
            "made_here": made_model,
            "hidden": cfg.hidden_size,
            "layers": cfg.num_layers,
            "vocab": cfg.vocab_size,
            "token_gflops": _r(metrics.token_flops(cfg) / 1e9, 4),
        },
        "scale": args.scale,
        "seed": args.seed,
        "corpus_sha256": corpus_sha256(),
        "time_budget_s": args.time_budget_s,
        "setup_s": _r(setup_s, 1),
        "elapsed_s": _r(elapsed_s, 1),
        "matmul_peak_tflops": _r(peak_tflops, 1),
        "compile_s": None,  # flidec compile: with the compiled engine
        "workloads": workloads,
        "engines": engines,
        "cells": rows,
        "comparisons": comparisons,
    }


def _fmt(v, nd: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return str(v)


def _marked(v, nd: int, compiling: bool) -> str:
    """A number timed while the engine still compiled keeps its value, with a `*` (the lines under the
    table say why)."""
    return _fmt(v, nd) + ("*" if compiling and v is not None else "")


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
                _fmt(r["peak_mem_gib"], 2),
                _fmt(ex.get("max_dp_points"), 3),
                _fmt(ex.get("mean_tv"), 5),
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
            "no speedup (a cell was compiling)" if c["compiling"] else f"{_fmt(c['speedup'], 2)}x faster"
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


def clean(x: object) -> object:
    """JSON-safe: NaN and infinities become null (strict JSON has neither)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return x


def json_line(result: dict) -> str:
    return json.dumps(clean(result), separators=(",", ":"), allow_nan=False)


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


def write(result: dict, results_dir: Path, plot_png: bool = True) -> Path:
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{result['date']}-{result['commit']}.json"
    path.write_text(json.dumps(clean(result), indent=1, allow_nan=False) + "\n")
    if plot_png:
        try:
            plot(result, path.with_suffix(".png"))
        except Exception as e:  # noqa: BLE001 -- a missing matplotlib costs the picture, not the results
            print(f"[bench] no plot: {type(e).__name__}: {e}", file=sys.stderr)
    return path


# ---- BENCHMARKS.md: one page generated from the latest run's results files --------------------------------
# Every number comes from the files its command names, the prose from benchmarks/page.md (test_report.py).

PAGE_TEMPLATE = Path(__file__).with_name("page.md")
OFFLINE = ("quality", "race", "mixed")
VERSIONS = ("torch", "triton", "transformers", "tokenizers", "flide", "flash-linear-attention")


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

# Kernel classes by name prefix, flidec's kernels and flide's (cuBLAS nvjet GEMMs, fla's Gated DeltaNet, its
# Triton attention, conv and pointwise kernels); the first class with a matching prefix takes a kernel, REST
# the others. flide's `_gate_kernel` runs once per attention layer: the gate on the attention's output.
KERNEL_CLASSES = (
    ("GEMMs", ("gemm_", "nvjet_")),
    ("Gated DeltaNet", ("gdn_", "chunk_gated_delta_rule", "chunk_fwd_kernel_o", "recompute_w_u", "l2norm_fwd",
                        "_gated_rms", "_fwd_xo", "_gates")),
    ("attention", ("fork_attention", "_attention_fwd", "_qk_kernel", "_gate_kernel")),
    ("conv", ("fork_conv", "_conv", "causal_conv1d")),
)
REST = "norms, SwiGLU's pointwise, the rest"
CLASSES = (*(c for c, _ in KERNEL_CLASSES), REST)
ALL_KERNELS = "(all)"  # profile_peer's first row: every kernel of the call, listed or not


def kernel_class(name: str) -> str:
    return next((cls for cls, prefixes in KERNEL_CLASSES if name.startswith(prefixes)), REST)


def class_ms(kernels: list[dict], instances: int) -> dict[str, float]:
    """Milliseconds an instance by class of a profile's kernel list, then the unlisted kernels' time (NaN
    without an `(all)` row) and the device total (the listed kernels' without one)."""
    out = dict.fromkeys(CLASSES, 0.0)
    listed = [k for k in kernels if k["kernel"] != ALL_KERNELS]
    for k in listed:
        out[kernel_class(k["kernel"])] += k["total_us"] / 1e3 / instances
    total = sum(k["total_us"] for k in listed) / 1e3 / instances
    every = next((k["total_us"] / 1e3 / instances for k in kernels if k["kernel"] == ALL_KERNELS), None)
    past = math.nan if every is None else every - total
    return out | {"past the list": past, "device total": total if every is None else every}


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


def _num(v: float | None, metric: str) -> str:
    if v is None:
        return "-"
    forms = {"qps": f"{v:,.1f}", "p50_ms": f"{v:,.2f}", "peak_fraction": f"{100 * v:.1f}"}
    return forms.get(metric, f"{v:.2f}x")


def _ratios(run: dict, metric: str) -> str:
    return " / ".join(f"{speed(run, 'flidec', w, metric) / speed(run, 'flide', w, metric):.2f}x"
                      for w in OFFLINE)


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
            peer_text = f"{peer} {_num(other, t.metric)}{part}"
        ratio = now / other if t.against and now is not None and other else None
        value = ratio if t.against else now
        met = value is not None and (value >= t.goal if t.at_least else value <= t.goal)
        status = "not measured" if value is None else "met" if met else "not met"
        before = [_num(speed(previous, "flidec", t.workload, t.metric), t.metric)] if previous else []
        row = [t.what, *before]
        row += [_num(now, t.metric), peer_text, f"{ratio:.2f}x" if ratio else "-", t.text, status]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def classes_table(title: str, workload: str, profile: dict, peer: dict, run: dict) -> tuple[str, dict]:
    """flidec's kernel classes for one instance and for N packed (`workload*N` in the runtime profile) beside
    flide's latency and offline calls (the peer profile), ms an instance; and those columns by name."""
    packed = next(k for k in profile["workloads"] if k.startswith(workload + "*"))
    n = int(packed.split("*")[1])
    one, many = profile["workloads"][workload], profile["workloads"][packed]
    lat, off = peer["workloads"][workload]["latency"], peer["workloads"][workload]["offline"]
    cols = {"one": class_ms(one["kernels"], 1), "packed": class_ms(many["kernels"], n)}
    cols |= {m: class_ms(c["kernels"], c["instances"]) for m, c in (("latency", lat), ("offline", off))}
    heads = (f"flidec, one ({one['bucket']})", f"flidec, {n} packed ({many['bucket']})", "flide, latency",
             "flide, offline")
    lines = [f"| {title}, ms an instance | " + " | ".join(heads) + " |", "|---|---|---|---|---|"]
    for cls in (*CLASSES, "past the list", "device total"):
        nums = ("-" if math.isnan(c[cls]) else f"{c[cls]:.2f}" for c in cols.values())
        lines.append(f"| {cls} | " + " | ".join(nums) + " |")
    fc, pc = cell(run, "flidec", workload), cell(run, "flide", workload)
    offline = [1e3 * r["questions"] / r["qps"] / r["instances"] for r in (fc, pc)]
    lines.append(f"| the harness's time an instance | p50 {fc['p50_ms']:.2f} | {offline[0]:.1f} (offline) | "
                 f"p50 {pc['p50_ms']:.2f} | {offline[1]:.1f} (offline) |")
    return "\n".join(lines), cols


def agent_section(specs: list[str], root: Path) -> str:
    """The agent workload's section (benchmarks/agent.py files, the latest first, each `PATH` or
    `PATH:ENGINE,ENGINE` to show only those engines' rows): per engine the mean time a step, steps 0-9 and
    from step 10 on, and the total; flidec-saved's bitwise count and the restart."""
    if not specs:
        return ""
    runs, shown = [], {}
    for spec in specs:
        path, _, names = spec.partition(":")
        runs.append((Path(path), json.loads((root / path).read_text())))
        shown[Path(path)] = set(names.split(",")) if names else None
    first = runs[0][1]
    lines = ["", "## The agent workload: saved states (benchmarks/agent.py)",
             f"{first['trajectories']} trajectories x {first['steps']} steps on {first['gpu']}, histories "
             f"{first['history_tokens'][0]:,} to {first['history_tokens'][1]:,} tokens "
             f"(+{first['step_tokens']} a step), asked step after step; each engine's mean time a step over "
             "the trajectories. One row a file, from one device call each:", "",
             "| file | variant | engine | steps 0-9, ms | from step 10, ms | total, s | resumed == fresh |",
             "|---|---|---|---|---|---|---|"]
    restarts = []
    for path, run in runs:
        for variant, row in run["variants"].items():
            only = shown[path]
            for name in ("flidec", "flidec-saved", "flide", "flide-session"):
                e = row.get(name)
                if e is None or (only is not None and name not in only):
                    continue
                if "error" in e:
                    lines.append(f"| {path.name} | {variant} | {name} | error: {e['error'][:80]} | | | |")
                    continue
                if "step_ms" not in e:  # the call ended in the untimed warm-up
                    lines.append(f"| {path.name} | {variant} | {name} | not timed: the call ended in its "
                                 f"warm-up ({e['warm_steps']} of {run['steps']} steps in {e['warm_s']:.0f} s)"
                                 " | | | |")
                    continue
                done = e.get("steps_done", run["steps"])
                late = "-" if e["steps_10_on_ms"] is None else f"{e['steps_10_on_ms']:.1f}"
                total = f"{e['total_s']:.1f}" + (f" ({done} of {run['steps']} steps)" if done < run["steps"]
                                                 else "")
                lines.append(f"| {path.name} | {variant} | {name} | {e['steps_0_9_ms']:.1f} | "
                             f"{late} | {total} | {e.get('bitwise', '')} |")
            if only is not None and "flidec-saved" not in only:
                continue
            if "restart" in row:
                r = row["restart"]
                if not r.get("from_tier", True):
                    restarts.append(f"- {path.name}, {variant}: nothing was saved, so nothing resumed (the "
                                    f"restart's steps {r['disk_resume_ms']:.1f} and "
                                    f"{r['gpu_resume_ms']:.1f} ms)")
                else:
                    restarts.append(f"- {path.name}, {variant}: the next step resumed from disk in a new "
                                    f"Program {r['disk_resume_ms']:.1f} ms, from GPU memory "
                                    f"{r['gpu_resume_ms']:.1f} ms; resumed from disk == from GPU memory "
                                    f"{r['bitwise']}")
            if "phases" in row:
                ph = row["phases"]
                restarts.append(f"- {path.name}, {variant}: one more step ({ph['total']:.1f} ms) in "
                                f"phases: before the engine's submit {ph['before']:.1f} ms, the submit "
                                f"{ph['submit']:.1f}, waiting for the device {ph['wait']:.1f}, after it "
                                f"{ph['after']:.1f}")
    return "\n".join(lines + ["", *restarts]) + "\n"


def _errors(summary: dict) -> str:
    """Answers other than 200: their count, and by status when there are any."""
    others = ", ".join(f"{k}: {v}" for k, v in summary["statuses"].items() if k != "200")
    return f"{summary['errors']} ({others})" if others else str(summary["errors"])


def serve_section(path: Path | None, root: Path) -> str:
    """The server under load (benchmarks/serve_bench.py's file): per server throughput, p50/p99, errors,
    answers that differ from the same row sent alone (E1), the burst's refusals with Retry-After and its
    longest wait; a server that failed is an error row. Empty without a file."""
    if path is None:
        return ""
    run = json.loads((root / path).read_text())
    rows, load = run["rows"], run["load"]
    burst = f"then {load['burst']} requests released at one instant" if load["burst"] else "no burst"
    deadline = f", --deadline {load['deadline_s']:g}" if "deadline_s" in load else ""
    prose = (f"{path.name}: on {run['gpu']}, commit {run['commit']}. {load['clients']} clients send "
             f"{load['requests']:,} System One requests, the rows in turn, over {rows['count']} distinct "
             f"rows ({rows['quality_like']} QuALITY-like, {rows['race_like']} RACE-like; "
             f"{rows['questions']:,} questions; states of {rows['state_tokens'][0]:,} to "
             f"{rows['state_tokens'][2]:,} tokens) to "
             "one server after the other, once every row was sent alone (an answer under load that is not "
             f"that one, value for value, differs: E1), {burst} (flidec serve --max-queue {load['max_queue']}"
             f"{deadline}: past its queue a request is refused with 429 and Retry-After). Errors are "
             "answers other than 200 in the load, refusals those of the burst; the longest wait is the "
             "burst's.")
    lines = ["", "## The server under load (benchmarks/serve_bench.py)", textwrap.fill(prose, 110), "",
             "| server | requests/s | questions/s | p50 ms | p99 ms | errors | differ from alone | "
             "burst refused | with Retry-After | longest wait, ms |", "|---" * 10 + "|"]
    notes = []
    for name, e in run["servers"].items():
        if "summary" not in e:
            error = e.get("error", "did not finish").strip().splitlines()[-1]
            lines.append(f"| {name} | error: {error[:120]} |" + " |" * 8)
        else:
            s, b = e["summary"], e["summary"].get("burst")
            cells = [f"{s['requests_per_s']:,.1f}", f"{s['questions_per_s']:,.1f}", f"{s['p50_ms']:,.1f}",
                     f"{s['p99_ms']:,.1f}", _errors(s), str(s["differ_from_alone"])]
            cells += [str(b["refused"]), str(b["refused_with_retry_after"]), f"{b['max_wait_ms']:,.0f}"] \
                if b else ["-", "-", "-"]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        ready = f", ready in {e['ready_s']:.1f} s" if "ready_s" in e else ""
        s = e.get("summary", {})
        short = s.get("sent", 0) < s.get("requests", 0) or s.get("alone_sent", 0) < s.get("rows", 0)
        cut = f"; out of time: {s['sent']:,} of {s['requests']:,} requests sent, {s['alone_sent']} of " \
            f"{s['rows']} rows alone" if short else ""
        notes.append(f"- {name}: `{e['command']}`{ready}{cut}")
    return "\n".join(lines + ["", *notes]) + "\n"


REPLICA_COUNTS = (1, 2, 4, 8)


def router_section(path: Path | None, serve: Path | None, root: Path) -> str:
    """Replicas' expected scaling (benchmarks/router_cost.py's file): what the ingress adds to a request
    (route, rule, dispatch), and N replicas' throughput computed as N times the single server's (the serve
    file's flidec row), capped by what one ingress can dispatch. Empty without a file."""
    if path is None:
        return ""
    cost = json.loads((root / path).read_text())
    d, route, tokenize, rule = cost["dispatch"], cost["route"], cost["tokenize"], cost["rule"]
    lengths = sorted(route, key=int)
    most = max(rule, key=int)
    ingress_ms = d["ms_each"] + route[lengths[-1]] + rule[most]
    prose = (f"{path.name}: on {cost['cpu']}, commit {cost['commit']}. What `flidec serve --replicas N`'s "
             "ingress adds to a request beside the single server's own work: its route, keyless (the state "
             "text's block keys, runtime/replicas/routing.py), "
             + ", ".join(f"{route[t]:.3f} ms at {int(t):,} tokens" for t in lengths)
             + " (tokenizing the state instead would cost "
             + ", ".join(f"{tokenize[t]:.1f}" for t in lengths)
             + f" ms; a request naming a session skips both); the rule over {most} replicas, "
             f"{rule[most] * 1e3:.0f} us; Ray Serve's dispatch through SavedStateRouter, "
             f"{d['ms_each']:.2f} ms "
             f"a request at {d['concurrency']} in flight ({d['requests_per_s']:,.0f} requests/s through one "
             "ingress, to 2 replicas that answer at once on the same cores: a lower bound).")
    lines = ["", "## Replicas: the expected scaling (benchmarks/router_cost.py)", textwrap.fill(prose, 110)]
    single = None
    if serve is not None:
        flidec = json.loads((root / serve).read_text())["servers"].get("flidec", {}).get("summary")
        single = flidec and (flidec["requests_per_s"], flidec["questions_per_s"])
    if not single:
        return "\n".join(lines) + "\n"
    rps, qps = single
    cap = 1e3 / ingress_ms
    lines += ["", textwrap.fill(
        f"Computed, not measured on several GPUs (issue 30): N replicas answer N times the single "
        f"server's {rps:,.1f} requests/s (the server under load, above), up to one ingress's "
        f"{cap:,.0f} requests/s ({ingress_ms:.2f} ms a request: the dispatch, the longest route and "
        "the rule). The ingress's HTTP and JSON work, which the single server does too, is not in that "
        "cost.", 110), "", "| replicas | expected requests/s | expected questions/s | bound by |",
              "|---|---|---|---|"]
    for n in REPLICA_COUNTS:
        r = min(n * rps, cap)
        bound = "the GPUs" if n * rps <= cap else "the ingress"
        lines.append(f"| {n} | {r:,.1f} | {r * qps / rps:,.1f} | {bound} |")
    return "\n".join(lines) + "\n"


def _e4(r: dict | None, key: str) -> str:
    ex = (r or {}).get("exact") or {}
    if key == "flips":
        return f"{ex['flips']}/{ex['reads']}" if ex else "-"
    return _fmt(ex.get(key), 5 if key == "mean_tv" else 2)


def numerics_section(run: dict, extra: list[Path], root: Path) -> str:
    """E4 against its cost: flidec-fp32 (--activations fp32), flidec (the default, bf16 activations) and
    flide, each from the float32 reference, on the run's workloads and on each `extra` results file's
    (another weight seed, the demo model); q/s of the two flidec builds from the same file. A row per
    workload flidec ran."""
    head = ("model (commit)", "workload", "TV fp32 act. / flidec / flide", "fp32 act. / flide",
            "max \\|dp\\| points", "flips", "q/s fp32 act. / flidec")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    results = [run, *(json.loads((root / p).read_text()) for p in extra)]
    for result in results:
        model = f"{Path(result['command'].split('--model ')[1].split()[0]).name} ({result['commit']})"
        for w in result["workloads"]:
            a, f, p = (cell(result, e, w) for e in ("flidec-fp32", "flidec", "flide"))
            if f is None or f["status"] != "ok":
                continue
            ax, px = ((c or {}).get("exact") or {} for c in (a, p))
            both = ax.get("mean_tv") and px.get("mean_tv")
            ratio = f"{ax['mean_tv'] / px['mean_tv']:.2f}x" if both else "-"
            aq, fq = speed(result, "flidec-fp32", w, "qps"), speed(result, "flidec", w, "qps")
            if aq is None and not any((c or {}).get("exact") for c in (a, f, p)):
                continue  # a file without the float32 reference or the fp32 build says nothing of E4
            cost = f" ({100 * (aq / fq - 1):+.1f}%)" if aq and fq else ""
            lines.append("| " + " | ".join((
                model, w, " / ".join(_e4(c, "mean_tv") for c in (a, f, p)), ratio,
                " / ".join(_e4(c, "max_dp_points") for c in (a, f, p)),
                " / ".join(_e4(c, "flips") for c in (a, f, p)),
                f"{_num(aq, 'qps')} / {_num(fq, 'qps')}{cost}")) + " |")
    return "\n".join(lines)


def _pair(got: dict, k: str) -> tuple[str, str]:
    a, b = got["flidec", k], got["flide", k]
    return f"{_num(a, k)} / {_num(b, k)}", (f"{a / b:.2f}x" if a and b else "-")


def sizes_section(paths: list[Path], root: Path) -> str:
    """Harness files of other model sizes (make_checkpoint --size): flidec beside flide per workload, q/s,
    %peak and p50, with the ratio of each."""
    head = ("file", "model", "workload", "q/s flidec / flide", "ratio", "%peak flidec / flide",
            "p50 ms flidec / flide", "ratio")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for path in paths:
        result = json.loads((root / path).read_text())
        m = result["model"]
        model = f"{m['hidden']} hidden, {m['layers']} layers, {m['token_gflops']:.2f} GFLOP a token"
        for w in result["workloads"]:
            got = {(e, k): speed(result, e, w, k) for e in ("flidec", "flide")
                   for k in ("qps", "peak_fraction", "p50_ms")}
            if got["flidec", "qps"] is None:
                continue
            (q, qr), (pk, _), (p50, pr) = (_pair(got, k) for k in ("qps", "peak_fraction", "p50_ms"))
            lines.append(f"| {path.name} | {model} | {w} | {q} | {qr} | {pk} | {p50} | {pr} |")
    return "\n".join(lines)


def gemm_section(path: Path | None, root: Path) -> str:
    """benchmarks/gemm_library.py's file: where cuBLAS's rows differ from the Triton kernels' and from its
    own inside its largest launch, and each projection class's time both ways."""
    if path is None:
        return "No `--gemm` file given."
    d = json.loads((root / path).read_text())
    lines = [f"{path.name}: on {d['gpu']}, torch {d['torch']}. Bits: torch.mm (cuBLAS) beside "
             "codegen/gemm.py on the same x and W at every row count the file lists, both result dtypes. "
             "Row counts where cuBLAS's rows differ from the Triton kernels' / from its own inside its "
             "largest launch:", ""]
    differ: dict[tuple, tuple[set, set]] = {}
    for r in d["bits"]:
        a, b = differ.setdefault((r["size"], r["n"], r["k"]), (set(), set()))
        a.update(r["rows_not_triton"])
        b.update(r["rows_not_invariant"])
    for (size, n, k), (a, b) in differ.items():
        if a or b:
            lines.append(f"- {size}, W {n} x {k}: {', '.join(map(str, sorted(a))) or 'none'} / "
                         f"{', '.join(map(str, sorted(b))) or 'none'}; the same bits at every count above")
    same = [f"{size} {n} x {k}" for (size, n, k), (a, b) in differ.items() if not a | b]
    lines.append(f"- the same bits at every row count: {', '.join(same)}")
    classes = [c for c in d["time"][0] if c not in ("size", "rows")]
    head = ("model", "rows", *classes)
    lines += ["", "One layer's launches in a CUDA graph, ms, Triton as the runtime launches them (grouped, "
              "the fused SwiGLU) / torch.mm one projection at a time (the SwiGLU: two and a silu product):",
              "",
              "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in d["time"]:
        lines.append(f"| {t['size']} | {t['rows']:,} | " + " | ".join(
            f"{t[c]['triton_ms']:.3f} / {t[c]['torch_ms']:.3f}" for c in classes) + " |")
    return "\n".join(lines)


def page(args: argparse.Namespace, root: Path) -> str:
    """BENCHMARKS.md's text from the run's results file, the runtime and peer profiles it cites, and
    optionally the run before it (flidec's numbers beside this run's); paths in `args` are under `root`."""
    run, profile, peer = (json.loads((root / p).read_text()) for p in (args.run, args.profile, args.peer))
    previous = json.loads((root / args.previous).read_text()) if args.previous else None
    env, loaded = run["environment"], [(e["name"], e) for e in run["engines"] if "load_s" in e]
    quality, q = classes_table("QuALITY-like", "quality", profile, peer, run)
    gap = {c: q["packed"][c] - q["offline"][c] for c in CLASSES}
    fq = cell(run, "flide", "quality")
    host = (profile["workloads"][w]["label_logits_ms"] - profile["workloads"][w]["run_stream_ms"]
            for w in OFFLINE)
    moved = {e: f"{_num(speed(previous, e, 'quality', 'qps'), 'qps')} -> " if previous else ""
             for e in ("flidec", "flidec-solo")}
    values = {
        "regenerate": page_command(args),
        "date": f"{run['date']} {run['time_utc']} UTC, commit {run['commit']}",
        "gpu": env.get("gpu") or env["device"],
        "versions": ", ".join(f"{k} {env[k]}" for k in VERSIONS if env.get(k)),
        "model": f"{run['model']['hidden']} hidden, {run['model']['layers']} layers",
        "peak": f"{run['matmul_peak_tflops']}",
        "command": "python " + run["command"].replace(" --", " \\\n  --"),
        "targets": targets_table(run, previous),
        "cells": "\n".join(line.rstrip() for line in table(run).splitlines()),
        "load": "\n".join(f"- {n}: {e['load_to_first_answer_s']:.2f} s (load {e['load_s']:.2f} s, first "
                          f"answer {e['first_answer_s']:.3f} s)" for n, e in loaded),
        "quality_classes": quality,
        "race_classes": classes_table("RACE-like", "race", profile, peer, run)[0],
        "gemm_gap": f"{gap['GEMMs']:.1f}",
        "gdn_gap": f"{gap['Gated DeltaNet']:.1f}",
        "attention_gap": f"{gap['attention']:.1f}",
        "rowwise_gain": f"{-gap['conv'] - gap[REST]:.1f}",
        "qps_ratios": _ratios(run, "qps"),
        "flide_goal_qps": f"{1.5 * fq['qps']:,.0f}",
        "budget": f"{1e3 * fq['questions'] / (1.5 * fq['qps']) / fq['instances']:.1f}",
        "best": f"{sum(min(q['packed'][c], q['offline'][c]) for c in CLASSES):.1f}",
        "host": " / ".join(f"{ms:.1f}" for ms in host),
        "p50_ratios": _ratios(run, "p50_ms"),
        "peak_now": _num(speed(run, "flidec", "quality", "peak_fraction"), "peak_fraction"),
        "fork_now": _num(speed(run, "flidec", "quality", "speedup"), "speedup"),
        "solo_qps": moved["flidec-solo"] + _num(speed(run, "flidec-solo", "quality", "qps"), "qps"),
        "fork_qps": moved["flidec"] + _num(speed(run, "flidec", "quality", "qps"), "qps"),
        "agent": agent_section(list(args.agent or []), root),
        "serve": serve_section(args.serve, root),
        "router": router_section(args.router, args.serve, root),
        "numerics": numerics_section(run, list(args.numerics or []), root),
        "sizes": sizes_section(list(args.size or []), root),
        "gemm": gemm_section(args.gemm, root),
        "decision": decision_section(args.decision, args.decision_plans, root),
    }
    return string.Template(PAGE_TEMPLATE.read_text()).substitute(values)


def decision_section(run: Path | None, plans: Path | None, root: Path) -> str:
    """The decision formats' section from decision_oracle.py's GPU run and decision_plans.py's CPU one; empty
    without either, so the page is byte for byte what it was before the section."""
    parts = []
    if run is not None:
        parts.append(decision_report.section(json.loads((root / run).read_text())).rstrip())
    if plans is not None:
        text = decision_report.plans_section(json.loads((root / plans).read_text())).rstrip()
        if run is not None:  # what the two measurements together say
            parts.append("Where the reading itself agrees (the table below: the same prompt ids, head rows "
                         "and arithmetic), what is left between the engines is each one's bf16 forward pass "
                         "(flidec's default build rounds activations to bf16, docs/DESIGN.md E4).")
        parts.append(text if run is not None else "## Decision formats beside flide\n\n" + text)
    return "".join("\n\n" + p for p in parts)


def page_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.report", description="Write BENCHMARKS.md.")
    p.add_argument("--run", type=Path, required=True, help="the harness's results file (benchmarks/run.py)")
    p.add_argument("--profile", type=Path, required=True, help="profile_runtime.py's file of the same code")
    p.add_argument("--peer", type=Path, required=True, help="profile_peer.py's file (flide's kernels)")
    p.add_argument("--previous", type=Path, help="the harness's results file of the run before")
    p.add_argument("--agent", action="append", help="benchmarks/agent.py's results file, or FILE:ENGINE,... "
                   "for those engines' rows only (repeatable, the latest first)")
    p.add_argument("--serve", type=Path, help="benchmarks/serve_bench.py's results file (the server under "
                   "load)")
    p.add_argument("--router", type=Path, help="benchmarks/router_cost.py's results file (replicas' expected "
                   "scaling, with --serve's single server)")
    p.add_argument("--numerics", action="append", type=Path, help="a harness results file of another model "
                   "(a second weight seed, the demo model) for the E4 table (repeatable)")
    p.add_argument("--size", action="append", type=Path, help="a harness results file of another model "
                   "size (make_checkpoint --size) with flidec and flide (repeatable)")
    p.add_argument("--gemm", type=Path, help="benchmarks/gemm_library.py's file (cuBLAS beside the GEMMs)")
    p.add_argument("--decision", type=Path, help="benchmarks/decision_oracle.py's file (decision formats "
                   "beside flide on the GPU)")
    p.add_argument("--decision-plans", type=Path, help="benchmarks/decision_plans.py's file (the reading "
                   "beside flide's own, on the CPU)")
    p.add_argument("--out", type=Path, default=Path("BENCHMARKS.md"))
    return p


def page_command(args: argparse.Namespace) -> str:
    """The command line that writes the page, its paths as given (relative to the repo root)."""
    given = [("--run", args.run), ("--profile", args.profile), ("--peer", args.peer),
             ("--previous", args.previous), *(("--agent", a) for a in args.agent or []),
             ("--serve", args.serve), ("--router", args.router),
             *(("--numerics", n) for n in args.numerics or []), *(("--size", n) for n in args.size or []),
             ("--gemm", args.gemm), ("--decision", args.decision),
             ("--decision-plans", args.decision_plans), ("--out", args.out)]
    return " \\\n  ".join(["python -m benchmarks.report", *(f"{k} {v}" for k, v in given if v)])


def main(argv: list[str] | None = None) -> int:
    args = page_parser().parse_args(argv)
    args.out.write_text(page(args, Path.cwd()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
