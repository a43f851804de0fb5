"""The recording format: one bucket's launch sequence as codegen writes it and the runtime reads it.

Defines the schema (frozen dataclasses: Recording, Buffer, Arg, Step, KernelSpec), its JSON writer
(canonical bytes: sorted keys, no spaces) and reader (version and consistency checked, ArtifactError naming
the file), the format version, and DTYPES, the one map from a dtype's name (Triton's: "fp32", "bf16", "i32")
to torch's. codegen/recording.py builds Recordings and writes them through here; runtime/buffers.py places
them in memory. Relies only on torch, numpy and flidec.ir (the runtime never imports codegen).
The files are `recordings/<tree>.<bucket>.json` (docs/ARTIFACT.md).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flidec.ir.errors import ArtifactError
from flidec.ir.program import Bucket

RECORDING_VERSION = 1
DTYPES: dict[str, torch.dtype] = {  # a dtype's name in recordings and kernel signatures -> torch's dtype
    "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "i1": torch.bool,
    "u64": torch.uint64, "u32": torch.uint32, "u16": torch.uint16, "u8": torch.uint8,
}
DTYPE_NAMES: dict[torch.dtype, str] = {t: n for n, t in DTYPES.items()}  # DTYPES read backwards
MODEL_DTYPES: dict[str, torch.dtype] = {n: DTYPES[n] for n in ("fp32", "bf16")}  # what a model runs in


def numpy_type(name: str) -> type:
    """The numpy scalar type of the dtype named `name` (KeyError for bf16, which numpy lacks)."""
    if DTYPES[name] == torch.bfloat16:
        raise KeyError(f"dtype {name} has no numpy type")
    return np.dtype(str(DTYPES[name]).removeprefix("torch.")).type


@dataclass(frozen=True, slots=True)
class Buffer:
    """One buffer of a recording. `region`: weight (a parameter, by name), constant (values in the
    recording), meta (the binder fills it by the rule `fill` names, runtime/tables.py), activation, or saved
    (a saved-point staging buffer the engine holds outside the arena, shared by name across recordings:
    codegen/saved_rows.py). Arena buffers (meta, activation) have a byte offset; the others -1."""

    name: str
    region: str
    dtype: str
    shape: tuple[int, ...]
    offset: int = -1
    fill: str = ""

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.torch_dtype.itemsize


@dataclass(frozen=True, slots=True)
class Arg:
    """A tensor argument (buffer, element offset, shape, strides) or a scalar (Triton type, value)."""

    buffer: str = ""
    offset: int = 0
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    scalar: str = ""  # Triton type of a scalar argument ("i32", "fp32")
    value: int | float | None = None


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """What a step's kernel is specialized on; its key names the compiled kernel in the manifest."""

    name: str
    signature: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[str, Any], ...]
    num_warps: int
    num_stages: int

    @property
    def key(self) -> str:
        """What identifies the compiled kernel across buckets and layers (the AOT cache key)."""
        return hashlib.sha256(json.dumps(_plain(self), sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Step:
    node: str  # the graph node it computes
    op: str
    kernel: str = ""  # KernelSpec key; "" for a missing kernel (an incomplete recording)
    grid: tuple[int, ...] = ()
    args: tuple[Arg, ...] = ()  # kernel arguments; for a missing kernel: its operands, then its outputs
    outputs: int = 0  # for a missing kernel: how many of `args` (the last ones) it writes


@dataclass(frozen=True, slots=True)
class Recording:
    """A bucket's buffers (arena offsets placed), its steps in order, their kernels, the constant tables'
    values and the output buffer (label logits, fp32 [reads, labels])."""

    bucket: Bucket
    buffers: tuple[Buffer, ...]
    arena_bytes: int
    steps: tuple[Step, ...]
    kernels: tuple[KernelSpec, ...]
    constants: tuple[tuple[str, tuple[float, ...]], ...]
    output: str
    index: Mapping[str, Buffer] = field(init=False, compare=False, repr=False)  # the buffers by name

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {b.name: b for b in self.buffers})

    def buffer(self, name: str) -> Buffer:
        return self.index[name]

    @property
    def meta(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.region == "meta")

    @property
    def missing(self) -> tuple[str, ...]:
        """The ops that have no kernel yet, once each, in order of first use."""
        return tuple(dict.fromkeys(s.op for s in self.steps if not s.kernel))

    @property
    def complete(self) -> bool:
        return not self.missing


def _plain(obj: Any) -> Any:
    """A dataclass as JSON values: its init fields by name, tuples as lists."""
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj) if f.init}
    if isinstance(obj, (tuple, list)):
        return [_plain(x) for x in obj]
    return obj


