"""`flidec compile`: spec + model -> artifact, ahead of time, on a machine without a GPU.

Consumes a .flide spec, a model directory and a target; produces the artifact directory (docs/ARTIFACT.md).
Three pipelines of passes/pipeline.py, each run by the pass manager with one CompileContext: the tree
passes give the program IR; for a GPU target the model is traced (shapes only: no weights are loaded) and
the graph passes lower it once; the build stages record each bucket, compile every distinct kernel (or take
it from `kernel_cache`) and write the artifact (a `cpu` one holds the tree and program IR and the model
reference the reference executor runs). Errors name the failing pass and every pass before it, and
`--time-passes` prints one table of all three. The artifact is written into a hidden directory beside OUT
and renamed to OUT when complete: a killed compile leaves no OUT for `flidec run` to mistake for one.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.fx

from flidec.codegen import compile_kernels, record_buckets, write_artifact  # noqa: F401 (registers them)
from flidec.formats import resolve_format
from flidec.frontend import load_spec
from flidec.ir.errors import FlideError
from flidec.ir.tree import Format, Spec
from flidec.models.config import TextConfig
from flidec.models.tokenizer import load_tokenizer
from flidec.models.weights import resolve_model
from flidec.passes.context import CompileContext
from flidec.passes.manager import PASSES, Options, Timing, render_timings, run
from flidec.passes.pipeline import BUILD_PIPELINE, GRAPH_PIPELINE, TREE_PIPELINE
from flidec.run import staging_dir
from flidec.runtime.reference.qwen3_5 import Qwen35

PIPELINES = TREE_PIPELINE + GRAPH_PIPELINE + BUILD_PIPELINE

TARGETS = ("sm_90", "cpu")
GPU_DTYPE = torch.bfloat16
# --activations: the residual stream's, the projections' results and the Gated DeltaNet's inputs' and outputs'
# dtype on a GPU target (E4); the GEMMs' operands are GPU_DTYPE whichever. fp32 is the closer to the float32
# model and costs more than the 3% of throughput that would make it the default (BENCHMARKS.md "E4").
ACTIVATIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class CompileReport:
    out: Path
    seconds: float
    kernels: int
    compiled: int  # kernels compiled now (the rest came from the cache)
    buckets: int
    bytes: int


def compile_artifact(spec_path: str | Path, model: str | Path, target: str, out: str | Path, *,
                     tree: str | None = None, bundle_weights: bool = False,
                     dump_after: Sequence[str] = (), disabled: Sequence[str] = (), time_passes: bool = False,
                     kernel_cache: Path | None = None, log: TextIO | None = None,
                     activations: str = "bf16", format: str | None = None) -> CompileReport:
    start = time.perf_counter()
    if target not in TARGETS:
        raise FlideError(f"unknown target {target!r} (supported: {', '.join(TARGETS)})")
    if activations not in ACTIVATIONS:
        raise FlideError(f"--activations {activations}: not one of {', '.join(ACTIVATIONS)}")
    dump, skip = set(dump_after), set(disabled)
    for flag, names in (("--dump-ir after=", dump), ("--disable-pass ", skip)):
        unknown = names - set(PIPELINES)
        if unknown:
            raise FlideError(f"{flag}{', '.join(sorted(unknown))}: no such pass (the passes: "
                             f"{', '.join(PIPELINES)})")
    for name in sorted(skip):
        if PASSES[name].level_in != PASSES[name].level_out:
            raise FlideError(f"--disable-pass {name}: it turns {PASSES[name].level_in} IR into "
                             f"{PASSES[name].level_out} IR, which the passes after it need")
    out = Path(out)
    staging = _staging_dir(out)  # before any expensive work: OUT must be new or empty, its parent writable
    try:
        report = _compile_into(staging, spec_path, model, target, tree, bundle_weights, dump, skip,
                               time_passes, kernel_cache, log, activations, format)
        try:
            os.replace(staging, out)  # onto an absent or empty OUT (POSIX rename of a directory)
        except OSError as e:
            raise FlideError(f"-o {out}: cannot move the finished artifact there ({e.strerror or e}); it "
                             "must be new or empty") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return dataclasses.replace(report, out=out, seconds=time.perf_counter() - start, bytes=size)


def _staging_dir(out: Path) -> Path:
    """A new hidden directory beside `out` for the artifact being written; FlideError when `out` is a file or
    a non-empty directory or its parent cannot be written."""
    if out.exists() and not out.is_dir():
        raise FlideError(f"-o {out}: exists and is not a directory; name a new or empty directory")
    if out.is_dir() and any(out.iterdir()):
        raise FlideError(f"-o {out}: the output directory is not empty; name a new or empty directory")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return staging_dir(out.parent, out.name)
    except OSError as e:
        raise FlideError(f"-o {out}: cannot write there ({e.strerror or e}); choose a writable directory") \
            from None


def _compile_into(out: Path, spec_path: str | Path, model: str | Path, target: str, tree: str | None,
                  bundle_weights: bool, dump: set[str], skip: set[str], time_passes: bool,
                  kernel_cache: Path | None, log: TextIO | None, activations: str,
                  format: str | None) -> CompileReport:
    """The compile itself, writing the artifact into `out` (an empty directory)."""
    spec, source = load_spec(spec_path)
    spec = _only(spec, tree)
    model_dir = resolve_model(str(model))
    config = TextConfig.from_dir(model_dir)  # an architecture flidec does not run is refused here, any target
    to = log or sys.stderr  # sys.stderr as it is now (a test may have replaced it)
    chosen = resolve_format(spec.format, model_dir, load_tokenizer(model_dir), format, str(model))
    if chosen.decision is not None:  # the artifact's tree.json says the runtime reads format.json
        spec = dataclasses.replace(spec, format=Format("decision", (), spec.format.loc))
    if chosen.note:
        to.write(f"note: {chosen.note}\n")
    ctx = CompileContext(fmt=chosen.fmt, target=target, kernel_cache=kernel_cache, spec=spec,
                         spec_source=source.encode(), model_dir=model_dir, bundle_weights=bundle_weights,
                         out=out, activations=activations if target != "cpu" else None,
                         decision=chosen.decision, head=chosen.head)
    timings: list[Timing] = []

    def run_pipeline(ir: Any, names: Sequence[str], ctx: CompileContext, level: str) -> Any:
        """Run one pipeline after those before it: its failures name them, its timings join one table."""
        options = Options(dump_after=frozenset(dump & set(names)), disabled=frozenset(skip & set(names)),
                          dump_to=to)
        result = run(ir, names, ctx, level=level, options=options, before=[t.name for t in timings])
        timings.extend(result.timings)
        return result.ir

    program = run_pipeline(spec, TREE_PIPELINE, ctx, "tree")
    if target != "cpu":
        rows = chosen.head["weight"].shape[0] if chosen.head else 0
        traced = torch.fx.symbolic_trace(Qwen35(config, GPU_DTYPE,
                                                ACTIVATIONS[activations], head_rows=rows))
        ctx = dataclasses.replace(ctx, graph=run_pipeline(traced, GRAPH_PIPELINE, ctx, "fx"))
    written = run_pipeline(program, BUILD_PIPELINE, ctx, "program")  # a codegen/levels.Artifact
    if time_passes:
        to.write(render_timings(timings))
    return CompileReport(out, 0.0, len(written.manifest["kernels"]), written.compiled,
                         sum(len(t.buckets) for t in program.trees), 0)


def _only(spec: Spec, tree: str | None) -> Spec:
    if tree is None:
        return spec
    chosen = tuple(t for t in spec.trees if t.name == tree)
    if not chosen:
        raise FlideError(f"the spec has no tree `{tree}` (it has {', '.join(t.name for t in spec.trees)})")
    return dataclasses.replace(spec, trees=chosen)
