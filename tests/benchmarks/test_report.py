"""benchmarks/report.py on hand-made cells: a cell timed while its engine still compiled keeps its numbers
but carries the mark in the JSON, gets `*` on its speeds and a line saying why in the table, and gives no
fork-vs-solo speedup; the same cell unmarked does. BENCHMARKS.md is the page its own command regenerates
from the checked-in results files, byte for byte; targets get their status, kernels their class."""

from __future__ import annotations

import argparse
import json
import math
import shlex
from pathlib import Path

from benchmarks import page as pages
from benchmarks import report
from benchmarks.measure import Cell
from benchmarks.sections import compute, serving, targets
from benchmarks.sections import kernels as kernel_classes
from benchmarks.work import Read, Work

ROOT = Path(__file__).resolve().parents[2]


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


def test_benchmarks_md_is_what_its_command_regenerates() -> None:
    text = (ROOT / "BENCHMARKS.md").read_text()
    start = text.index("python -m benchmarks.report")
    command = text[start : text.index("```", start)].replace("\\\n", " ")
    argv = shlex.split(command)[3:]  # past `python -m benchmarks.report`
    args = pages.page_parser().parse_args(argv)
    assert args.out == Path("BENCHMARKS.md") and args.run.parent == Path("benchmarks/results")
    assert pages.page(args, ROOT) == text, "BENCHMARKS.md is stale: run the command at its top to rewrite it"
    assert len(text.splitlines()) <= 330  # the current reference, not a journal (one section a measurement)


SERVE = {
    "gpu": "NVIDIA H200", "commit": "abc1234", "device": "cuda",
    "rows": {"count": 256, "quality_like": 64, "race_like": 192, "scale": 1.0, "questions": 1344,
             "state_tokens": [440, 1560, 5001], "sha256": "0123456789abcdef"},
    "load": {"clients": 64, "requests": 2048, "burst": 256, "max_queue": 64, "deadline_s": 60.0},
    "servers": {
        "flidec": {"command": "flidec serve /tmp/a --port 1 --device cuda --max-queue 64", "ready_s": 6.31,
                   "summary": {"requests_per_s": 812.345, "questions_per_s": 4264.8, "p50_ms": 70.21,
                               "p99_ms": 180.0, "max_ms": 190.0, "statuses": {"200": 2046, "503": 2},
                               "errors": 2, "differ_from_alone": 0, "requests": 2048, "sent": 2048,
                               "rows": 256, "alone_sent": 256,
                               "burst": {"burst": 256, "statuses": {"200": 128, "429": 128}, "refused": 128,
                                         "refused_with_retry_after": 128, "max_wait_ms": 1234.5}},
                   "stop": {"signal": "SIGTERM", "exit": 0, "stop_s": 0.5}},
        "flide": {"command": "flide serve --model /tmp/m --format next_token --device cuda --port 2",
                  "error": "RuntimeError: exited with status 1 before it was ready: Traceback ...\n"
                           "ModuleNotFoundError: No module named 'fla'",
                  "stop": {"signal": "SIGTERM", "exit": 1, "stop_s": 0.0}}}}


