"""Fork attention launch times per tile choice on a GPU: the measurements behind codegen/attention.TILES.

    python benchmarks/attention_tiles.py [--variants "block_m=128;block_n=32,num_stages=3"] [--out FILE]

At Qwen3.5-0.8B's attention shapes (8 query heads and 2 kv heads of 256, bf16, with the output gate) and
the forests of gdn_tiles.py (QuALITY-like: a 5,000-token state and 9 questions of 120 tokens; RACE-like: 8
states of 450 tokens with 4 questions of 40 each), runs one layer's attention (codegen/attention.py,
through Triton's JIT) for the default tiles and each variant (fields of AttentionTiles for head dim 256,
`;` between variants), each in its own process. Per variant: the output against the reference op (bf16
tolerance) and a leaf's path against its plain stream (bitwise, E3); then the launch captured in a CUDA
graph and timed with CUDA events, median of 20 replays, in milliseconds. Writes JSON and prints one line
per variant and forest. A diagnostic like gdn_tiles.py: the benchmark is run.py.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import tiles as sweep_tiles
from benchmarks.source import ensure_flidec
from benchmarks.tiles import forest, forest_sweep, measure_forests, parse_variant, path_rows, time_graph

ensure_flidec(ROOT)

import torch

HQ, HKV, D = 8, 2, 256  # --heads: 0.8B's 8 query and 2 kv heads of 256
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def forest_inputs(name: str, seed: int = 0):
    nodes, next_id, stream = forest(name)
    gen = torch.Generator().manual_seed(seed)
    table = {"q": torch.randn(next_id, HQ, D, generator=gen).bfloat16(),
             "k": torch.randn(next_id, HKV, D, generator=gen).bfloat16(),
             "v": torch.randn(next_id, HKV, D, generator=gen).bfloat16(),
             "gate": torch.randn(next_id, HQ, D, generator=gen).bfloat16()}
    return nodes, table, stream


def attend(table, stream):
    """The layer's attention on `stream` (a NaN-filled output: rows it does not write stay NaN), and a
    function that reruns its launch (tables built once, outside any graph capture)."""
    import math

    from flidec.codegen import eager
    from flidec.codegen.attention import attention_spec, fork_attention_kernel
    from flidec.runtime import tables

    q, k, v, gate = (table[n][stream.tokens].to(DEVICE) for n in ("q", "k", "v", "gate"))
    out = torch.full(q.shape, float("nan"), dtype=q.dtype, device=DEVICE)
    s = sweep_tiles.BUCKET_SEGMENTS
    levels = tables.path_levels(stream.meta, num_segments=s or None).to(DEVICE)
    spec = attention_spec(q, k, v, gate, out, levels.shape[1])
    bound = tables.max_query_tiles(sweep_tiles.bucket_rows(stream.meta), s, spec.tiles.block_m) if s else None
    tiles = tables.query_tiles(stream.meta, spec.tiles.block_m, bound).to(DEVICE)

    def run() -> None:
        eager.launch(fork_attention_kernel, spec.grid(tiles.shape[0]), q, k, v, gate, out, tiles, levels,
                     1.0 / math.sqrt(D), device=torch.device(DEVICE), num_warps=spec.tiles.num_warps,
                     num_stages=spec.tiles.num_stages, **spec.constexprs())

    run()
    return out, run, (q, k, v, gate)


def measure(name: str, nodes, table, stream) -> dict:
    from flidec.runtime.reference import ops
    from flidec.testing.forests import path_stream
    from flidec.testing.tolerance import TOLERANCE

    out, run, (q, k, v, gate) = attend(table, stream)
    rows = (stream.meta.segment_ids >= 0).to(DEVICE)
    want = ops.fork_attention(q.float(), k.float(), v.float(), stream.meta) * torch.sigmoid(gate.float())
    atol, rtol = TOLERANCE[torch.bfloat16]
    err = (out[rows].double() - want[rows].double()).abs().max().item()
    close = torch.allclose(out[rows].double(), want[rows].double(), atol=atol, rtol=rtol)
    leaf = len(nodes) - 1
    pout, _, _ = attend(table, path_stream(nodes, leaf))
    path = path_rows(stream.meta, leaf).to(DEVICE)
    exact = torch.equal(out[path], pout)
    ms = time_graph(run) if DEVICE == "cuda" else None
    return {"variant": name, "close": close, "max_abs_err": err, "fork_equals_plain": exact, "ms": ms}


def main(argv: list[str] | None = None) -> list[dict]:
    return forest_sweep(argv, __file__, __doc__,
                        "AttentionTiles fields for head dim 256, `;` between variants", "8,2,256",
                        "query heads, kv heads, head dim (0.8B: 8,2,256)", measure_variant)


def measure_variant(variant: str, forests: list[str], heads: tuple[int, int, int]) -> list[dict]:
    from flidec.codegen import attention

    global HQ, HKV, D
    HQ, HKV, D = heads
    attention.TILES[D] = dataclasses.replace(attention.TILES[D], **parse_variant(variant))
    return measure_forests(forests, forest_inputs, lambda *inputs: measure(variant or "default", *inputs))


if __name__ == "__main__":
    main()
