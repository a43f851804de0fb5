"""Forked Gated DeltaNet launch times per tile choice on a GPU: the measurements behind codegen/gdn.TILES.

    python benchmarks/gdn_tiles.py [--variants "prep_warps=16;dot=tf32,out_dot=tf32"] [--out FILE]

At Qwen3.5-0.8B head shapes (16 key and value heads of 128, bf16 q/k/v, fp32 g and beta) and forests shaped
like the harness's workloads (benchmarks/tiles.py FORESTS: QuALITY-like, a 5,000-token state and 9 questions
of 120 tokens, and four of them packed as the offline path packs them; RACE-like, 8 states of 450 tokens with
4 questions of 40 each), runs one layer's launches (GdnSpec.calls, through Triton's JIT) for the default
tiles and each variant (fields of GdnTiles for Dv = 128, `;` between variants), each in its own process. Per
variant: the output against the reference op (bf16 tolerance), a leaf's path against its plain stream
(bitwise, E3) and digests of the output's bits and of the fp32 states entering each chunk (whether a code
change kept them); then each launch group (prep, state walks, outputs) captured in its own CUDA graph and
timed with CUDA events, median of 20 replays, in milliseconds per layer. Writes JSON and prints one line per
variant and forest. A diagnostic, like profile_runtime.py: the benchmark is run.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import tiles
from benchmarks.source import ensure_flidec
from benchmarks.tiles import forest, forest_sweep, measure_forests, parse_variant, path_rows, time_graph

ensure_flidec(ROOT)

import torch

HK, HV, D = 16, 16, 128  # --heads: 0.8B's 16 key and 16 value heads of 128
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def forest_inputs(name: str, seed: int = 0):
    nodes, next_id, stream = forest(name)
    gen = torch.Generator().manual_seed(seed)
    table = {"q": torch.randn(next_id, HK, D, generator=gen).bfloat16(),
             "k": torch.randn(next_id, HK, D, generator=gen).bfloat16(),
             "v": torch.randn(next_id, HV, D, generator=gen).bfloat16(),
             "g": -0.3 * torch.rand(next_id, HV, generator=gen),
             "beta": torch.rand(next_id, HV, generator=gen)}
    return nodes, table, stream


def layer(table, stream):
    """One layer's calls on `stream`, with the tensors they need (all on the GPU)."""
    from flidec.codegen import gdn
    from flidec.runtime.tables import gdn_tables, max_chunks

    tokens = stream.tokens
    q, k, v, g, beta = (table[n][tokens].to(DEVICE) for n in ("q", "k", "v", "g", "beta"))
    out = torch.full(v.shape, float("nan"), dtype=v.dtype, device=DEVICE)
    spec = gdn.gdn_spec(q, k, v, g, beta, out, fused_gate=False)
    s = tiles.BUCKET_SEGMENTS
    if s:  # as a bucket of s segments: items per level, state slots and chunk slots for its most segments
        num_chunks = max_chunks(tiles.bucket_rows(stream.meta), s)
        tables = gdn_tables(stream.meta, len(stream.meta.levels), s, s, num_chunks)
    else:
        tables = gdn_tables(stream.meta)
    slots = gdn.slot_buffer(tables.num_slots, HV, D, D, DEVICE)
    work = gdn.ChunkWork.empty(tables.num_chunks, spec, DEVICE)
    items, tails, chunks = (t.to(DEVICE) for t in (tables.items, tables.tails, tables.chunks))
    calls = spec.calls(tables.num_chunks, tables.num_levels, tables.per_level, q, k, v, g, beta, g, g, items,
                       tails, chunks, work, out, slots)
    return calls, out, (q, k, v, g, beta), work.states


def run_calls(calls) -> None:
    from flidec.codegen import eager

    for c in calls:
        eager.launch(c.kernel, c.grid, *c.args, device=torch.device(DEVICE), num_warps=c.num_warps,
                     num_stages=c.num_stages, **c.constexprs)


def measure(name: str, nodes, table, stream) -> dict:
    from flidec.runtime.reference import ops
    from flidec.testing.forests import path_stream
    from flidec.testing.tolerance import TOLERANCE

    calls, out, (q, k, v, g, beta), states = layer(table, stream)
    run_calls(calls)
    rows = (stream.meta.segment_ids >= 0).to(DEVICE)
    want = ops.fork_gdn(q, k, v, g, beta, stream.meta)  # fp32 on the GPU, TF32 off (torch's default)
    atol, rtol = TOLERANCE[torch.bfloat16]
    err = (out[rows].double() - want[rows].double()).abs().max().item()
    close = torch.allclose(out[rows].double(), want[rows].double(), atol=atol, rtol=rtol)
    leaf = len(nodes) - 1
    plain = path_stream(nodes, leaf)
    pcalls, pout, _, _ = layer(table, plain)
    run_calls(pcalls)
    path = path_rows(stream.meta, leaf).to(DEVICE)
    exact = torch.equal(out[path], pout)
    per_layer = len(calls)
    groups = {"prep": calls[:1], "walks": calls[1 : per_layer - 1], "out": calls[-1:]}
    ms = {}
    if DEVICE == "cuda":
        ms = {group: time_graph(lambda cs=cs: run_calls(cs)) for group, cs in groups.items()}
        ms["layer"] = time_graph(lambda: run_calls(calls))
    digest = hashlib.sha256(out[rows].float().cpu().numpy().tobytes()).hexdigest()[:16]
    states_digest = hashlib.sha256(states.cpu().numpy().tobytes()).hexdigest()[:16]
    return {"variant": name, "close": close, "max_abs_err": err, "fork_equals_plain": exact, "digest": digest,
            "states_digest": states_digest,
            "ms": ms, "launches": per_layer}


def main(argv: list[str] | None = None) -> list[dict]:
    return forest_sweep(argv, __file__, __doc__, "GdnTiles fields for Dv 128, `;` between variants",
                        "16,16,128", "key heads, value heads, head dim (0.8B: 16,16,128)", measure_variant)


def measure_variant(variant: str, forests: list[str], heads: tuple[int, int, int]) -> list[dict]:
    from flidec.codegen import gdn

    global HK, HV, D
    HK, HV, D = heads
    gdn.TILES[D] = dataclasses.replace(gdn.TILES[D], **parse_variant(variant))
    return measure_forests(forests, forest_inputs, lambda *inputs: measure(variant or "default", *inputs))


if __name__ == "__main__":
    main()