def test_the_serve_section_renders_only_from_its_file(tmp_path) -> None:
    text = (ROOT / "BENCHMARKS.md").read_text()
    start = text.index("python -m benchmarks.report")
    argv = shlex.split(text[start : text.index("```", start)].replace("\\\n", " "))[3:]
    # the files after --serve left out
    for flag in ("--serve", "--router", "--numerics", "--size", "--gemm", "--decision", "--decision-plans"):
        while flag in argv:
            at = argv.index(flag)
            argv = argv[:at] + argv[at + 2 :]
    plain = pages.page(pages.page_parser().parse_args(argv), ROOT)
    assert "## The server under load" not in plain  # no section without --serve
    path = tmp_path / "serve.json"
    path.write_text(json.dumps(SERVE))
    args = pages.page_parser().parse_args([*argv, "--serve", str(path)])
    page = pages.page(args, ROOT)
    assert f"  --serve {path} \\\n  --out BENCHMARKS.md" in page  # the command names the file
    section = page[page.index("## The server under load") :]
    assert "serve.json: on NVIDIA H200, commit abc1234. 64 clients send 2,048 System One requests" in section
    assert "(64 QuALITY-like, 192 RACE-like; 1,344 questions; states of 440 to 5,001 tokens)" in (
        " ".join(section.split()))
    assert "flidec serve --max-queue 64, --deadline 60" in " ".join(section.split())
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows[0].split(" | ")[1:5] == ["load", "requests/s", "questions/s", "p50 ms"]
    assert rows[1] == ("| flidec | rows | 812.3 | 4,264.8 | 70.2 | 180.0 | 2 (503: 2) | 0 | 128 | 128 | "
                       "1,234 |")
    assert rows[2] == "| flide | - | error: ModuleNotFoundError: No module named 'fla' |" + " |" * 8
    assert rows[1].count("|") == rows[2].count("|") == rows[0].count("|")
    assert "- flidec: `flidec serve /tmp/a --port 1 --device cuda --max-queue 64`, ready in 6.3 s" in section
    flide = "- flide: `flide serve --model /tmp/m --format next_token --device cuda --port 2`\n"
    assert flide in section  # no "ready in": it never was
    short = json.loads(json.dumps(SERVE))
    short["servers"]["flidec"]["summary"] |= {"sent": 1000, "alone_sent": 200}
    path.write_text(json.dumps(short))
    assert "ready in 6.3 s; rows out of time: 1,000 of 2,048 requests sent, 200 of 256 rows alone\n" in (
        serving.serve_section(path, ROOT))
    both = json.loads(json.dumps(SERVE))  # a run of both loads: a row per load, the shared one's prose
    flidec = both["servers"]["flidec"]
    flidec["loads"] = {"rows": flidec["summary"], "shared": {**flidec["summary"], "burst": None,
                                                             "requests_per_s": 2000.0}}
    path.write_text(json.dumps(both))
    section = serving.serve_section(path, ROOT)
    assert "| flidec | shared | 2,000.0 | 4,264.8 | 70.2 | 180.0 | 2 (503: 2) | 0 | - | - | - |" in section
    assert "The shared load sends each question of a row as its own request" in " ".join(section.split())


def result(cells: list[dict], speedup: float | None = None) -> dict:
    base = {"instances": 4, "of_instances": 4, "compiling": False, "latency_compiling": False}
    rows = [base | {"status": "ok"} | c for c in cells]
    fork = [{"workload": "quality", "fork": "flidec", "speedup": speedup, "compiling": speedup is None}]
    return {"cells": rows, "comparisons": fork, "commit": "abc1234"}


def test_each_target_gets_its_status() -> None:
    run = result(
        [
            {"engine": "flidec", "workload": "quality", "qps": 30.0, "p50_ms": 7.0, "peak_fraction": 0.7},
            {"engine": "flide", "workload": "quality", "qps": 10.0, "p50_ms": 10.0, "peak_fraction": 0.5},
            {"engine": "flidec", "workload": "race", "qps": 14.0, "p50_ms": 1.0, "latency_compiling": True},
            {"engine": "flide", "workload": "race", "qps": 10.0, "p50_ms": 1.0, "instances": 3},
        ],
        speedup=None,
    )
    lines = targets.targets_table(run, None).splitlines()
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in lines}
    assert rows["QuALITY-like q/s"][1:] == ["30.0", "flide 10.0", "3.00x", ">= 1.5x flide", "met |"]
    assert rows["QuALITY-like p50 ms"][-1] == "met |"  # 0.7x is at most 0.7x
    peak, race = rows["QuALITY-like %peak"], rows["RACE-like q/s"]
    assert peak[1:3] == ["70.0", "flide 50.0"] and peak[-1] == "met |"
    assert race[2:4] == ["flide 10.0 (3/4)", "1.40x"] and race[-1] == "not met |"
    assert rows["RACE-like p50 ms"][-1] == "not measured |"  # timed while compiling
    assert rows["fork vs solo, QuALITY-like"][-1] == "not measured |"
    assert rows["mixed q/s"][-1] == "not measured |"  # no cell
    before = result([{"engine": "flidec", "workload": "quality", "qps": 20.0}], 7.5)
    earlier = targets.targets_table(run, before)
    assert "| QuALITY-like q/s | 20.0 | 30.0 |" in earlier
    assert "| fork vs solo, QuALITY-like | 7.50x | - |" in earlier


