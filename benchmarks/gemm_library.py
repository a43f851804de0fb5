"""cuBLAS (torch.mm) beside flidec's batch-invariant Triton GEMMs at a model's projections: bits and time.

    python benchmarks/gemm_library.py [--sizes 0.8B,4B] [--out FILE]

For one Gated DeltaNet and one attention layer of each of `--sizes` (flidec.testing.make_checkpoint's
shapes), bf16 x and W, both result dtypes (bf16; fp32, the output projections of `--activations fp32`):
- bits: at every row count in ROWS (bucket rows, and read counts for the trimmed last layer), whether
  torch.mm's rows equal codegen/gemm.linear's (row-invariant: E3's reference) and torch.mm over the first
  rows equal the same rows inside its largest launch; the row counts where either fails are listed.
- time: one layer's launches at each of TIME_ROWS in a CUDA graph, by class (the input projections, the
  SwiGLU's gate and up, the narrow output projections), Triton as the runtime launches them (grouped and the
  fused SwiGLU) and torch.mm one projection at a time (the SwiGLU as two torch.mm and a silu product), in ms.
What issue 28's choice of a library GEMM is measured by; a diagnostic, not the benchmark (run.py is).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.source import ensure_flidec
from benchmarks.tiles import time_graph

ensure_flidec(ROOT)

import torch
import torch.nn.functional as F

ROWS = (1, 2, 4, 9, 16, 33, 64, 128, 192, 256, 320, 448, 512, 640, 768, 1024, 1536, 2048, 3072, 4096, 6144,
        8192, 12288, 16384, 24576, 32768)
TIME_ROWS = (1024, 6144, 32768)


def shapes(size_name: str) -> dict[str, list[tuple[int, int]]]:
    """(N, K) of each projection class of one layer of each kind."""
    from flidec.testing.make_checkpoint import SIZES

    s = SIZES[size_name]
    key, value = s.gdn_key_heads * s.gdn_head_dim, s.gdn_value_heads * s.gdn_head_dim
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    return {
        "gdn_in": [(2 * key + value, s.hidden), (value, s.hidden), (s.gdn_value_heads, s.hidden),
                   (s.gdn_value_heads, s.hidden)],
        "attn_in": [(2 * q, s.hidden), (kv, s.hidden), (kv, s.hidden)],
        "swiglu": [(s.ffn, s.hidden), (s.ffn, s.hidden)],
        "gdn_out": [(s.hidden, value)],
        "attn_out": [(s.hidden, q)],
        "down": [(s.hidden, s.ffn)],
    }


def _mm(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    if out.dtype == x.dtype:
        return torch.mm(x, w.T, out=out)
    return out.copy_(torch.mm(x, w.T, out_dtype=out.dtype))


def bits(size_name: str, gen: torch.Generator) -> list[dict]:
    from flidec.codegen.gemm import linear

    rows = []
    for n, k in sorted({s for ss in shapes(size_name).values() for s in ss}):
        x = (torch.randn(max(ROWS), k, generator=gen) * 0.5).bfloat16().cuda()
        w = (torch.randn(n, k, generator=gen) * k ** -0.5).bfloat16().cuda()
        for dtype in (torch.bfloat16, torch.float32):
            full = _mm(x, w, torch.empty(len(x), n, dtype=dtype, device="cuda"))
            not_triton, not_invariant = [], []
            for m in ROWS:
                mine = _mm(x[:m], w, torch.empty(m, n, dtype=dtype, device="cuda"))
                if not torch.equal(mine, linear(x[:m], w, dtype=dtype)):
                    not_triton.append(m)
                if not torch.equal(mine, full[:m]):
                    not_invariant.append(m)
            rows.append({"size": size_name, "n": n, "k": k, "out": str(dtype).removeprefix("torch."),
                         "rows_not_triton": not_triton, "rows_not_invariant": not_invariant})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _launches(name: str, x: torch.Tensor, ws: list, ys: list):
    """One class's launches both ways: (Triton as the runtime launches them, torch.mm)."""
    from flidec.codegen.gemm import linear, linear_group, linear_silu_mul

    if name == "swiglu":
        act = torch.empty_like(ys[0])
        return (lambda: linear_silu_mul(x, ws[0], ws[1], act),
                lambda: act.copy_(F.silu(_mm(x, ws[0], ys[0])) * _mm(x, ws[1], ys[1])))
    if len(ws) > 1:
        return (lambda: linear_group(x, tuple(ws), tuple(ys)),
                lambda: [_mm(x, w, y) for w, y in zip(ws, ys, strict=True)])
    return lambda: linear(x, ws[0], ys[0]), lambda: _mm(x, ws[0], ys[0])


def timing(size_name: str, rows: int, gen: torch.Generator) -> dict:
    classes = shapes(size_name)
    out = {"size": size_name, "rows": rows}
    for name, members in classes.items():
        k = members[0][1]
        x = (torch.randn(rows, k, generator=gen) * 0.5).bfloat16().cuda()
        ws = [(torch.randn(n, k, generator=gen) * k ** -0.5).bfloat16().cuda() for n, _ in members]
        ys = [torch.empty(rows, n, dtype=torch.bfloat16, device="cuda") for n, _ in members]
        triton, library = _launches(name, x, ws, ys)
        flop = sum(2 * rows * n * k for n, _ in members)
        t_ms, l_ms = time_graph(triton), time_graph(library)
        out[name] = {"triton_ms": round(t_ms, 4), "torch_ms": round(l_ms, 4),
                     "triton_tflops": round(flop / t_ms / 1e9, 1),
                     "torch_tflops": round(flop / l_ms / 1e9, 1)}
    print(json.dumps(out), flush=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="0.8B,4B")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("gemm_library.py needs a CUDA GPU")
    gen = torch.Generator().manual_seed(0)
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "bits": [], "time": []}
    for size in args.sizes.split(","):
        report["bits"] += bits(size, gen)
        report["time"] += [timing(size, r, gen) for r in TIME_ROWS]
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
