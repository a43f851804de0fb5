"""The runtime's side of a recording and its launches, checked against codegen on the CPU: the recording
read back from its JSON is codegen's; the meta region the binder stages holds exactly the tables codegen's
player fills; every launch passes the exact pointer (base + byte offset + element offset) and fixed-width
scalar values, then the hidden pointers (global scratch where a kernel takes it); and the whole engine (one
arena, meta staged, launches in order) run through the Triton interpreter gives the player's logits bit
for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.fx

from flidec.ir.errors import ArtifactError
from flidec.ir.program import Bucket
from flidec.runtime.buffers import DeviceBuffers, MetaStage
from flidec.runtime.engines import GraphEngine
from flidec.runtime.launch import HIDDEN_PARAMS, CompiledKernel, pack_args
from flidec.runtime.meta import Read, Segment, Stream, build_meta
from flidec.runtime.recording import Arg, Buffer, recording_from_json, write_recording
from flidec.testing.streams import padded

BUCKET = Bucket("b0", rows=128, segments=6, depth=3, reads=4, labels=5)


def forked():
    segs = (Segment(0, 66, 0, -1, 0), Segment(66, 4, 66, 0, 1), Segment(70, 7, 66, 0, 1))
    reads = (Read(69, (5, 6, 7)), Read(76, (9, 10, 11, 12, 13)))
    tokens = torch.randint(0, 5000, (77,), generator=torch.Generator().manual_seed(1))
    return tokens, build_meta(segs, reads, 77)


def record(checkpoint):
    from flidec.codegen import recording
    from flidec.passes.manager import run
    from flidec.passes.pipeline import GRAPH_PIPELINE
    from flidec.runtime.reference.qwen3_5 import Qwen35

    module = Qwen35.from_pretrained(checkpoint, torch.bfloat16)
    lowered = run(torch.fx.symbolic_trace(module), GRAPH_PIPELINE).ir
    rec = recording.record(lowered, BUCKET)
    weights = {k: v.detach() for k, v in module.named_parameters(remove_duplicate=False)}
    return rec, weights


def fake_records(rec) -> dict[str, CompiledKernel]:
    """Kernel records with the recorded specs' parameters (no cubin: nothing is launched for real)."""
    return {k.key: CompiledKernel(k.name, "sm_90", b"",
                                  tuple((n, t) for n, t in k.signature if t != "constexpr"),
                                  k.constexprs, (), k.num_warps, k.num_stages, 0, "3.6.0")
            for k in rec.kernels}


class RecordingLauncher:
    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.launched: list = []

    def load(self, kernel: CompiledKernel) -> object:
        self.loaded.append(kernel.name)
        return kernel.name

    def launch(self, handle: object, launch) -> None:
        self.launched.append((handle, launch))


@pytest.fixture(scope="module")
def recorded(tiny_checkpoint):
    """Codegen's recording, the same read back from its JSON (what the runtime loads), and the weights."""
    rec, weights = record(tiny_checkpoint)
    loaded = recording_from_json(json.loads(write_recording(rec)))
    assert loaded == rec and not loaded.missing
    return rec, loaded, weights


def test_staged_meta_is_what_the_player_fills(recorded) -> None:
    from flidec.codegen.recording import fill_tables

    rec, loaded, _ = recorded
    tokens, meta = forked()
    stage = MetaStage(loaded)
    stage.fill(tokens, meta)
    want = fill_tables(rec, tokens, meta)
    assert {b.name for b in loaded.meta} == set(want)
    for b in loaded.meta:
        start = b.offset - stage.lo
        got = stage.host[start : start + b.nbytes].view(b.torch_dtype).view(b.shape)
        assert torch.equal(got, want[b.name].to(b.torch_dtype)), b.name
    arena = torch.zeros(loaded.arena_bytes, dtype=torch.uint8)
    stage.copy_to(arena)
    assert torch.equal(arena[stage.lo : stage.hi], stage.host)
    too_big = build_meta((Segment(0, 200, 0, -1, 0),), (), 200)
    with pytest.raises(ValueError, match="does not fit bucket b0"):
        stage.fill(torch.zeros(200, dtype=torch.int64), too_big)


