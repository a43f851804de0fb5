"""The build stages (codegen/record_buckets.py, compile_kernels.py, write_artifact.py) run by the manager:
golden text of the recordings, kernels and artifact levels for the small spec's first bucket on the tiny
model (kernels compiled by a stand-in for codegen/aot, so nothing is built for real), a cpu target's empty
stages, each level's verifier rejecting a broken value, and a stage's failure naming the stage and the
passes before it.

Codegen is imported inside the tests: it imports Triton, which tests/codegen/conftest.py must see first
(it sets TRITON_INTERPRET). Regenerate the goldens with FLIDEC_UPDATE_GOLDEN=1 (then read the diff)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.fx

from flidec.models.config import TextConfig
from flidec.passes.manager import PassError, run
from flidec.passes.pipeline import BUILD_PIPELINE, GRAPH_PIPELINE, TREE_PIPELINE
from flidec.runtime.launch import CompiledKernel
from flidec.runtime.reference.qwen3_5 import Qwen35


@pytest.fixture(scope="module")
def program(small_spec, ctx):
    """The small spec's program IR cut to its smallest bucket: one recording to read."""
    ir = run(small_spec, list(TREE_PIPELINE), ctx).ir
    return replace(ir, trees=tuple(replace(t, buckets=t.buckets[:1]) for t in ir.trees))


@pytest.fixture(scope="module")
def gpu_ctx(ctx, tiny_checkpoint, small_spec, tmp_path_factory):
    """The context of an sm_90 compile of the small spec, the lowered graph traced as flidec compile
    traces it (shapes only, bf16)."""
    from flidec.codegen import compile_kernels, record_buckets, write_artifact  # noqa: F401 (registers them)

    traced = torch.fx.symbolic_trace(Qwen35(TextConfig.from_dir(tiny_checkpoint), torch.bfloat16))
    return replace(ctx, target="sm_90", graph=run(traced, list(GRAPH_PIPELINE)).ir, spec=small_spec,
                   spec_source=b"small", model_dir=tiny_checkpoint, out=tmp_path_factory.mktemp("unused"))


def fake_compile(fn, signature, constexprs, target, num_warps, num_stages, **_):
    """What codegen/aot.compile_kernel returns, with a cubin naming its inputs instead of machine code."""
    params = tuple((n, t) for n, t in signature.items() if t != "constexpr")
    cubin = f"{fn.__name__} {sorted(constexprs.items())} {num_warps} {num_stages}".encode()
    return CompiledKernel(fn.__name__, target, cubin, params, tuple(constexprs.items()), (), num_warps,
                          num_stages, 0, "3.6.0")


@pytest.fixture
def no_aot(monkeypatch):
    from flidec.codegen import aot

    monkeypatch.setattr(aot, "compile_kernel", fake_compile)


def test_recordings_golden(program, gpu_ctx, golden):
    from flidec.codegen.levels import render_recordings

    golden("small.record_buckets.ir", render_recordings(run(program, ["record_buckets"], gpu_ctx).ir))


def test_kernels_golden(program, gpu_ctx, golden, no_aot):
    from flidec.codegen.levels import render_kernels

    kernels = run(program, ["record_buckets", "compile_kernels"], gpu_ctx).ir
    assert kernels.compiled == len(kernels.by_key) > 0
    golden("small.compile_kernels.ir", render_kernels(kernels))


def test_artifact_golden(program, gpu_ctx, tmp_path, golden, no_aot):
    from flidec.codegen.levels import render_artifact

    written = run(program, list(BUILD_PIPELINE), replace(gpu_ctx, out=tmp_path / "art")).ir
    assert written.out == tmp_path / "art" and written.manifest["complete"]
    golden("small.write_artifact.ir", render_artifact(written))


def test_a_cpu_target_records_and_compiles_nothing(program, gpu_ctx, tmp_path):
    cpu = replace(gpu_ctx, target="cpu", graph=None, out=tmp_path / "art")
    kernels = run(program, ["record_buckets", "compile_kernels"], cpu).ir
    assert kernels.by_key == {} and kernels.recordings.by_bucket == {} and kernels.compiled == 0
    written = run(program, list(BUILD_PIPELINE), cpu).ir
    assert not written.manifest["kernels"] and "recordings" not in {p.name for p in written.out.iterdir()}


