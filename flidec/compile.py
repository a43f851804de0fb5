"""`flidec compile`: spec + model -> artifact, ahead of time, on a machine without a GPU.

Consumes a .flide spec, a model directory and a target; produces the artifact directory (codegen/artifact.py,
docs/ARTIFACT.md). The pipeline, top to bottom: the tree passes (passes/pipeline.TREE_PIPELINE) give the
program IR, a bucket ladder per tree; for a GPU target the model is traced (shapes only: no weights are
loaded), the graph passes (GRAPH_PIPELINE) lower it once, each bucket's launches are recorded, and every
distinct kernel is compiled for the target with codegen/aot (Triton's compiler, not its cache;
TRITON_INTERPRET must be unset). A `cpu` artifact holds the tree and program IR and the model reference the
reference executor runs. `kernel_cache` keeps compiled kernels between compiles, keyed by spec and source.
The artifact is written into a hidden directory beside OUT and renamed to OUT when complete: a killed
compile leaves no OUT for `flidec run` to mistake for an artifact.
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
from typing import TextIO

import torch
import torch.fx

from flidec.codegen import aot
from flidec.codegen.artifact import ArtifactInputs, write_artifact
from flidec.codegen.recording import JIT_KERNELS, KernelSpec, Recording, record
from flidec.formats import make_format
from flidec.frontend import load_spec
from flidec.ir.errors import FlideError
from flidec.ir.tree import Spec
from flidec.models.config import TextConfig
from flidec.models.tokenizer import load_tokenizer
from flidec.models.weights import resolve_model
from flidec.passes.manager import PASSES, Options, run
from flidec.passes.pipeline import GRAPH_PIPELINE, TREE_PIPELINE, CompileContext
from flidec.run import staging_dir
from flidec.runtime.launch import CompiledKernel, read_kernel
from flidec.runtime.reference.qwen3_5 import Qwen35

TARGETS = ("sm_90", "cpu")
GPU_DTYPE = torch.bfloat16


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
                     kernel_cache: Path | None = None, log: TextIO | None = None) -> CompileReport:
    start = time.perf_counter()
    if target not in TARGETS:
        raise FlideError(f"unknown target {target!r} (supported: {', '.join(TARGETS)})")
    dump, skip = set(dump_after), set(disabled)
    for flag, names in (("--dump-ir after=", dump), ("--disable-pass ", skip)):
        unknown = names - set(TREE_PIPELINE) - set(GRAPH_PIPELINE)
        if unknown:
            raise FlideError(f"{flag}{', '.join(sorted(unknown))}: no such pass (the passes: "
                             f"{', '.join(TREE_PIPELINE + GRAPH_PIPELINE)})")
    for name in sorted(skip):
        if PASSES[name].level_in != PASSES[name].level_out:
            raise FlideError(f"--disable-pass {name}: it turns {PASSES[name].level_in} IR into "
                             f"{PASSES[name].level_out} IR, which the passes after it need")
    out = Path(out)
    staging = _staging_dir(out)  # before any expensive work: OUT must be new or empty, its parent writable
    try:
        report = _compile_into(staging, spec_path, model, target, tree, bundle_weights, dump, skip,
                               time_passes, kernel_cache, log)
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
                  kernel_cache: Path | None, log: TextIO | None) -> CompileReport:
    """The compile itself, writing the artifact into `out` (an empty directory)."""
    spec, source = load_spec(spec_path)
    spec = _only(spec, tree)
    model_dir = resolve_model(str(model))
    fmt = make_format(spec.format, load_tokenizer(model_dir))

    def options(names: Sequence[str]) -> Options:
        return Options(dump_after=frozenset(dump & set(names)), disabled=frozenset(skip & set(names)),
                       time_passes=time_passes, dump_to=log or sys.stderr)  # read per call

    program = run(spec, TREE_PIPELINE, CompileContext(fmt=fmt), level="tree",
                  options=options(TREE_PIPELINE)).ir
    recordings: dict[tuple[str, str], Recording] = {}
    kernels: dict[str, CompiledKernel] = {}
    compiled = 0
    if target != "cpu":
        traced = torch.fx.symbolic_trace(Qwen35(TextConfig.from_dir(model_dir), GPU_DTYPE))
        lowered = run(traced, GRAPH_PIPELINE, options=options(GRAPH_PIPELINE)).ir
        for t in program.trees:
            for plan in t.buckets:
                rec = record(lowered, plan.bucket)
                if rec.missing:  # an op of a model graph no emitter knows: the runtime could not run it
                    raise FlideError(f"tree {t.name}, bucket {plan.bucket.name}: no kernel for "
                                     f"{', '.join(rec.missing)}")
                recordings[t.name, plan.bucket.name] = rec
        specs = {k.key: k for rec in recordings.values() for k in rec.kernels}
        for key in sorted(specs):
            kernels[key], fresh = _compile(specs[key], target, kernel_cache)
            compiled += fresh
    write_artifact(ArtifactInputs(spec, source.encode(), program, model_dir, target, recordings, kernels,
                                  bundle_weights), out)
    return CompileReport(out, 0.0, len(kernels), compiled, sum(len(t.buckets) for t in program.trees), 0)


def _only(spec: Spec, tree: str | None) -> Spec:
    if tree is None:
        return spec
    chosen = tuple(t for t in spec.trees if t.name == tree)
    if not chosen:
        raise FlideError(f"the spec has no tree `{tree}` (it has {', '.join(t.name for t in spec.trees)})")
    return dataclasses.replace(spec, trees=chosen)


def _compile(spec: KernelSpec, target: str, cache: Path | None) -> tuple[CompiledKernel, bool]:
    """The compiled kernel of `spec`, from the cache when it holds it (cache entries:
    `<target>-<key>-<source>` -> the record's digest, `source` Triton's hash of the kernel's source and its
    callees')."""
    fn = JIT_KERNELS[spec.name]
    entry = cache / f"{target}-{spec.key}-{fn.cache_key[:16]}" if cache is not None else None
    if entry is not None and entry.exists():
        return read_kernel(cache, entry.read_text().strip()), False
    kernel = aot.compile_kernel(fn, dict(spec.signature), dict(spec.constexprs), target=target,
                                num_warps=spec.num_warps, num_stages=spec.num_stages)
    if entry is not None:
        digest = aot.write_kernel(kernel, cache)
        entry.write_text(digest + "\n")
    return kernel, True
