"""The static buffer plan: a recording as the runtime reads it; its arena, weights, constants, meta staging.

Consumes `recordings/<tree>.<bucket>.json` (written by codegen/recording.py, format in docs/ARTIFACT.md; read
here without importing codegen) and the model's tensors by name; produces, per recording, the pointer of
every tensor argument (arena base + byte offset for meta and activation buffers, the weight's or constant
table's own storage otherwise, plus the element offset of the view) and a MetaStage: two host buffers
the size of the recording's meta region, used in turn, that the binder's tables are written into, then one
host-to-device copy. All recordings of an artifact share one arena (as large as the largest): replays run
one at a time, in order on one CUDA stream.
Relies on the recording's allocator placing every meta buffer before any activation (they live
throughout and are allocated first), so the meta region is one contiguous span at the arena's start.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from flidec.ir.errors import ArtifactError
from flidec.ir.program import Bucket
from flidec.runtime.meta import StreamMeta
from flidec.runtime.tables import FillRequest, check_requests, write_meta

RECORDING_VERSION = 1
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "i64": torch.int64,
          "i32": torch.int32}


@dataclass(frozen=True, slots=True)
class PlanBuffer:
    name: str
    region: str  # weight, constant, meta, activation
    dtype: str
    shape: tuple[int, ...]
    offset: int  # byte offset in the arena (meta, activation); -1 otherwise
    fill: str  # meta: the fill rule (runtime/tables.py)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.torch_dtype).element_size()


@dataclass(frozen=True, slots=True)
class PlanArg:
    """A tensor argument (buffer + element offset; shape and strides for checks) or a scalar."""

    buffer: str
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    scalar: str
    value: int | float | None


@dataclass(frozen=True, slots=True)
class PlanStep:
    node: str
    op: str
    kernel: str  # key into the manifest's kernels; "" for a step without a kernel (an incomplete recording)
    grid: tuple[int, ...]
    args: tuple[PlanArg, ...]


@dataclass(frozen=True, slots=True)
class RecordingPlan:
    bucket: Bucket
    buffers: tuple[PlanBuffer, ...]
    arena_bytes: int
    steps: tuple[PlanStep, ...]
    constants: tuple[tuple[str, tuple[float, ...]], ...]
    output: str
    index: Mapping[str, PlanBuffer] = field(default_factory=dict, compare=False, repr=False)  # by name

    def __post_init__(self) -> None:
        if not self.index:
            object.__setattr__(self, "index", {b.name: b for b in self.buffers})

    def buffer(self, name: str) -> PlanBuffer:
        return self.index[name]

    @property
    def meta(self) -> tuple[PlanBuffer, ...]:
        return tuple(b for b in self.buffers if b.region == "meta")

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.op for s in self.steps if not s.kernel))


def recording_from_json(d: Mapping[str, Any], where: str = "recording") -> RecordingPlan:
    """The runtime's view of a recording (ArtifactError on another version or a malformed file)."""
    if d.get("flidec_recording") != RECORDING_VERSION:
        raise ArtifactError(f"{where}: recording version {d.get('flidec_recording')!r}, this runtime reads "
                            f"{RECORDING_VERSION}")
    try:
        plan = RecordingPlan(
            bucket=Bucket(**d["bucket"]),
            buffers=tuple(PlanBuffer(b["name"], b["region"], b["dtype"], tuple(b["shape"]), b["offset"],
                                     b["fill"])
                          for b in d["buffers"]),
            arena_bytes=int(d["arena_bytes"]),
            steps=tuple(PlanStep(s["node"], s["op"], s["kernel"], tuple(s["grid"]),
                                 tuple(PlanArg(a["buffer"], a["offset"], tuple(a["shape"]),
                                               tuple(a["strides"]), a["scalar"], a["value"])
                                       for a in s["args"]))
                        for s in d["steps"]),
            constants=tuple((n, tuple(v)) for n, v in d["constants"]),
            output=d["output"],
        )
    except (KeyError, TypeError) as e:
        raise ArtifactError(f"{where}: malformed recording ({type(e).__name__}: {e})") from None
    _check(plan, where)
    return plan


def read_recording(path: Path) -> RecordingPlan:
    try:
        return recording_from_json(json.loads(path.read_bytes()), str(path))
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path}: unreadable recording ({e})") from None


def _check(plan: RecordingPlan, where: str) -> None:
    names = plan.index
    if len(names) != len(plan.buffers):
        raise ArtifactError(f"{where}: two buffers share a name")
    for b in plan.buffers:
        if b.dtype not in DTYPES:
            raise ArtifactError(f"{where}: buffer {b.name} has dtype {b.dtype}, which this runtime does not "
                                "know")
        if b.region in ("meta", "activation") and not 0 <= b.offset <= plan.arena_bytes - b.nbytes:
            raise ArtifactError(f"{where}: buffer {b.name} lies outside the arena")
    for s in plan.steps:
        for a in s.args:
            if a.buffer and a.buffer not in names:
                raise ArtifactError(f"{where}: step {s.node} reads unknown buffer {a.buffer}")
            if a.buffer:
                b = names[a.buffer]
                if len(a.shape) != len(a.strides):
                    raise ArtifactError(f"{where}: step {s.node} reads buffer {a.buffer} with {len(a.shape)} "
                                        f"dims and {len(a.strides)} strides; recompile the artifact")
                last = a.offset + sum((n - 1) * st for n, st in zip(a.shape, a.strides, strict=True) if n > 0)
                if a.offset < 0 or (math.prod(a.shape) and last >= math.prod(b.shape)):
                    raise ArtifactError(f"{where}: step {s.node} reads past the end of buffer {a.buffer}")
    if plan.output not in names:
        raise ArtifactError(f"{where}: output buffer {plan.output} is not in the plan")