def test_a_fill_writes_every_byte_of_its_host_buffer(recorded) -> None:
    """A fill writes its tables straight into the stage's host buffer, which still holds the tables of the
    stream before last (or, here, poison): every byte must be the new stream's, padding included, and an
    unpadded stream (the runtime does not pad) stages what the player fills for it padded to the bucket."""
    from flidec.codegen.recording import fill_tables

    rec, loaded, _ = recorded
    stage = MetaStage(loaded)
    for host in stage.hosts:
        host.fill_(0xA5)
    small = (torch.arange(9) + 3, build_meta((Segment(0, 9, 0, -1, 0),), (Read(8, (1, 2)),), 9))
    for tokens, meta in (forked(), forked(), small, small):  # the larger stream in both buffers, then smaller
        stage.fill(tokens, meta)
        whole = padded(Stream(tokens, meta), BUCKET.rows)
        want = fill_tables(rec, whole.tokens, whole.meta)
        for b in loaded.meta:
            start = b.offset - stage.lo
            got = stage.host[start : start + b.nbytes].view(b.torch_dtype).view(b.shape)
            assert torch.equal(got, want[b.name].to(b.torch_dtype)), b.name


def test_a_stage_refuses_a_table_of_another_shape(recorded) -> None:
    import dataclasses

    _, loaded, _ = recorded
    wrong = tuple(Buffer(b.name, b.region, b.dtype, (b.shape[0] - 1, *b.shape[1:]), b.offset, b.fill)
                  if b.name == "conv_taps" else b for b in loaded.buffers)
    bad = dataclasses.replace(loaded, buffers=wrong)
    with pytest.raises(ValueError, match=r"meta buffer conv_taps: the conv_taps rule gives \[128, 4\], the "
                                         r"recording has \[127, 4\]"):
        MetaStage(bad)


def test_launches_pass_exact_pointers_and_scalars(recorded) -> None:
    rec, loaded, weights = recorded
    kernels = fake_records(rec)
    launcher = RecordingLauncher()
    engine = GraphEngine({"t/b0": loaded}, kernels, weights, torch.device("cpu"), launcher, graphs=False)
    assert sorted(launcher.loaded) == sorted(k.name for k in kernels.values())
    assert engine.launches == {} and engine.stages == {}  # made at a bucket's first use
    arena = engine.buffers.arena.data_ptr()
    launches = engine.resolve("t/b0", saving=True)  # every step; without saved points, less the row copies
    assert len(launches) == len(rec.steps)
    copies = [s for s in rec.steps if s.op == "saved_rows"]
    assert copies and len(engine.resolve("t/b0")) == len(rec.steps) - len(copies)
    by_name = {b.name: b for b in rec.buffers}
    for step, (handle, launch) in zip(rec.steps, launches, strict=True):
        spec = next(k for k in rec.kernels if k.key == step.kernel)
        assert handle == spec.name and launch.grid == tuple(step.grid) + (1,) * (3 - len(step.grid))
        assert launch.args[-HIDDEN_PARAMS:] == (0,) * HIDDEN_PARAMS
        for a, value in zip(step.args, launch.args[:-HIDDEN_PARAMS], strict=True):
            if a.scalar:
                assert type(value) is {"i32": np.int32, "fp32": np.float32}[a.scalar] and value == \
                    np.dtype(type(value)).type(a.value)
                continue
            b = by_name[a.buffer]
            size = torch.empty((), dtype=b.torch_dtype).element_size()
            base = (arena + b.offset if b.region in ("meta", "activation")
                    else (engine.buffers.saved if b.region == "saved" else engine.buffers.tensors)[b.name]
                    .data_ptr())
            assert value == base + a.offset * size, (step.node, a.buffer)
    engine.run("t", BUCKET, padded(Stream(*forked()), BUCKET.rows))
    assert len(launcher.launched) == len(rec.steps) - len(copies)


def test_kernels_taking_global_scratch_get_the_engines_buffer(recorded) -> None:
    """A kernel that builds TMA descriptors on the device (codegen/gemm.py PERSISTENT) takes Triton's global
    scratch, `scratch` bytes a program: the engine holds one buffer for the largest such launch and passes
    its address as the first hidden pointer of those launches only; pack_args refuses such a kernel without
    one."""
    import dataclasses

    rec, loaded, weights = recorded
    kernels = fake_records(rec)
    taking = {key for key in kernels if key.startswith("gemm")} or {next(iter(kernels))}
    kernels |= {key: dataclasses.replace(kernels[key], scratch=384, scratch_align=128) for key in taking}
    engine = GraphEngine({"t/b0": loaded}, kernels, weights, torch.device("cpu"), RecordingLauncher(),
                         graphs=False)
    programs = [int(np.prod(s.grid)) for s in loaded.steps if s.kernel in taking]
    assert programs and engine.scratch.numel() == 384 * max(programs)
    for step, (_, launch) in zip(loaded.steps, engine.resolve("t/b0", saving=True), strict=True):
        first_hidden = launch.args[-HIDDEN_PARAMS]
        assert first_hidden == (engine.scratch.data_ptr() if step.kernel in taking else 0), step.node
        assert launch.args[-HIDDEN_PARAMS + 1:] == (0,) * (HIDDEN_PARAMS - 1)
    step = next(s for s in loaded.steps if s.kernel in taking)
    with pytest.raises(ArtifactError, match="needs 384 bytes of global scratch a program"):
        pack_args(kernels[step.kernel], step.args, lambda a: 1, "step 0")
    assert GraphEngine({"t/b0": loaded}, fake_records(rec), weights, torch.device("cpu"), RecordingLauncher(),
                       graphs=False).scratch is None


