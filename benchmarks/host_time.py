"""The host's share of one request on the latency path, measured on the CPU alone: what `Program.label_logits`
spends before and after its engine (validation, planning, tokenizing, binding, gathering), with no GPU.

    python benchmarks/host_time.py --model DIR [--artifact DIR] [--workloads independent,race,quality]
                                   [--repeat 50] [--out FILE]

Consumes a model directory (its tokenizer: the weights are never loaded) and the harness's workloads;
compiles examples/systemone.flide for the cpu target (or takes `--artifact`, any artifact of that spec) and
builds its Program around an engine that returns zero logits at once, so `label_logits` times the host work
alone. For the first instance of each workload, medians over `--repeat` calls (milliseconds): the whole
call; validation; the template walker's plan with its one tokenizer batch; that batch alone (the texts the
walker hands `encode_texts`); the same texts encoded one by one (`encode`), which says what the batch's
threads buy on this host; binding the planned instance into a stream (`bound_from_plans`: packing and
build_meta); and flidec-solo's call for the same reads (`solo_ms`: each read's whole prompt, its ids
prepared untimed, as a root of one stream through `run_stream`, as benchmarks/engines/flidec.py runs it),
whose difference from `label_logits_ms` is the host work flidec-solo skips. The meta fill is left out: it
runs inside the engine's submit in both (benchmarks/profile_runtime.py times it on a GPU). Prints one JSON
line per workload; `--out` writes them. A diagnostic for the runtime's host work, not a benchmark.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.source import ensure_flidec

ensure_flidec(ROOT)

import torch


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(times), 3)


class ZeroEngine:
    """An engine that runs nothing: zero logits for the stream's reads, at once."""

    needs_bucket = True

    def submit(self, tree, bucket, stream):
        from flidec.runtime.engines import Done

        meta = stream.meta
        return Done(torch.zeros(len(meta.reads), meta.read_labels.shape[1]))


def host_program(artifact: Path):
    """The artifact's Program (trees, format, served name) around a ZeroEngine: what `load` builds, less
    the engine (no weights read)."""
    from flidec.ir.program_printer import parse_program
    from flidec.ir.serde import spec_from_json
    from flidec.models.tokenizer import load_tokenizer
    from flidec.runtime.next_token import NextTokenFormat
    from flidec.runtime.program import Program, TreeRuntime

    spec = spec_from_json(json.loads((artifact / "tree.json").read_text(encoding="utf-8")))
    program = parse_program((artifact / "program.txt").read_text(encoding="utf-8"))
    by_name = {t.name: t for t in spec.trees}
    trees = {t.name: TreeRuntime(by_name[t.name], t) for t in program.trees}
    fmt = NextTokenFormat(load_tokenizer(artifact / "tokenizer"))
    manifest = json.loads((artifact / "manifest.json").read_text(encoding="utf-8"))
    return Program(trees, fmt, ZeroEngine(), artifact.name, manifest)


def measure(program, instance: dict, repeat: int) -> dict:
    from flidec.ir.instance import validate_instance
    from flidec.runtime.binder import bound_from_plans, merge_chains
    from flidec.runtime.templates import TemplateWalker
    from flidec.testing.forests import pack_forest

    t = program.tree()
    fmt = program.fmt
    walker = TemplateWalker(t.tree, t.program.template, fmt)
    batches: list[list[str]] = []

    def recording(texts):  # the walker's one batch, kept
        batches.append(list(texts))
        return type(fmt).encode_texts(fmt, batches[-1])

    fmt.encode_texts = recording
    try:
        plan, _ = walker.plan(instance)
    finally:
        del fmt.encode_texts  # the class's method again
    texts = list(dict.fromkeys(batches[0]))
    plan = merge_chains(plan)  # what label_logits binds
    bound = bound_from_plans(t.tree, fmt, [plan], lambda p: (p, None))
    prompts = [(-1, plan.path_ids(seg)) for seg, _, _ in plan.reads]
    labels = {j: tuple(piece.labels) for j, (_, piece, _) in enumerate(plan.reads)}
    return {
        "rows": bound.stream.meta.num_rows, "segments": len(bound.stream.meta.segments),
        "reads": len(bound.stream.meta.reads), "texts": len(texts), "chars": sum(map(len, texts)),
        "label_logits_ms": median_ms(lambda: program.label_logits([instance]), repeat),
        "validate_ms": median_ms(lambda: validate_instance(t.tree, instance), repeat),
        "plan_ms": median_ms(lambda: walker.plan(instance), repeat),
        "tokenize_batch_ms": median_ms(lambda: fmt.encode_texts(texts), repeat),
        "tokenize_one_by_one_ms": median_ms(lambda: [fmt._tok.encode(text) for text in texts], repeat),
        "bind_ms": median_ms(lambda: bound_from_plans(t.tree, fmt, [plan], lambda p: (p, None)), repeat),
        "solo_ms": median_ms(lambda: program.run_stream(pack_forest(prompts, reads=labels)), repeat),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/host_time.py", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--artifact", type=Path, default=None,
                   help="a compiled systemone artifact (else compiled now)")
    p.add_argument("--workloads", default="independent,race,quality")
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)

    from benchmarks.workloads import build_workload
    from flidec.compile import compile_artifact

    artifact = args.artifact
    if artifact is None:
        artifact = Path(tempfile.mkdtemp(prefix="flidec-host-")) / "systemone"
        compile_artifact(ROOT / "examples" / "systemone.flide", args.model, "cpu", artifact)
    program = host_program(artifact)
    lines = []
    for name in args.workloads.split(","):
        instance = build_workload(name, program.fmt.count_tokens).instances[0]
        lines.append(json.dumps({name: measure(program, instance, args.repeat)}))
        print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
