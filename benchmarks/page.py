"""BENCHMARKS.md: one page generated from the latest run's results files (`python -m benchmarks.report ...`).

Every number comes from the files its command names, the prose from benchmarks/page.md (test_report.py);
page() fills page.md's fields from the run (its header, the harness's table from display.py) and from the
sections in benchmarks/sections/: the targets, the kernel classes, serving, compute and the decision formats.
"""

from __future__ import annotations

import argparse
import json
import string
from pathlib import Path

from benchmarks.display import table
from benchmarks.sections import cell, num, speed
from benchmarks.sections.compute import gemm_section, numerics_section, sizes_section
from benchmarks.sections.decision import decision_section
from benchmarks.sections.kernels import CLASSES, REST, classes_table
from benchmarks.sections.serving import agent_section, router_section, serve_section
from benchmarks.sections.targets import targets_table

PAGE_TEMPLATE = Path(__file__).with_name("page.md")
OFFLINE = ("quality", "race", "mixed")
VERSIONS = ("torch", "triton", "transformers", "tokenizers", "flide", "flash-linear-attention")


def _ratios(run: dict, metric: str) -> str:
    return " / ".join(f"{speed(run, 'flidec', w, metric) / speed(run, 'flide', w, metric):.2f}x"
                      for w in OFFLINE)


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
    moved = {e: f"{num(speed(previous, e, 'quality', 'qps'), 'qps')} -> " if previous else ""
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
        "peak_now": num(speed(run, "flidec", "quality", "peak_fraction"), "peak_fraction"),
        "fork_now": num(speed(run, "flidec", "quality", "speedup"), "speedup"),
        "solo_qps": moved["flidec-solo"] + num(speed(run, "flidec-solo", "quality", "qps"), "qps"),
        "fork_qps": moved["flidec"] + num(speed(run, "flidec", "quality", "qps"), "qps"),
        "agent": agent_section(list(args.agent or []), root),
        "serve": serve_section(args.serve, root),
        "router": router_section(args.router, args.serve, root),
        "numerics": numerics_section(run, list(args.numerics or []), root),
        "sizes": sizes_section(list(args.size or []), root),
        "gemm": gemm_section(args.gemm, root),
        "decision": decision_section(args.decision, args.decision_plans, root),
    }
    return string.Template(PAGE_TEMPLATE.read_text()).substitute(values)


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