def recording_to_json(rec: Recording) -> dict[str, Any]:
    """The recording as JSON values, with its version and, for readers, whether it is complete."""
    return {"flidec_recording": RECORDING_VERSION, **_plain(rec), "complete": rec.complete,
            "missing": list(rec.missing)}


def write_recording(rec: Recording) -> bytes:
    """Canonical JSON bytes of a recording (sorted keys, no spaces): the same recording, the same bytes."""
    return json.dumps(recording_to_json(rec), sort_keys=True, separators=(",", ":")).encode()


def recording_from_json(d: Mapping[str, Any], where: str = "recording") -> Recording:
    """A recording from its JSON values (ArtifactError on another version or a malformed or inconsistent
    recording, naming `where`)."""
    if d.get("flidec_recording") != RECORDING_VERSION:
        raise ArtifactError(f"{where}: recording version {d.get('flidec_recording')!r}, this flidec reads "
                            f"{RECORDING_VERSION}; recompile the artifact")
    try:
        rec = Recording(
            bucket=Bucket(**d["bucket"]),
            buffers=tuple(Buffer(b["name"], b["region"], b["dtype"], tuple(b["shape"]), b["offset"],
                                 b["fill"]) for b in d["buffers"]),
            arena_bytes=int(d["arena_bytes"]),
            steps=tuple(Step(s["node"], s["op"], s["kernel"], tuple(s["grid"]),
                             tuple(Arg(a["buffer"], a["offset"], tuple(a["shape"]), tuple(a["strides"]),
                                       a["scalar"], a["value"])
                                   for a in s["args"]), s["outputs"])
                        for s in d["steps"]),
            kernels=tuple(KernelSpec(k["name"], tuple(map(tuple, k["signature"])),
                                     tuple(map(tuple, k["constexprs"])), k["num_warps"], k["num_stages"])
                          for k in d["kernels"]),
            constants=tuple((n, tuple(v)) for n, v in d["constants"]),
            output=d["output"],
        )
    except (KeyError, TypeError) as e:
        raise ArtifactError(f"{where}: malformed recording ({type(e).__name__}: {e}); recompile the "
                            "artifact") from None
    _check(rec, where)
    return rec


def read_recording(path: Path) -> Recording:
    """The recording stored at `path` (ArtifactError naming it when unreadable or invalid)."""
    try:
        return recording_from_json(json.loads(path.read_bytes()), str(path))
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path}: unreadable recording ({e})") from None


def _check(rec: Recording, where: str) -> None:
    """What the runtime relies on: unique buffer names of known dtypes, arena buffers inside the arena,
    every tensor argument inside its buffer, the output a buffer."""
    names = rec.index
    if len(names) != len(rec.buffers):
        raise ArtifactError(f"{where}: two buffers share a name")
    for b in rec.buffers:
        if b.dtype not in DTYPES:
            raise ArtifactError(f"{where}: buffer {b.name} has dtype {b.dtype}, which this runtime does not "
                                "know")
        if b.region in ("meta", "activation") and not 0 <= b.offset <= rec.arena_bytes - b.nbytes:
            raise ArtifactError(f"{where}: buffer {b.name} lies outside the arena")
    for s in rec.steps:
        for a in s.args:
            if not a.buffer:
                continue
            if a.buffer not in names:
                raise ArtifactError(f"{where}: step {s.node} reads unknown buffer {a.buffer}")
            if len(a.shape) != len(a.strides):
                raise ArtifactError(f"{where}: step {s.node} reads buffer {a.buffer} with {len(a.shape)} "
                                    f"dims and {len(a.strides)} strides; recompile the artifact")
            last = a.offset + sum((n - 1) * st for n, st in zip(a.shape, a.strides, strict=True) if n > 0)
            if a.offset < 0 or (math.prod(a.shape) and last >= math.prod(names[a.buffer].shape)):
                raise ArtifactError(f"{where}: step {s.node} reads past the end of buffer {a.buffer}")
    if rec.output not in names:
        raise ArtifactError(f"{where}: output buffer {rec.output} is not in the recording")
