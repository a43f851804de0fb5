"""Registers and spills of the fork attention kernel compiled for sm_90 (no GPU needed).

    python benchmarks/attention_spills.py [--heads 8,2,256] [--depth 4] [--no-gate] [--variant "num_stages=1"]

Compiles codegen/attention's fork_attention_kernel with its TILES for these head shapes (bf16; q, k, v and
out contiguous, the gate a strided view beside q as Qwen3.5's q_proj lays them out) through
codegen/aot.compile_kernel, and prints cuobjdump's REG and STACK (bytes of local memory per thread: spills),
shared memory, the SASS instruction count, and the instructions of the key-tile loops (the SASS between
each backward branch's target and the branch), with their local loads and stores and MMA instructions.
--variant replaces AttentionTiles fields for the head dim (as benchmarks/attention_tiles.py --variants does);
--sass FILE writes the SASS.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
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
    p.add_argument("--heads", default="8,2,256", help="query heads, kv heads, head dim (0.8B: 8,2,256)")
    p.add_argument("--depth", type=int, default=4, help="path levels in the table (a bucket's deepest path)")
    p.add_argument("--no-gate", action="store_true", help="without the output gate")
    p.add_argument("--variant", default="", help="AttentionTiles fields, e.g. num_warps=8,num_stages=1")
    p.add_argument("--sass", help="write the SASS here")
    args = p.parse_args(argv)
    from benchmarks.tiles import parse_variant
    from flidec.codegen import aot, attention

    hq, hkv, d = (int(x) for x in args.heads.split(","))
    attention.TILES[d] = dataclasses.replace(attention.TILES[d], **parse_variant(args.variant))
    strides = ((hq * d, d), (hkv * d, d), (hkv * d, d), (2 * hq * d, 2 * d), (hq * d, d))
    spec = attention.AttentionSpec(torch.bfloat16, hq, hkv, d, args.depth, not args.no_gate, strides)
    t = spec.tiles
    k = aot.compile_kernel(attention.fork_attention_kernel, spec.signature(), spec.constexprs(),
                           target="sm_90", num_warps=t.num_warps, num_stages=t.num_stages)
    cubin = read_cubin(k.cubin)
    if args.sass:
        Path(args.sass).write_text(cubin.sass)
    print(f"heads {hq},{hkv},{d} depth {args.depth} gate={not args.no_gate}: {t}")
    print(f"fork_attention_kernel REG {cubin.registers:>3d}  STACK {cubin.stack:>4d}  "
          f"shared {k.shared:>6d}  SASS {len(cubin.insts):>5d} instructions")
    for lo, hi, body in cubin.loops():
        local = sum(1 for s in body if re.search(r"\b(LDL|STL)\b", s))
        mma = sum(1 for s in body if "HGMMA" in s or "HMMA" in s)
        print(f"  loop {lo:#07x}-{hi:#07x}: {len(body):>5d} instructions, {local:>3d} local loads/stores, "
              f"{mma:>3d} MMA")


if __name__ == "__main__":
    main()
