"""Where one compiled flidec request spends its time on a GPU: host work against the replay, and the
replay's kernels by name.

    python benchmarks/profile_runtime.py --model DIR [--workloads independent,race,mixed,quality] [--out FILE]

Consumes a model directory (made like the harness makes it when missing) and the harness's workloads;
compiles examples/systemone.flide for this GPU, loads it twice (CUDA graphs, and eager launches of the same
kernels) and, for the first instance of each workload (the first N bound into one stream, as the offline
path packs them, for `NAME*N`), measures (medians of 10, milliseconds): the whole `Program.label_logits`
call (validation, binding, packing, meta fill, copy, replay, read), `run_stream` of the already bound
stream (no binding), the meta fill alone, the graph replay alone (CUDA events, replays back to back), and
one replay from an idle device on the host's clock (`launch_ms`: the replay call alone; `replay_wall_ms`:
with the wait); then profiles one eager pass with torch.profiler (CUPTI sees cuda.core launches like any
other) and lists the kernels by total device time, with each call of the per-layer attention and Gated
DeltaNet kernels. With `--concurrent NAME*N`, first (with only the graph program loaded) N instances of a
workload (its instances repeated in order) go through one `label_logits` call, the offline path with all N in
flight: wall time and peak GPU memory (torch's allocator: the arena, weights, staging and results; cuda.core
allocates nothing). With `--host-profile`, each workload's label_logits calls also run under cProfile, and the
functions with the most time of their own are listed (the device wait shows as the event's synchronize).
Writes the report as JSON (`--out`) and prints it. A diagnostic for the runtime's performance
work (docs/DESIGN.md), not a benchmark: the harness's numbers are benchmarks/run.py's.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.source import ensure_flidec

ensure_flidec(ROOT)

import torch


def median_ms(fn, n: int = 10) -> float:
    fn()
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(times), 3)


def replay_ms(graph, n: int = 10) -> float:
    graph.replay()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        graph.replay()
    stop.record()
    torch.cuda.synchronize()
    return round(start.elapsed_time(stop) / n, 3)


def launch_ms(graph, n: int = 10) -> float:
    """Median of the host's `replay()` call alone (the graph launch) from an idle device."""
    graph.replay()
    calls = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        graph.replay()
        calls.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return round(statistics.median(calls), 3)


# Kernels whose every call's time is listed as well: the per-layer launches whose grids a bucket sizes.
PER_CALL = ("fork_attention_kernel", "gdn_prep_kernel", "gdn_state_kernel", "gdn_out_kernel")


def kernel_rows(fn) -> tuple[list[dict], object]:
    """Every kernel of one call of fn by device time, largest first (name, calls, microseconds), and the
    torch.profiler profile they come from."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if us:
            rows.append({"kernel": e.key[:90], "calls": e.count, "total_us": round(us, 1)})
    rows.sort(key=lambda r: -r["total_us"])
    return rows, prof


def kernel_table(engine, key: str, top: int = 14) -> tuple[list[dict], dict[str, list[float]]]:
    """The `top` kernels by device time, and each call's microseconds of the PER_CALL kernels, in order."""
    engine._launch_all(key)
    rows, prof = kernel_rows(lambda: engine._launch_all(key))
    calls: dict[str, list[float]] = {name: [] for name in PER_CALL}
    for e in prof.events():
        if e.name in calls:
            calls[e.name].append(round(getattr(e, "device_time", None) or getattr(e, "cuda_time", 0), 1))
    return rows[:top], calls


