"""A loaded recording's memory: the arena, the weights and constant tables, and the meta staging.

Consumes Recordings (runtime/recording.py, read from `recordings/<tree>.<bucket>.json`) and the model's
tensors by name; produces, per recording, the pointer of every tensor argument (arena base + byte offset
for meta and activation buffers, the weight's or constant table's own storage otherwise, plus the element
offset of the view) and a MetaStage: two host buffers the size of the recording's meta region, used in
turn, that the binder's tables are written into, then one host-to-device copy. All recordings of an
artifact share one arena (as large as the largest): replays run one at a time, in order on one stream.
Relies on the recording's allocator placing every meta buffer first (they live throughout), so the meta
region is one contiguous span at the arena's start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from flidec.ir.errors import ArtifactError
from flidec.runtime.meta import StreamMeta
from flidec.runtime.recording import Arg, Recording
from flidec.runtime.tables import FillRequest, check_requests, write_meta


def meta_span(rec: Recording) -> tuple[int, int]:
    """[lo, hi) bytes of the arena holding every meta buffer and nothing else (ArtifactError otherwise)."""
    meta = rec.meta
    lo = min(b.offset for b in meta)
    hi = max(b.offset + b.nbytes for b in meta)
    for b in rec.buffers:
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

    def __init__(self, rec: Recording, pin: bool = False):
        self.rec = rec
        self.lo, self.hi = meta_span(rec)
        self.hosts = tuple(torch.zeros(self.hi - self.lo, dtype=torch.uint8, pin_memory=pin)
                           for _ in range(2))
        self.copied: list[Any] = [None, None]  # per host buffer: the event after its last copy (CUDA)
        self.current = 0
        self.buffers = rec.meta
        self.requests = tuple(FillRequest(b.name, b.fill, b.shape) for b in self.buffers)
        check_requests(self.requests, rec.bucket)  # once here: a fill then writes without checking shapes
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
        write_meta(self.requests, self.views[k], tokens, meta, self.rec.bucket)
        self.current = k

    def copy_to(self, arena: torch.Tensor) -> None:
        """The one host-to-device copy (asynchronous from pinned memory, ordered on the current stream)."""
        pinned = self.host.is_pinned()
        arena[self.lo : self.hi].copy_(self.host, non_blocking=pinned)
        if pinned and arena.is_cuda:
            self.copied[self.current] = torch.cuda.Event()
            self.copied[self.current].record()


class DeviceBuffers:
    """The storage every recording of an artifact points into: one arena, the weights, the constant tables,
    and the saved-point staging buffers (each as large as the largest recording's, rows first)."""

    def __init__(self, recordings: Mapping[Any, Recording], weights: Mapping[str, torch.Tensor],
                 device: torch.device):
        self.device = device
        self.arena = torch.empty(max((r.arena_bytes for r in recordings.values()), default=0),
                                 dtype=torch.uint8, device=device)
        self.tensors: dict[str, torch.Tensor] = {}  # weights and constants, in their recorded dtypes
        staging: dict[str, tuple[int, tuple[int, ...], torch.dtype]] = {}
        for key, rec in recordings.items():
            for b in rec.buffers:
                if b.region != "saved":
                    continue
                rows, rest = b.shape[0], b.shape[1:]
                have = staging.get(b.name)
                if have is not None and (have[1:] != (rest, b.torch_dtype)):
                    raise ArtifactError(f"recording {key}: staging buffer {b.name} is {b.dtype} "
                                        f"{list(b.shape)}, another recording's differs past its rows")
                staging[b.name] = (max(rows, have[0] if have else 0), rest, b.torch_dtype)
        self.saved = {name: torch.zeros((rows, *rest), dtype=dtype, device=device)
                      for name, (rows, rest, dtype) in sorted(staging.items())}
        for key, rec in recordings.items():
            consts = dict(rec.constants)
            for b in rec.buffers:
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

    def pointer(self, rec: Recording, arg: Arg) -> int:
        """The device address of a tensor argument: its buffer's base plus the view's element offset."""
        b = rec.buffer(arg.buffer)
        size = b.torch_dtype.itemsize
        if b.region in ("meta", "activation"):
            return self.arena.data_ptr() + b.offset + arg.offset * size
        if b.region == "saved":
            return self.saved[b.name].data_ptr() + arg.offset * size
        return self.tensors[b.name].data_ptr() + arg.offset * size

    def output(self, rec: Recording) -> torch.Tensor:
        """The recording's output buffer (label logits, fp32 [reads, labels]) as a view of the arena."""
        b = rec.buffer(rec.output)
        return self.arena[b.offset : b.offset + b.nbytes].view(b.torch_dtype).view(b.shape)
