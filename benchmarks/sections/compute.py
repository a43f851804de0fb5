"""BENCHMARKS.md's compute sections: the numerics (E4) against their cost, flidec beside flide at other model
sizes, and the GEMMs beside cuBLAS (benchmarks/gemm_library.py)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.display import fmt
from benchmarks.sections import cell, num, speed


def _e4(r: dict | None, key: str) -> str:
    ex = (r or {}).get("exact") or {}
    if key == "flips":
        return f"{ex['flips']}/{ex['reads']}" if ex else "-"
    return fmt(ex.get(key), 5 if key == "mean_tv" else 2)


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
                f"{num(aq, 'qps')} / {num(fq, 'qps')}{cost}")) + " |")
    return "\n".join(lines)


def _pair(got: dict, k: str) -> tuple[str, str]:
    a, b = got["flidec", k], got["flide", k]
    return f"{num(a, k)} / {num(b, k)}", (f"{a / b:.2f}x" if a and b else "-")


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
