"""The benchmark's report: a run's cells -> result rows, the results JSON and PNG; the CLI for BENCHMARKS.md.

Consumes the run's arguments, the Works, the engines' load facts and the measured Cells (with logits);
produces the result dict (JSON-ready), one compact JSON line and benchmarks/results/<date>-<commit>.json with
a PNG of q/s beside it; display.py shows it (the fixed-width table, the PNG). Exactness compares each
engine's logits with fp32-ref's on the reads both measured; fork == solo pairs each fork engine with its solo
twin (engines.SOLO_OF); metrics.py defines the metrics. A cell timed while compiling (measure.py) keeps its
numbers with `compiling` and the reason.
`python -m benchmarks.report --run R --profile P --peer F [--previous R0]` writes BENCHMARKS.md from those
results files and benchmarks/page.md (the prose): benchmarks/page.py and its sections, benchmarks/sections/.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from benchmarks import metrics
from benchmarks.display import plot, table
from benchmarks.engines import REFERENCE, SOLO_OF
from benchmarks.measure import Cell
from benchmarks.prose import corpus_sha256
from benchmarks.work import Work

__all__ = ["GIB", "assemble", "cell_row", "clean", "commit_id", "environment", "json_line", "main", "plot",
           "table", "write"]  # table and plot: display.py's, run.py and the tests reach them through here

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


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmarks.report ...`: BENCHMARKS.md (benchmarks/page.py; imported here only, the results
    code above never reads the page)."""
    from benchmarks.page import page, page_parser

    args = page_parser().parse_args(argv)
    args.out.write_text(page(args, Path.cwd()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