def test_kernels_fall_into_classes_and_unlisted_time_is_kept() -> None:
    kernels = [
        {"kernel": "(all)", "total_us": 10000.0},
        {"kernel": "nvjet_sm90_tst_128x64", "total_us": 4000.0},
        {"kernel": "_fwd_xo", "total_us": 2000.0},
        {"kernel": "_gate_kernel", "total_us": 600.0},
        {"kernel": "_gated_rms_kernel", "total_us": 400.0},
        {"kernel": "causal_conv1d_fwd_kernel", "total_us": 1000.0},
        {"kernel": "_swiglu_kernel", "total_us": 1000.0},
    ]
    ms = kernel_classes.class_ms(kernels, 2)
    assert ms["GEMMs"] == 2.0 and ms["Gated DeltaNet"] == 1.2 and ms["attention"] == 0.3
    assert ms["conv"] == 0.5 and ms[kernel_classes.REST] == 0.5
    assert ms["past the list"] == 0.5 and ms["device total"] == 5.0
    flidec = kernel_classes.class_ms([{"kernel": "gemm_silu_mul_kernel", "total_us": 3000.0}], 1)
    assert flidec["device total"] == 3.0 and math.isnan(flidec["past the list"])  # no (all) row: unknown


def test_an_agent_file_can_show_some_engines_only() -> None:
    """`--agent PATH:ENGINE,...` keeps those engines' rows of the file and, without flidec-saved, its restart
    and phases lines; a bare PATH shows every engine the file holds."""
    path = "benchmarks/results/2026-12-02-9ed6953.agent.json"
    row = f"| {Path(path).name} |"

    def engines(section: str) -> list[str]:
        return [line.split(" | ")[2] for line in section.splitlines() if line.startswith(row)]
    every = serving.agent_section([path], ROOT)
    assert engines(every) == ["flidec", "flidec-saved", "flide"] and "resumed from disk" in every
    only = serving.agent_section([f"{path}:flide"], ROOT)
    assert engines(only) == ["flide"] and "resumed from disk" not in only and "in phases" not in only
    assert engines(serving.agent_section([f"{path}:flidec,flide"], ROOT)) == ["flidec", "flide"]


def test_the_replicas_scaling_is_computed_from_the_router_and_serve_files(tmp_path) -> None:
    """N replicas: N times the single server's requests/s until one ingress's cost per request binds."""
    router = tmp_path / "router.json"
    router.write_text(json.dumps({"cpu": "a CPU", "commit": "abc1234", "route": {"512": 0.01, "5000": 0.1},
                                  "tokenize": {"512": 1.0, "5000": 10.0}, "rule": {"8": 0.0},
                                  "dispatch": {"requests": 10, "concurrency": 4, "s": 0.0249,
                                               "requests_per_s": 401.6, "ms_each": 2.4}}))
    serve = tmp_path / "serve.json"
    serve.write_text(json.dumps(SERVE))
    assert serving.router_section(None, serve, ROOT) == ""
    section = serving.router_section(router, serve, ROOT)
    assert "up to one ingress's 400 requests/s (2.50 ms a request" in " ".join(section.split())
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    assert rows[0] == "| 1 | 400.0 | 2,100.0 | the ingress |"  # SERVE's 812.3 requests/s, past the cap
    assert len(rows) == len(serving.REPLICA_COUNTS)
    assert "| replicas" not in serving.router_section(router, None, ROOT)  # no single server: no table


