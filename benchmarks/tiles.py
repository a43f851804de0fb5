"""What the tile sweeps (gdn_tiles.py, attention_tiles.py, gemm_tiles.py) share: variant parsing, one
process per variant, the forests, CUDA-graph timing.

A variant is `field=value,field=value` over a kernel's tile dataclass; `;` separates variants. Each
variant runs in its own process (`--child`): one that faults leaves its CUDA context unusable, and the
next variant must not inherit that.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

# (parent, tokens) per node, parents first. QuALITY-like: a 5,000-token state and 9 questions of 120 tokens;
# RACE-like: 8 states of 450 tokens with 4 questions of 40 each; quality4: four QuALITY-like instances, as the
# offline path packs them; state: the QuALITY-like state alone; tiny: checks a script on the CPU interpreter.
FORESTS = {
    "quality": [(-1, 5000)] + [(0, 120)] * 9,
    "state": [(-1, 5000)],
    "quality4": [node for s in range(4) for node in [(-1, 5000)] + [(10 * s, 120)] * 9],
    "race": [node for s in range(8) for node in [(-1, 450)] + [(5 * s, 40)] * 4],
    "tiny": [(-1, 130), (0, 20), (0, 70)],
    "independent": [(-1, 150), (0, 24)],  # one question on a short state, as the independent workload
}
# --bucket-segments S: the fork stream's tables sized as a runtime bucket of S segments sizes them (its rows
# rounded up to whole tiles), padding work included, as a small request meets them; 0: sized to the stream.
BUCKET_SEGMENTS = 0


def forest(name: str):
    """The named forest: its nodes (parent, token ids 1..n), n + 1 (the size of a per-token table) and the
    nodes packed into one stream with a padding row before each segment."""
    from flidec.testing.forests import pack_forest

    nodes, next_id = [], 1
    for parent, length in FORESTS[name]:
        nodes.append((parent, list(range(next_id, next_id + length))))
        next_id += length
    return nodes, next_id, pack_forest(nodes, gap=1)


def path_rows(meta, leaf: int) -> torch.Tensor:
    """The stream rows of `leaf`'s path, root first: where its plain stream's rows sit in the forest's."""
    return torch.cat([torch.arange(meta.segments[i].start, meta.segments[i].start + meta.segments[i].length)
                      for i in meta.ancestors[leaf] + (leaf,)])


def parse_variant(text: str) -> dict[str, object]:
    over: dict[str, object] = {}
    for item in filter(None, text.split(",")):
        name, value = item.split("=")
        over[name.strip()] = int(value) if value.strip().isdigit() else value.strip()
    return over


def sweep(script: str, variants: str, out: Path | None, child_args: list[str]) -> list[dict]:
    """The default tiles, then each variant, each through `script --child --variants V *child_args`; prints
    and returns its JSON rows."""
    report = []
    for variant in [""] + [v for v in variants.split(";") if v.strip()]:
        child = subprocess.run([sys.executable, script, "--child", "--variants", variant, *child_args],
                               capture_output=True, text=True, check=False)
        rows = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
        if child.returncode != 0 or not rows:
            rows = [{"variant": variant or "default", "error": child.stderr.strip()[-300:]}]
        for r in rows:
            print(json.dumps(r), flush=True)
        report += rows
    if out:
        out.write_text(json.dumps(report, indent=1))
    return report


def forest_sweep(argv: list[str] | None, script: str, doc: str, tiles_help: str, heads: str, heads_help: str,
                 measure_variant: Callable[[str, list[str], tuple[int, int, int]], list[dict]]) -> list[dict]:
    """The command line of a sweep over forests (gdn_tiles.py, attention_tiles.py): the parent process runs
    the sweep; a `--child` measures its one variant through `measure_variant(variant, forests, heads)`."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--variants", default="", help=tiles_help)
    p.add_argument("--forests", default="quality,race", help=f"comma-separated, of {', '.join(FORESTS)}")
    p.add_argument("--heads", default=heads, help=heads_help)
    p.add_argument("--bucket-segments", type=int, default=0,
                   help="size the tables as a bucket of this many segments does (0: to the stream)")
    p.add_argument("--out", type=Path)
    p.add_argument("--child", action="store_true", help="measure the one variant given here, in this process")
    args = p.parse_args(argv)
    if args.child:
        global BUCKET_SEGMENTS
        BUCKET_SEGMENTS = args.bucket_segments
        return measure_variant(args.variants, args.forests.split(","), parse_heads(args.heads))
    return sweep(script, args.variants, args.out, ["--forests", args.forests, "--heads", args.heads,
                                                   "--bucket-segments", str(args.bucket_segments)])


def bucket_rows(meta) -> int:
    """The rows of the smallest bucket (whole ROW_ALIGN-row tiles) holding `meta`'s stream."""
    from flidec.ir.program import ROW_ALIGN

    return -(-meta.num_rows // ROW_ALIGN) * ROW_ALIGN


def measure_forests(names: list[str], inputs: Callable, measure: Callable[..., dict]) -> list[dict]:
    """`measure(nodes, table, stream)` per named forest, `inputs(name)` giving those; one JSON line each."""
    report = []
    for name in names:
        nodes, table, stream = inputs(name)
        row = {"forest": name, "rows": stream.meta.num_rows, "bucket_segments": BUCKET_SEGMENTS,
               **measure(nodes, table, stream)}
        report.append(row)
        print(json.dumps(row), flush=True)
    return report


def parse_heads(text: str) -> tuple[int, int, int]:
    """`--heads A,B,D`: two head counts and a head dim."""
    a, b, d = (int(x) for x in text.split(","))
    return a, b, d


def time_graph(run: Callable[[], None], n: int = 20) -> float:
    """Median milliseconds of one replay of `run`'s launches captured in a CUDA graph (run once first: it
    compiles, and leaves written what the launches read)."""
    run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    times = []
    for _ in range(n):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return round(statistics.median(times), 4)
