"""The projections' row invariance, checked on the GPU in hand before a Program serves (E3).

The GEMM kernels pick their tiles by the launch's rows (codegen/gemm.py's rungs), which keeps E3 only while
every tile shape gives a row the same bits on this hardware (docs/DESIGN.md, "Exactness"). That is a fact of
the GPU, not of the code, so the runtime checks it for the kernels it was given: per projection class (op,
weight shapes, dtypes) it launches each distinct kernel record of the class once, on its own bucket's rows,
with the same random rows of x and the same weights (the class's first), and requires the rows every launch
shares to be bitwise those of the launch over the fewest rows, i.e. the same rows alone and inside the largest
bucket. ArtifactError names the kernel and the buckets when not: the Program must not serve.
Consumes a GraphEngine (its recordings, kernel records, launcher and arena); writes only the arena, which
holds nothing live at load. Relies on runtime/reference/op_table.py for which ops are projections.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from flidec.ir.errors import ArtifactError
from flidec.runtime.launch import Launch, grid3, pack_args
from flidec.runtime.recording import Arg, Recording, Step
from flidec.runtime.reference.op_table import OPS

PROJECTIONS = frozenset(op.name for op in OPS if op.lowered == "codegen/gemm.py")
SEED = 20261203  # the random rows' generator: a fixed seed, so a refusal can be reproduced


@dataclass(frozen=True, slots=True)
class _Launch:
    """One projection step, its arguments by role (the kernel's parameter names)."""

    bucket: str
    step: Step
    x: Arg
    weights: tuple[Arg, ...]
    outputs: tuple[Arg, ...]
    rows: Arg

    @property
    def m(self) -> int:
        return self.x.shape[0]


def _roles(bucket: str, step: Step, params: tuple[tuple[str, str], ...]) -> _Launch:
    named = {name: a for (name, _), a in zip(params, step.args, strict=True)}
    try:
        return _Launch(bucket, step, named["x_ptr"],
                       tuple(a for n, a in named.items() if n.startswith("w") and n.endswith("_ptr")),
                       tuple(a for n, a in named.items() if n.startswith("y") and n.endswith("_ptr")),
                       named["rows_ptr"])
    except KeyError as e:
        raise ArtifactError(f"bucket {bucket} ({step.node}): a {step.op} kernel without parameter {e}") from e


def check_row_invariance(engine) -> int:
    """Run the check on `engine` (a GraphEngine); return how many launches it compared. ArtifactError when a
    projection's row differs between two of its launches."""
    recordings: Mapping[str, Recording] = engine.recordings
    classes: dict[tuple, list[_Launch]] = {}
    for bucket, rec in sorted(recordings.items()):
        for step in rec.steps:
            if step.op not in PROJECTIONS:
                continue
            kernel = engine.kernels[step.kernel]
            launch = _roles(bucket, step, kernel.params)
            key = (step.op, rec.buffer(launch.x.buffer).dtype, launch.x.shape[1:],
                   *((rec.buffer(a.buffer).dtype, a.shape) for a in launch.weights),
                   *(rec.buffer(a.buffer).dtype for a in launch.outputs))
            classes.setdefault(key, []).append(launch)
    compared = 0
    device = engine.buffers.arena.device
    gen = torch.Generator(device).manual_seed(SEED)
    for launches in classes.values():
        first = launches[0]
        chosen: dict[str, _Launch] = {}  # per kernel record: its launch over the most rows
        for launch in launches:
            have = chosen.get(launch.step.kernel)
            if have is None or launch.m > have.m:
                chosen[launch.step.kernel] = launch
        ordered = sorted(chosen.values(), key=lambda launch: launch.m)
        if len(ordered) < 2:
            continue
        x_dtype = recordings[first.bucket].buffer(first.x.buffer).torch_dtype
        x = (torch.randn(ordered[-1].m, first.x.shape[1], generator=gen, device=device) * 0.5).to(x_dtype)
        shared = ordered[0].m
        want = None
        for launch in ordered:
            got = _run(engine, launch, first, x[: launch.m], shared)
            compared += 1
            if want is None:
                want = got
                continue
            for i, (a, b) in enumerate(zip(want, got, strict=True)):
                if not torch.equal(a, b):
                    raise ArtifactError(_differs(engine, launch, ordered[0], i, shared))
    return compared


def _differs(engine, launch: _Launch, alone: _Launch, output: int, shared: int) -> str:
    kernel = engine.kernels[launch.step.kernel].name
    return (f"the projections are not row-invariant on this GPU: {launch.step.op} ({launch.step.node}, "
            f"kernel {kernel} {launch.step.kernel[:12]}) over {launch.m} rows in bucket {launch.bucket} "
            f"gives the first {shared} rows of output {output} other bits than over {alone.m} rows in "
            f"bucket {alone.bucket}; a request's answer would depend on its bucket (E3), so this GPU must "
            "not serve this artifact")


def _run(engine, launch: _Launch, first: _Launch, x: torch.Tensor, shared: int) -> tuple[torch.Tensor, ...]:
    """Launch `launch`'s kernel on x's rows with `first`'s weights; the first `shared` rows of its outputs."""
    rec = engine.recordings[launch.bucket]
    first_rec = engine.recordings[first.bucket]
    _view(engine, rec, launch.x).copy_(x)
    _view(engine, rec, launch.rows).fill_(launch.m)
    weights = {id(a): w for a, w in zip(launch.weights, first.weights, strict=True)}

    def pointer(a: Arg) -> int:
        w = weights.get(id(a))
        return engine.buffers.pointer(first_rec, w) if w is not None else engine.buffers.pointer(rec, a)

    kernel = engine.kernels[launch.step.kernel]
    scratch = 0 if engine.scratch is None else engine.scratch.data_ptr()
    args = pack_args(kernel, launch.step.args, pointer, f"bucket {launch.bucket} ({launch.step.node})",
                     scratch)
    engine.launcher.launch(engine.handles[launch.step.kernel], Launch(kernel, grid3(launch.step.grid), args))
    return tuple(_view(engine, rec, y)[:shared].clone() for y in launch.outputs)


def _view(engine, rec: Recording, a: Arg) -> torch.Tensor:
    """An arena argument as a tensor view (its buffer's bytes, the argument's offset, shape and strides)."""
    b = rec.buffer(a.buffer)
    if b.region not in ("meta", "activation"):
        raise ArtifactError(f"{a.buffer}: a projection's {b.region} argument where an arena buffer belongs")
    flat = engine.buffers.arena[b.offset : b.offset + b.nbytes].view(b.torch_dtype)
    return flat.as_strided(a.shape, a.strides, flat.storage_offset() + a.offset)  # offsets count from storage