def test_mismatched_arguments_are_refused(recorded) -> None:
    rec, _, _ = recorded
    k = next(iter(fake_records(rec).values()))
    scalar = Arg("", 0, (), (), "i32", 3)
    tensor = Arg("tokens", 0, (1,), (1,), "", None)
    pointer = next(i for i, (_, t) in enumerate(k.params) if t.startswith("*"))
    args = [tensor if t.startswith("*") else scalar for _, t in k.params]
    args[pointer] = scalar
    with pytest.raises(ArtifactError, match="is a pointer, the recording passes a scalar"):
        pack_args(k, args, lambda a: 0, "step 0")
    with pytest.raises(ArtifactError, match="arguments for"):
        pack_args(k, args[:-1], lambda a: 0, "step 0")


def test_weights_must_match_the_recording(recorded) -> None:
    _, loaded, _ = recorded
    with pytest.raises(ArtifactError, match="the weights have no tensor"):
        DeviceBuffers({"t/b0": loaded}, {}, torch.device("cpu"))


INTERPRETED = """
import json, sys, torch
sys.path.insert(0, sys.argv[2])
from test_launch import BUCKET, forked, record, fake_records
from flidec.codegen import eager
from flidec.codegen.recording import play
from flidec.runtime.recording import recording_from_json, write_recording
from flidec.runtime.meta import Stream
from flidec.runtime.engines import GraphEngine
from flidec.testing.interpreter import InterpreterLauncher
from flidec.testing.streams import padded
assert eager.interpreting()
rec, weights = record(sys.argv[1])
loaded = recording_from_json(json.loads(write_recording(rec)))


launcher = InterpreterLauncher()
engine = GraphEngine({"t/b0": loaded}, fake_records(rec), weights, torch.device("cpu"), launcher,
                     graphs=False)
launcher.storages = [engine.buffers.arena, *engine.buffers.tensors.values()]
tokens, meta = forked()
got = engine.run("t", BUCKET, padded(Stream(tokens, meta), BUCKET.rows))
want = play(rec, tokens, meta, weights)[: len(meta.reads)]
print(json.dumps({"equal": bool(torch.equal(got, want)), "finite": bool(torch.isfinite(got[:, :3]).all())}))
"""


def test_engine_under_the_interpreter_equals_the_player(tiny_checkpoint) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    here = os.path.dirname(__file__)
    run = subprocess.run([sys.executable, "-c", INTERPRETED, str(tiny_checkpoint), here], env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"equal": True, "finite": True}


def test_recordings_share_weights_and_must_agree_on_constants(recorded) -> None:
    import dataclasses

    _, loaded, weights = recorded
    other = dataclasses.replace(loaded)
    buffers = DeviceBuffers({"t/b0": loaded, "t/b1": other}, weights, torch.device("cpu"))
    name = next(b.name for b in loaded.buffers if b.region == "weight")
    # placed once, in the recorded dtype
    assert buffers.tensors[name].dtype == loaded.buffer(name).torch_dtype
    const = next(b.name for b in loaded.buffers if b.region == "constant")
    changed = tuple((n, tuple(v + 1.0 for v in vals) if n == const else vals) for n, vals in loaded.constants)
    with pytest.raises(ArtifactError, match=f"{const} differs from another recording's"):
        DeviceBuffers({"t/b0": loaded, "t/b1": dataclasses.replace(loaded, constants=changed)}, weights,
                      torch.device("cpu"))
    retyped = tuple(dataclasses.replace(b, dtype="fp32" if b.dtype == "bf16" else "bf16") if b.name == name
                    else b for b in loaded.buffers)
    with pytest.raises(ArtifactError, match=f"{name} differs from another recording's"):
        DeviceBuffers({"t/b0": loaded, "t/b1": dataclasses.replace(loaded, buffers=retyped)}, weights,
                      torch.device("cpu"))
