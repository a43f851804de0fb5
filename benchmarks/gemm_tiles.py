"""Batch-invariant GEMM launch times per tile choice on a GPU: the measurements behind codegen/gemm.TILES.

    python benchmarks/gemm_tiles.py [--variants "block_n=256;num_stages=4"] [--rows 6144] [--out FILE]

Runs the bf16 projections of one Qwen3.5-0.8B layer of each kind (Gated DeltaNet: in_proj_qkv 6144 x 1024,
in_proj_z 2048 x 1024, in_proj_b and in_proj_a 16 x 1024, out_proj 1024 x 2048; attention: q with its gate
4096 x 1024, k and v 512 x 1024, o_proj 1024 x 2048; the MLP's gate and up 3584 x 1024 and down 1024 x 3584;
18 GDN and 6 attention layers) at `--rows` rows, through codegen/gemm.py with the default tiles and each
variant (fields of GemmTiles for bf16 replacing the largest rung's, one tile choice for every size; `;`
between variants), each in its own process. Per variant: every
projection against torch's fp32 matmul of the same inputs (bf16 tolerance), batch invariance (the first
rows alone == the same rows inside the full launch, bitwise) and a digest of every output's bits, which the
summary compares with the default tiles' (a variant with the same bits could serve some buckets without
breaking E3); then all 186 launches of a 0.8B pass captured in one CUDA graph and timed (median of 20
replays, ms) with the achieved TFLOP/s, its 48 launches of 1,024 columns alone (`narrow_ms`), and the same
pass grouped as passes/group_linears groups it (96 launches: `grouped_ms`; `grouped_equal`: each group
member torch.equal to its own launch). The variant `torch` runs torch.matmul instead (cuBLAS, which
picks its kernels by shape: what the hardware's library does with the same launches, for reference). A
diagnostic like gdn_tiles.py: the benchmark is run.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.source import ensure_flidec
from benchmarks.tiles import parse_variant, sweep, time_graph

ensure_flidec(ROOT)

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
GDN = [(6144, 1024), (2048, 1024), (16, 1024), (16, 1024), (1024, 2048)]
ATTENTION = [(4096, 1024), (512, 1024), (512, 1024), (1024, 2048)]
MLP = [(3584, 1024), (3584, 1024), (1024, 3584)]
PASS = (GDN + MLP) * 18 + (ATTENTION + MLP) * 6  # 186 launches
# the same pass after passes/group_linears: projections of one input in one launch (96 launches)
GROUPED = ([GDN[:4], GDN[4:], MLP[:2], MLP[2:]] * 18 + [ATTENTION[:3], ATTENTION[3:], MLP[:2], MLP[2:]] * 6)
ROWS = 6144
TORCH = "torch"  # the variant that runs torch.matmul (cuBLAS: not batch-invariant) for reference
NARROW = 1024  # the out, o and down projections: N = 1,024, the launches with the fewest tiles (`narrow_ms`)


def _torch_linear(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return torch.matmul(x, w.T, out=out)


def _torch_group(x: torch.Tensor, ws: tuple, outs: tuple | None = None) -> tuple:
    return tuple(_torch_linear(x, w, o) for w, o in zip(ws, outs or (None,) * len(ws), strict=True))


def measure(name: str, rows: int) -> dict:
    from flidec.codegen.gemm import linear, linear_group
    from flidec.testing.tolerance import TOLERANCE

    if name == TORCH:
        linear, linear_group = _torch_linear, _torch_group

    gen = torch.Generator().manual_seed(0)
    shapes = sorted(set(PASS))
    xs = {k: (torch.randn(rows, k, generator=gen) * 0.5).bfloat16().to(DEVICE)
          for k in {k for _, k in shapes}}
    ws = {s: (torch.randn(*s, generator=gen) * s[1] ** -0.5).bfloat16().to(DEVICE) for s in shapes}
    outs = {s: torch.empty(rows, s[0], dtype=torch.bfloat16, device=DEVICE) for s in shapes}
    atol, rtol = TOLERANCE[torch.bfloat16]
    close, invariant, err, bits = True, True, 0.0, hashlib.sha256()
    for (n, k) in shapes:
        y = linear(xs[k], ws[(n, k)], outs[(n, k)])
        want = xs[k].float() @ ws[(n, k)].float().T
        err = max(err, (y.double() - want.double()).abs().max().item())
        close &= torch.allclose(y.double(), want.double(), atol=atol, rtol=rtol)
        head = 1 + rows // 3  # not a multiple of any tile
        invariant &= torch.equal(linear(xs[k][:head], ws[(n, k)]), y[:head])
        bits.update(y.view(torch.int16).cpu().numpy().tobytes())
    groups = [(xs[g[0][1]], tuple(ws[s] for s in g), tuple(outs[s] for s in g)) for g in GROUPED]
    # a group's members are distinct shapes, so their outputs are fresh tensors: compare with `outs`
    grouped_equal = all(torch.equal(y, outs[s]) for g in sorted(set(map(tuple, GROUPED))) if len(g) > 1
                        for s, y in zip(g, linear_group(xs[g[0][1]], tuple(ws[s] for s in g)), strict=True))
    ms = tflops = grouped_ms = narrow_ms = None
    if DEVICE == "cuda":
        ms = time_graph(lambda: [linear(xs[k], ws[(n, k)], outs[(n, k)]) for n, k in PASS])
        narrow = [(n, k) for n, k in PASS if n == NARROW]
        narrow_ms = time_graph(lambda: [linear(xs[k], ws[(n, k)], outs[(n, k)]) for n, k in narrow])
        tflops = round(sum(2 * rows * n * k for n, k in PASS) / ms / 1e9, 1)
        grouped_ms = time_graph(lambda: [linear_group(x, w, y) for x, w, y in groups])
    return {"variant": name, "rows": rows, "close": close, "max_abs_err": err, "batch_invariant": invariant,
            "bits": bits.hexdigest()[:16], "ms": ms, "tflops": tflops, "narrow_ms": narrow_ms,
            "grouped_ms": grouped_ms, "grouped_equal": grouped_equal}


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default="", help="GemmTiles fields for bf16, `;` between variants")
    p.add_argument("--rows", default=str(ROWS), help="rows of every launch (several: comma-separated)")
    p.add_argument("--out", type=Path)
    p.add_argument("--child", action="store_true", help="measure the one variant given here, in this process")
    args = p.parse_args(argv)
    if args.child:
        return measure_variant(args.variants, [int(r) for r in args.rows.split(",")])
    report = sweep(__file__, args.variants, args.out, ["--rows", args.rows])
    default = {r["rows"]: r["bits"] for r in report if r["variant"] == "default" and "bits" in r}
    for r in report:  # a tile choice that keeps the default's bits at every size may differ between buckets
        if "bits" in r:
            print(f"{r['variant']:>40} rows {r['rows']:>6}: {r['ms']} ms (narrow {r['narrow_ms']} ms, "
                  f"grouped {r['grouped_ms']} ms, "
                  f"members {'equal' if r['grouped_equal'] else 'NOT equal'}), "
                  f"{'same bits as' if r['bits'] == default.get(r['rows']) else 'other bits than'} "
                  "the default")
    return report


def measure_variant(variant: str, rows: list[int]) -> list[dict]:
    from flidec.codegen import gemm

    if variant and variant != TORCH:  # one tile choice for every size: the largest rung's with the variant's
        largest = gemm.TILES[torch.bfloat16][-1][-1]
        tiles = dataclasses.replace(largest, **parse_variant(variant))
        gemm.TILES[torch.bfloat16] = ((gemm.ANY, gemm.ANY, tiles),)
    report = []
    for r in rows:
        row = measure(variant or "default", r)
        report.append(row)
        print(json.dumps(row), flush=True)
    return report


if __name__ == "__main__":
    main()
