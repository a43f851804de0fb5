"""Where flide 0.1.4 spends a request's device time: its kernels by name, beside profile_runtime.py's
table of flidec's, so the two runtimes' gaps can be read kernel class by kernel class.

    python benchmarks/profile_peer.py --model DIR [--workloads quality,race] [--out FILE]

Consumes a model directory (made like the harness makes it when missing) and the harness's workloads;
loads flide through the harness's adapter (benchmarks/engines/flide.py: its public API, a black box) and,
per workload, runs the first instance as the harness's latency cell does (one request from flide's CUDA
graphs) and then every instance as its offline cell does (`run_plans`), each first untimed (flide compiles
for new shapes), then timed (median of 5 calls after one more, milliseconds, the device waited for) and
once under torch.profiler: the kernels by total device time and their count (CUPTI reports the kernels a
graph replay runs like any other). Writes the report as JSON (`--out`) and prints it. A diagnostic, not a
benchmark: the harness's numbers are benchmarks/run.py's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.profile_runtime import kernel_rows, median_ms  # maps flidec's source tree when needed


def kernels(fn, top: int = 16) -> list[dict]:
    """The `top` kernels of one call of fn by device time, after a row for all of them."""
    rows, _ = kernel_rows(fn)
    every = {"kernel": "(all)", "calls": sum(r["calls"] for r in rows),
             "total_us": round(sum(r["total_us"] for r in rows), 1)}
    return [every, *rows[:top]]


def main(argv: list[str] | None = None) -> int:
    from benchmarks.engines.flide import Flide
    from benchmarks.run import build_works, ensure_model

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--workloads", default="quality,race")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    args.workloads = args.workloads.split(",")
    args.seed, args.scale, args.make_size = 0, 1.0, "0.8B"
    ensure_model(args)
    works, errors = build_works(args)
    if errors:
        raise SystemExit(f"workloads failed: {errors}")
    engine = Flide()
    t0 = time.perf_counter()
    engine.load(args.model, "cuda")
    report: dict = {"load_s": round(time.perf_counter() - t0, 1), "workloads": {}}
    for name, work in works.items():
        prepared = engine.prepare(work)
        every = list(range(work.instances))
        cells = {}
        for cell, instances, offline in (("latency", [0], False), ("offline", every, True)):
            def call(prepared=prepared, instances=instances, offline=offline):
                return engine.run(prepared, instances, offline)

            call()  # compiles for new shapes
            cells[cell] = {"instances": len(instances), "ms": median_ms(call, 5), "kernels": kernels(call)}
        report["workloads"][name] = cells
        print(json.dumps({name: cells}), flush=True)
    engine.close()
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