def host_profile(fn, n: int = 20, top: int = 14) -> list[str]:
    """cProfile of n calls of fn: the `top` functions by time spent in themselves, one line each (ms a
    call)."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    # stats: (file, line, name) -> (cc, nc, tt, ct)
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]
    return [f"{tt / n * 1e3:8.3f} ms own {ct / n * 1e3:8.3f} ms cum {nc // n:>6}x  "
            f"{Path(f).name}:{line} {name}"
            for (f, line, name), (_, nc, tt, ct, _) in rows]


def profile_instances(graphs, eager, insts: list[dict], host: bool = False) -> dict:
    from flidec.runtime.binder import bound_from_plans, merge_chains
    from flidec.runtime.split import stream_sizes
    from flidec.runtime.templates import TemplateWalker
    from flidec.testing.streams import padded

    t = graphs.tree()
    walker = TemplateWalker(t.tree, t.program.template, graphs.fmt)
    # the stream label_logits binds: chains merged (a one-question instance is one segment)
    bound = bound_from_plans(t.tree, graphs.fmt, insts,
                             lambda inst: (merge_chains(walker.plan(inst)[0]), None))
    bucket = t.program.bucket_for(stream_sizes(bound.stream))
    key = f"{t.tree.name}/{bucket.name}"
    whole = padded(bound.stream, bucket.rows)
    stage = graphs.engine.stage(key)
    eager.run_stream(bound.stream)  # fills the eager engine's meta region: its launches then redo this stream
    graph = lambda: graphs.engine.graphs[key, False]  # noqa: E731  (captured by label_logits' first call)
    return {
        "rows": bound.stream.meta.num_rows, "bucket": bucket.name, "reads": len(bound.stream.meta.reads),
        "label_logits_ms": median_ms(lambda: graphs.label_logits(insts)),
        "run_stream_ms": median_ms(lambda: graphs.run_stream(bound.stream)),
        "meta_fill_ms": median_ms(lambda: stage.fill(whole.tokens, whole.meta)),
        "replay_ms": replay_ms(graph()),
        "launch_ms": launch_ms(graph()),
        "replay_wall_ms": median_ms(graph().replay),
        "eager_ms": median_ms(lambda: eager.engine._launch_all(key)),
        "launches": len(eager.engine.resolve(key)),
        **dict(zip(("kernels", "per_call_us"), kernel_table(eager.engine, key), strict=True)),
        **({"host_profile": host_profile(lambda: graphs.label_logits(insts))} if host else {}),
    }


def concurrent(graphs, tokenizer, spec: str) -> dict:
    from benchmarks.workloads import build_workload

    name, _, count = spec.partition("*")
    pool = build_workload(name, lambda s: len(tokenizer.encode(s))).instances
    insts = [pool[i % len(pool)] for i in range(int(count))]
    graphs.label_logits(insts)  # the first use of a bucket makes its graph: time the second call
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    out = graphs.label_logits(insts)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return {"workload": name, "instances": len(insts),
            "answered": sum(isinstance(o, torch.Tensor) for o in out),
            "seconds": round(seconds, 3), "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/profile_runtime.py",
                                description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--workloads", default="independent,race,mixed,quality",
                   help="comma-separated; NAME*N profiles the first N instances bound into one stream "
                   "(offline)")
    p.add_argument("--concurrent", default=None, help="NAME*N: N instances of NAME in one label_logits call")
    p.add_argument("--host-profile", action="store_true", help="list label_logits' host functions (cProfile)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)

    from benchmarks.workloads import build_workload
    from flidec.compile import compile_artifact
    from flidec.models.tokenizer import load_tokenizer
    from flidec.runtime.program import load
    from flidec.testing.make_checkpoint import make_checkpoint

    if not (args.model / "config.json").is_file():
        make_checkpoint(args.model, "0.8B", seed=0, dtype="bf16")
    major, minor = torch.cuda.get_device_capability()
    artifact = Path(tempfile.mkdtemp(prefix="flidec-profile-")) / "systemone"
    t0 = time.perf_counter()
    # the harness's cache: it compiles less
    kernels = Path(tempfile.gettempdir()) / "flidec-bench" / "kernels"
    compile_artifact(ROOT / "examples" / "systemone.flide", args.model, f"sm_{major}{minor}", artifact,
                     kernel_cache=kernels)
    report: dict = {"compile_s": round(time.perf_counter() - t0, 1)}
    t0 = time.perf_counter()
    graphs = load(artifact, "cuda")
    report["load_s"] = round(time.perf_counter() - t0, 2)
    tokenizer = load_tokenizer(args.model)
    if args.concurrent:
        report["concurrent"] = concurrent(graphs, tokenizer, args.concurrent)
        print(json.dumps({"concurrent": report["concurrent"]}), flush=True)
    eager = load(artifact, "cuda", graphs=False)
    report["workloads"] = {}
    for name in args.workloads.split(","):
        workload, _, count = name.partition("*")
        insts = build_workload(workload, lambda s: len(tokenizer.encode(s))).instances[: int(count or 1)]
        entry = profile_instances(graphs, eager, list(insts), args.host_profile)
        report["workloads"][name] = entry
        print(json.dumps({name: {k: v for k, v in entry.items() if k not in ("kernels", "per_call_us",
                                                                              "host_profile")}}), flush=True)
        for row in entry["kernels"]:
            print(f"   {row['total_us']:>10.1f} us  {row['calls']:>4}x  {row['kernel']}", flush=True)
        for kernel, us in entry["per_call_us"].items():
            print(f"   {kernel}: first calls {us[:4]} us", flush=True)
        for line in entry.get("host_profile", []):
            print(f"   host {line}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