def meta_span(plan: RecordingPlan) -> tuple[int, int]:
    """[lo, hi) bytes of the arena holding every meta buffer and nothing else (ArtifactError otherwise)."""
    meta = plan.meta
    lo = min(b.offset for b in meta)
    hi = max(b.offset + b.nbytes for b in meta)
    for b in plan.buffers:
        if b.region == "activation" and b.offset < hi and lo < b.offset + b.nbytes:
            raise ArtifactError(f"activation {b.name} lies inside the meta region [{lo}, {hi}): the runtime "
                                "copies that region in one piece")
    return lo, hi


class MetaStage:
    """The host side of one recording's meta region: tables in, one copy to the device arena out.

    Two host buffers, used in turn: while the copy out of one may still be pending on the device (the
    runtime binds and fills the next stream before the last one has run), the next fill writes the other.
    A fill waits for the copy last made from its buffer (an event recorded after it; pinned memory only:
    from pageable memory the copy is synchronous)."""

    def __init__(self, plan: RecordingPlan, pin: bool = False):
        self.plan = plan
        self.lo, self.hi = meta_span(plan)
        self.hosts = tuple(torch.zeros(self.hi - self.lo, dtype=torch.uint8, pin_memory=pin)
                           for _ in range(2))
        self.copied: list[Any] = [None, None]  # per host buffer: the event after its last copy (CUDA)
        self.current = 0
        self.buffers = plan.meta
        self.requests = tuple(FillRequest(b.name, b.fill, b.shape) for b in self.buffers)
        check_requests(self.requests, plan.bucket)  # once here: a fill then writes without checking shapes
        # per host buffer, each meta buffer's bytes in it as an array of the buffer's dtype and shape: made
        # once here, so that a fill writes the tables straight into them (no table allocated, then copied)
        self.views = tuple({b.name: host[b.offset - self.lo : b.offset - self.lo + b.nbytes]
                            .view(b.torch_dtype).view(b.shape).numpy() for b in self.buffers}
                           for host in self.hosts)

    @property
    def host(self) -> torch.Tensor:
        """The host buffer the last fill wrote (the next copy_to copies it)."""
        return self.hosts[self.current]

    def fill(self, tokens: torch.Tensor, meta: StreamMeta) -> None:
        """Write one stream's tables into the next host buffer (ValueError when the stream does not fit; the
        buffer the last fill wrote is left as it was)."""
        k = 1 - self.current
        if self.copied[k] is not None:
            self.copied[k].synchronize()  # its last copy has been read by the device
            self.copied[k] = None
        write_meta(self.requests, self.views[k], tokens, meta, self.plan.bucket)
        self.current = k

    def copy_to(self, arena: torch.Tensor) -> None:
        """The one host-to-device copy (asynchronous from pinned memory, ordered on the current stream)."""
        pinned = self.host.is_pinned()
        arena[self.lo : self.hi].copy_(self.host, non_blocking=pinned)
        if pinned and arena.is_cuda:
            self.copied[self.current] = torch.cuda.Event()
            self.copied[self.current].record()


class DeviceBuffers:
    """The storage every recording of an artifact points into: one arena, the weights, the constant tables."""

    def __init__(self, plans: Mapping[Any, RecordingPlan], weights: Mapping[str, torch.Tensor],
                 device: torch.device):
        self.device = device
        self.arena = torch.empty(max((p.arena_bytes for p in plans.values()), default=0), dtype=torch.uint8,
                                 device=device)
        self.tensors: dict[str, torch.Tensor] = {}  # weights and constants, in their recorded dtypes
        for key, plan in plans.items():
            consts = dict(plan.constants)
            for b in plan.buffers:
                if b.region == "weight":
                    if b.name not in weights:
                        raise ArtifactError(f"recording {key}: the weights have no tensor {b.name}")
                    value = weights[b.name]
                elif b.region == "constant":
                    value = torch.tensor(consts[b.name], dtype=torch.float32).reshape(b.shape)
                else:
                    continue
                if tuple(value.shape) != b.shape:
                    raise ArtifactError(f"recording {key}: {b.name} has shape {list(value.shape)}, the "
                                        f"recording {list(b.shape)}")
                have = self.tensors.get(b.name)
                if have is None:
                    self.tensors[b.name] = value.to(device=device, dtype=b.torch_dtype).contiguous()
                # A weight every recording names is the same tensor of `weights`: only its dtype can differ.
                # Moving it to the device again to compare would copy the whole model once per bucket.
                elif have.dtype != b.torch_dtype or (
                        b.region == "constant" and not torch.equal(have.cpu(), value.to(b.torch_dtype))):
                    raise ArtifactError(f"recording {key}: {b.name} differs from another recording's")

    def pointer(self, plan: RecordingPlan, arg: PlanArg) -> int:
        """The device address of a tensor argument: its buffer's base plus the view's element offset."""
        b = plan.buffer(arg.buffer)
        size = torch.empty((), dtype=b.torch_dtype).element_size()
        if b.region in ("meta", "activation"):
            return self.arena.data_ptr() + b.offset + arg.offset * size
        return self.tensors[b.name].data_ptr() + arg.offset * size

    def output(self, plan: RecordingPlan) -> torch.Tensor:
        """The recording's output buffer (label logits, fp32 [reads, labels]) as a view of the arena."""
        b = plan.buffer(plan.output)
        return self.arena[b.offset : b.offset + b.nbytes].view(b.torch_dtype).view(b.shape)
