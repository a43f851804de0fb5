"""Registers and spills of the Gated DeltaNet kernels compiled for sm_90 (no GPU needed).

    python benchmarks/gdn_spills.py [--heads 16,16,128] [--fused]

Compiles codegen/gdn's prep, state walk and output kernels with their TILES for these head shapes (q/k/v
bf16 read in place from a conv output, g and beta fp32, or with --fused the raw projections in bf16) through
codegen/aot.compile_kernel, and prints per kernel cuobjdump's REG and STACK (bytes of local memory per
thread: spills), shared memory and the SASS instruction count; for a kernel with a loop (the state walk: one
iteration per chunk) also the loop body's instructions, from a backward branch's target to the branch, and
its HGMMA, WARPGROUP.ARRIVE and BAR.SYNC among them; the output kernel also with the layer's gated RMS
norm fused (z a [T, Hv * Dv] projection, passes/fuse_gdn_norm.py). --state-warps / --state-stages override the
walk's TILES entry.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.source import ensure_flidec

os.environ.pop("TRITON_INTERPRET", None)  # compiling needs real @triton.jit kernels
ensure_flidec(ROOT)

import torch

from benchmarks.cubins import read_cubin


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--heads", default="16,16,128", help="key heads, value heads, head dim (0.8B: 16,16,128)")
    p.add_argument("--fused", action="store_true", help="the prep with the gate fused (a, b in bf16)")
    p.add_argument("--state-warps", type=int, help="the walk's warps (default: its TILES entry)")
    p.add_argument("--state-stages", type=int, help="the walk's pipelining stages (default: its TILES entry)")
    args = p.parse_args(argv)
    from flidec.codegen import aot, gdn, gdn_out, gdn_prep, gdn_walk

    hk, hv, d = (int(x) for x in args.heads.split(","))
    conv = (2 * hk + hv) * d
    gate = torch.bfloat16 if args.fused else torch.float32
    spec = gdn.GdnSpec(torch.bfloat16, gate, torch.bfloat16, hk, hv, d, d, args.fused,
                       ((conv, d), (conv, d), (conv, d), (hv, 1), (hv, 1), (hv * d, d)))
    t = spec.tiles
    kernels = {"gdn_prep_kernel": (gdn_prep.gdn_prep_kernel, spec.prep_signature(), spec.prep_constexprs(),
                                   t.prep_warps, 1),
               "gdn_state_kernel": (gdn_walk.gdn_state_kernel, spec.state_signature(),
                                    spec.state_constexprs(), args.state_warps or t.state_warps,
                                    args.state_stages or t.state_stages),
               "gdn_out_kernel": (gdn_out.gdn_out_kernel, spec.out_signature(), spec.out_constexprs(),
                                  t.out_warps, 1)}
    normed = dataclasses.replace(spec, norm=gdn.GdnNorm(torch.bfloat16, torch.bfloat16, (hv * d, d)))
    kernels["  with norm"] = (gdn_out.gdn_out_kernel, normed.out_signature(), normed.out_constexprs(),
                              t.out_warps, 1)
    print(f"heads {hk},{hv},{d} fused={args.fused}: {t}")
    for name, (fn, sig, consts, warps, stages) in kernels.items():
        k = aot.compile_kernel(fn, sig, consts, target="sm_90", num_warps=warps, num_stages=stages)
        cubin = read_cubin(k.cubin)
        print(f"{name:18s} REG {cubin.registers:>3d}  STACK {cubin.stack:>4d}  shared {k.shared:>6d}  "
              f"SASS {len(cubin.insts):>5d} instructions  ({warps} warps, {stages} stages)")
        for _, _, body in cubin.loops():
            count = {op: sum(t.split()[0].startswith(op) or f" {op}" in t for t in body)
                     for op in ("HGMMA", "WARPGROUP.ARRIVE", "BAR.SYNC")}
            print(f"{'':18s} loop body {len(body)} instructions: " + ", ".join(f"{op} {n}" for op, n in
                                                                              count.items()))


if __name__ == "__main__":
    main()