def test_numerics_section_sets_both_flidec_builds_beside_flide(tmp_path) -> None:
    """E4's table: a row per workload flidec ran, the three engines' distances, fp32 activations' TV over
    flide's and their q/s change against the default build; '-' where a file lacks an engine."""
    def cell(engine: str, tv: float | None, qps: float) -> dict:
        exact = {"mean_tv": tv, "max_dp_points": 10 * tv, "flips": 1, "reads": 8} if tv else None
        return {"engine": engine, "workload": "race", "status": "ok", "exact": exact, "qps": qps,
                "compiling": False}

    cells = [cell("flidec", 0.04, 1000.0), cell("flidec-fp32", 0.01, 900.0), cell("flide", 0.02, 800.0)]
    run = {"command": "benchmarks/run.py --model /tmp/m0 --engines x", "commit": "c0",
           "workloads": {"race": {}}, "cells": cells}
    other = {"command": "benchmarks/run.py --model /tmp/m1", "commit": "c1",
             "workloads": {"race": {}, "mixed": {}}, "cells": [cell("flidec", 0.05, 100.0)]}
    (tmp_path / "other.json").write_text(json.dumps(other))
    lines = compute.numerics_section(run, [Path("other.json")], tmp_path).splitlines()
    assert lines[2] == ("| m0 (c0) | race | 0.01000 / 0.04000 / 0.02000 | 0.50x | 0.10 / 0.40 / 0.20 | "
                        "1/8 / 1/8 / 1/8 | 900.0 / 1,000.0 (-10.0%) |")
    assert lines[3] == "| m1 (c1) | race | - / 0.05000 / - | - | - / 0.50 / - | - / 1/8 / - | - / 100.0 |"
    assert len(lines) == 4  # no row for mixed: flidec did not run it


def test_sizes_section_sets_flidec_beside_flide_per_workload(tmp_path) -> None:
    def cell(engine: str, qps: float, p50: float) -> dict:
        return {"engine": engine, "workload": "race", "status": "ok", "qps": qps, "p50_ms": p50,
                "peak_fraction": qps / 1000, "compiling": False, "latency_compiling": False}

    result = {"model": {"hidden": 2560, "layers": 32, "token_gflops": 7.2782}, "workloads": {"race": {}},
              "cells": [cell("flidec", 240.0, 25.0), cell("flide", 300.0, 20.0)]}
    (tmp_path / "big.json").write_text(json.dumps(result))
    lines = compute.sizes_section([Path("big.json")], tmp_path).splitlines()
    assert lines[2] == ("| big.json | 2560 hidden, 32 layers, 7.28 GFLOP a token | race | 240.0 / 300.0 | "
                        "0.80x | 24.0 / 30.0 | 25.00 / 20.00 | 1.25x |")
    assert len(lines) == 3


def test_gemm_section_lists_where_cublas_differs_and_both_times(tmp_path) -> None:
    bits = [{"size": "0.8B", "n": 1024, "k": 3584, "out": o, "rows_not_triton": [1, 64],
             "rows_not_invariant": [1]} for o in ("bfloat16", "float32")]
    bits.append({"size": "0.8B", "n": 16, "k": 1024, "out": "bfloat16", "rows_not_triton": [],
                 "rows_not_invariant": []})
    time = [{"size": "0.8B", "rows": 1024, "down": {"triton_ms": 0.0268, "torch_ms": 0.0187}}]
    (tmp_path / "g.json").write_text(json.dumps({"gpu": "H200", "torch": "2.11", "bits": bits, "time": time}))
    text = compute.gemm_section(Path("g.json"), tmp_path)
    assert "- 0.8B, W 1024 x 3584: 1, 64 / 1; the same bits at every count above" in text
    assert "- the same bits at every row count: 0.8B 16 x 1024" in text
    assert text.endswith("| 0.8B | 1,024 | 0.027 / 0.019 |")
    assert compute.gemm_section(None, tmp_path) == "No `--gemm` file given."
