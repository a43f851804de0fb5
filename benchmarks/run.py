"""The side-by-side benchmark: every engine x workload on one device, one table, one JSON line.

    python benchmarks/run.py --model DIR [--engines flidec-ref,flidec-ref-solo,flide,flide-solo,hf,fp32-ref]
        [--workloads independent,race,mixed,lookahead,planner,quality] [--scale 1.0] [--time-budget-s 450]
        [--results-dir benchmarks/results] [--commit HASH]

Consumes a model directory (created with flidec.testing.make_checkpoint, 0.8B shapes and seeded random
weights, when it does not exist: the GPU box has no network), the example specs and Python's own prose;
produces a table on stdout, the results JSON (benchmarks/results/<date>-<commit>.json), a PNG of q/s per
workload and engine beside it, and, last on stdout, the results as one JSON line. Engines run one after
the other, each loaded once; the time budget is shared out as it goes (each engine gets an equal share
of what is left, each of its cells an equal share of that), and a cell that no longer fits is a
'skipped: budget' row. A failing engine or cell is an error row; the harness goes on. Runs from a source
checkout as it is: flidec need not be installed (benchmarks/source.py; benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/run.py` puts benchmarks/ first, not the repo root
    sys.path.insert(0, str(ROOT))

from benchmarks.source import ensure_flidec

FLIDEC_FROM = ensure_flidec(ROOT)  # "installed", or "source" on the GPU box (no install step needed)

import torch

from benchmarks import report
from benchmarks.engines import ENGINES, Engine, EngineUnavailable, unavailable
from benchmarks.measure import Cell, measure, seconds_per_token
from benchmarks.work import Work, prepare_work
from benchmarks.workloads import BUILDERS, build_workload

DEFAULT_ENGINES = "flidec-ref,flidec-ref-solo,flide,flide-solo,hf,fp32-ref"
# Cheap workloads first: an engine's first answer and its first speed estimate come from a small instance.
DEFAULT_WORKLOADS = "independent,race,mixed,lookahead,planner,quality"
MIN_CELL_S = 1.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python benchmarks/run.py", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, type=Path, help="model directory (made here if missing)")
    p.add_argument("--make-size", default="0.8B", help="make_checkpoint --size for a missing --model")
    p.add_argument("--make-seed", type=int, default=0, help="make_checkpoint --seed for a missing --model")
    p.add_argument("--engines", default=DEFAULT_ENGINES, help=f"comma list of {', '.join(ENGINES)}")
    p.add_argument("--workloads", default=DEFAULT_WORKLOADS, help=f"comma list of {', '.join(BUILDERS)}")
    p.add_argument("--scale", type=float, default=1.0, help="shrink instance counts and lengths (0, 1]")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-budget-s", type=float, default=450.0, help="the whole run, setup included")
    p.add_argument("--device", default=None, help="cuda:0 when CUDA is there, else cpu")
    p.add_argument("--results-dir", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument(
        "--commit", default=None, help="commit id for the file name (default: git, else 'unknown')"
    )
    p.add_argument("--no-plot", action="store_true")
    args = p.parse_args(argv)
    args.engines = [e for e in args.engines.split(",") if e]
    args.workloads = [w for w in args.workloads.split(",") if w]
    for e in args.engines:
        if e not in ENGINES:
            p.error(f"unknown engine {e!r}; one of {', '.join(ENGINES)}")
    for w in args.workloads:
        if w not in BUILDERS:
            p.error(f"unknown workload {w!r}; one of {', '.join(BUILDERS)}")
    return args


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".strip()[:500]


def ensure_model(args: argparse.Namespace) -> bool:
    """Make the checkpoint when the directory does not exist; True when it was made in this run."""
    if (args.model / "config.json").is_file():
        return False
    from flidec.testing.make_checkpoint import make_checkpoint

    log(f"{args.model} does not exist: making a {args.make_size} checkpoint (seed {args.make_seed}, bf16)")
    make_checkpoint(args.model, args.make_size, seed=args.make_seed, dtype="bf16")
    return True


def build_works(args: argparse.Namespace) -> tuple[dict[str, Work], dict[str, str]]:
    from flidec.formats import make_format
    from flidec.frontend import load_spec
    from flidec.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(args.model)
    works, errors = {}, {}
    for name in args.workloads:
        try:
            t0 = time.perf_counter()
            workload = build_workload(
                name, lambda s: len(tokenizer.encode(s)), seed=args.seed, scale=args.scale
            )
            spec, _ = load_spec(workload.spec)
            tree = next(t for t in spec.trees if t.name == workload.tree)
            works[name] = prepare_work(workload, tree, make_format(spec.format, tokenizer))
            log(
                f"workload {name}: {works[name].instances} instances, {len(works[name].reads)} questions "
                f"({time.perf_counter() - t0:.1f} s)"
            )
        except Exception as e:  # noqa: BLE001 -- an engine's or a workload's failure is a row, not a crash
            traceback.print_exc()
            errors[name] = error_text(e)
    return works, errors


def matmul_peak_tflops(device: str) -> float | None:
    """bf16 8192^3 matmul TFLOP/s here (3 warm-ups, 10 timed): the denominator of 'fraction of peak'."""
    if not device.startswith("cuda"):
        return None
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a @ b
    stop.record()
    torch.cuda.synchronize()
    return 2 * n**3 * 10 / (start.elapsed_time(stop) / 1e3) / 1e12


def close(engine: Engine | None) -> None:
    if engine is not None:
        try:
            engine.close()
        except Exception:  # noqa: BLE001 -- an engine's or a workload's failure is a row, not a crash
            traceback.print_exc()


def run_engine(
    name: str,
    args: argparse.Namespace,
    works: dict[str, Work],
    work_errors: dict[str, str],
    engines_left: int,
    deadline: float,
    device: str,
    previous: Engine | None,
) -> tuple[dict, list[Cell], Engine | None]:
    """Build (ahead-of-time engines) and load one engine, close the previous one (after the load, so
    consecutive engines can share what they load, e.g. flide and flide-solo one flide Engine), answer a
    first request, then measure every workload within the engine's share: an equal part, among the
    `engines_left`, of the time left once it has answered (a compile or a slow start is not a cell's time).
    Returns the engine still open, or None when it failed to load."""
    info: dict = {"name": name}
    cells: list[Cell] = []
    engine = None
    try:
        engine = ENGINES[name]()
        if hasattr(engine, "build"):  # ahead of time: not part of load or load-to-first-answer
            tb = time.perf_counter()
            info["build"] = engine.build(args.model, list(works.values()), device)
            info["build_s"] = time.perf_counter() - tb
        t0 = time.perf_counter()
        info["facts"] = engine.load(args.model, device)
        info["load_s"] = time.perf_counter() - t0
        close(previous)
        previous = None
        first = next((w for w in args.workloads if w in works), None)
        if first is not None:
            prepared = engine.prepare(works[first])
            t1 = time.perf_counter()
            engine.run(prepared, [0], False)
            info["first_answer_s"] = time.perf_counter() - t1
            info["first_answer_workload"] = first
            info["load_to_first_answer_s"] = info["load_s"] + info["first_answer_s"]
        share_end = time.perf_counter() + (deadline - time.perf_counter()) / engines_left
    except Exception as e:  # noqa: BLE001 -- an engine's or a workload's failure is a row, not a crash
        if not isinstance(e, EngineUnavailable):
            traceback.print_exc()
        info["error"] = error_text(e)
        log(f"{name}: {info['error']}")
        close(previous)
        close(engine)
        return info, [Cell(name, w, "error", info["error"]) for w in args.workloads], None
    memo = None
    for k, w in enumerate(args.workloads):
        if w in work_errors:
            cells.append(Cell(name, w, "error", f"workload: {work_errors[w]}"))
            continue
        now = time.perf_counter()
        cap = min(share_end - now, deadline - now) / (len(args.workloads) - k)
        if cap < MIN_CELL_S:
            cells.append(Cell(name, w, "skipped", "skipped: budget"))
            continue
        try:
            cell = measure(engine, engine.prepare(works[w]), works[w], cap, device, memo)
            memo = seconds_per_token(engine, works[w], cell) or memo
        except Exception as e:  # noqa: BLE001 -- an engine's or a workload's failure is a row, not a crash
            traceback.print_exc()
            cell = Cell(name, w, "error", error_text(e))
        note = cell.error or (f"compiling: {cell.compiling}" if cell.compiling else "")
        log(f"{name} x {w}: {cell.status} {note} ({time.perf_counter() - now:.1f} s of {cap:.1f})")
        cells.append(cell)
    if hasattr(engine, "facts"):
        info.setdefault("facts", {}).update(engine.facts())
    return info, cells, engine


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    deadline = started + args.time_budget_s
    device = args.device or ("cuda:0" if torch.cuda.is_available() else "cpu")
    made = ensure_model(args)
    works, work_errors = build_works(args)
    try:
        peak = matmul_peak_tflops(device)
    except Exception:  # noqa: BLE001 -- without a peak the rows lose '%peak' only
        traceback.print_exc()
        peak = None
    setup_s = time.perf_counter() - started
    log(f"setup {setup_s:.1f} s; device {device}; bf16 matmul peak {peak and round(peak)} TFLOP/s")

    engines, cells = [], []
    runnable, previous = [], None
    for name in args.engines:
        reason = unavailable(name, device)
        if reason is None:
            runnable.append(name)
        else:
            log(f"{name}: {reason}")
            engines.append({"name": name, "error": reason})
            cells += [Cell(name, w, "error", reason) for w in args.workloads]
    for k, name in enumerate(runnable):
        now = time.perf_counter()
        if deadline - now < MIN_CELL_S:
            engines.append({"name": name, "error": "skipped: budget"})
            cells += [Cell(name, w, "skipped", "skipped: budget") for w in args.workloads]
            continue
        info, engine_cells, previous = run_engine(
            name, args, works, work_errors, len(runnable) - k, deadline, device, previous
        )
        engines.append(info)
        cells += engine_cells
    close(previous)

    try:
        result = report.assemble(
            args,
            device=device,
            flidec_from=FLIDEC_FROM,
            made_model=made,
            works=works,
            work_errors=work_errors,
            engines=engines,
            cells=cells,
            peak_tflops=peak,
            setup_s=setup_s,
            elapsed_s=time.perf_counter() - started,
        )
        print(report.table(result))
    except Exception as e:  # noqa: BLE001 -- never lose a run's measurements to a report bug: write them raw
        traceback.print_exc()
        result = {
            "schema": "flidec-bench/1",
            "report_error": error_text(e),
            "date": time.strftime("%Y-%m-%d"),
            "commit": report.commit_id(args.commit),
            "engines": engines,
            "cells": [{k: v for k, v in vars(c).items() if k != "logits"} for c in cells],
        }
    path = report.write(result, args.results_dir, plot_png=not args.no_plot and "report_error" not in result)
    log(f"wrote {path}")
    print(report.json_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