def test_recordings_verifier_lists_each_problem(program, gpu_ctx):
    from flidec.codegen.levels import verify_recordings

    rs = run(program, ["record_buckets"], gpu_ctx).ir
    ((key, rec),) = rs.by_bucket.items()
    assert verify_recordings(rs) == []
    k = next(i for i, b in enumerate(rec.buffers) if b.region == "activation")
    outside = replace(rec.buffers[k], offset=rec.arena_bytes)
    step = rec.steps[1]
    broken = replace(rec, buffers=(*rec.buffers[:k], outside, *rec.buffers[k + 1:]),
                     steps=(rec.steps[0], replace(step, kernel="nope"), replace(step, args=step.args[:-1]),
                            replace(step, kernel="", grid=()), *rec.steps[2:]))
    where = f"recording {key[0]}/{key[1]}"
    assert verify_recordings(replace(rs, by_bucket={key: broken})) == [
        f"{where}: buffer {outside.name} ({outside.nbytes} bytes at {rec.arena_bytes}) lies outside the "
        f"arena of {rec.arena_bytes} bytes",
        f"{where}: step {step.node}: kernel nope is not among the recording's kernels",
        f"{where}: step {step.node}: {len(step.args) - 1} arguments for the {len(step.args)} parameters of "
        f"{rec.kernels[[k.key for k in rec.kernels].index(step.kernel)].name}",
        f"{where}: step {step.node}: {step.op} has no kernel",
    ]
    assert verify_recordings(replace(rs, by_bucket={("small", "r9"): rec}))[:1] == [
        "recording small/r9: the program has no such bucket"]


def test_a_broken_recording_is_rejected_naming_the_stage_and_the_passes_before(program, gpu_ctx,
                                                                               monkeypatch):
    from flidec.codegen import record_buckets

    bucket = program.trees[0].buckets[0].bucket
    real = record_buckets.record
    half = real(gpu_ctx.graph, bucket).arena_bytes // 2
    monkeypatch.setattr(record_buckets, "record", lambda graph, b: replace(real(graph, b), arena_bytes=half))
    with pytest.raises(PassError) as e:
        run(program, list(BUILD_PIPELINE), gpu_ctx, before=[*TREE_PIPELINE, *GRAPH_PIPELINE])
    head, first = str(e.value).splitlines()[:2]
    assert head == ("in pass record_buckets (after verify, fold_prompt_text, dedup_prefixes, "
                    "bucket_topologies, layout, label_head, lower_forks, trim_reads, fuse_pointwise, "
                    "group_linears, fuse_gdn_norm): the recordings IR verifier rejects its output:")
    assert first.startswith(f"  recording small/{bucket.name}: buffer ")
    assert first.endswith(f" lies outside the arena of {half} bytes")


def test_an_uncompiled_kernel_is_rejected(program, gpu_ctx, no_aot):
    from flidec.codegen.levels import verify_kernels

    kernels = run(program, ["record_buckets", "compile_kernels"], gpu_ctx).ir
    key = min(kernels.by_key)
    name = kernels.by_key[key].name
    fewer = replace(kernels, by_key={k: v for k, v in kernels.by_key.items() if k != key})
    assert verify_kernels(fewer) == [f"kernel {key} ({name}) is recorded but not compiled"]
    other = replace(kernels.by_key[key], params=())
    assert verify_kernels(replace(kernels, by_key={**kernels.by_key, key: other}))[0].startswith(
        f"kernel {key} ({name}) was compiled with the parameters (), its spec has ((")


def test_a_missing_manifest_file_is_rejected(program, gpu_ctx, tmp_path):
    from flidec.codegen.levels import verify_artifact

    cpu = replace(gpu_ctx, target="cpu", graph=None, out=tmp_path / "art")
    written = run(program, list(BUILD_PIPELINE), cpu).ir
    assert verify_artifact(written) == []
    Path(written.out / "program.txt").unlink()
    assert verify_artifact(written) == ["program.txt: listed in the manifest, not written"]
