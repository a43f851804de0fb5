"""BENCHMARKS.md's kernel classes tables: where the device time of an instance goes, by kernel class, for
flidec (profile_runtime.py's file: one instance, N packed) beside flide (profile_peer.py's: latency and
offline calls), and the harness's own time an instance under them."""

from __future__ import annotations

import math

from benchmarks.sections import cell

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
