"""The engines that run a bound stream: `GraphEngine` (CUDA graphs of a GPU artifact's recordings) and
`ReferenceEngine` (the reference executor on the model graph, on the CPU).

A GraphEngine fills the bucket's meta region on the host, copies it to the arena in one piece and replays
the bucket's CUDA graph, captured from the recording's launches at the bucket's first use (runtime/buffers.py,
runtime/launch.py; nothing is traced, compiled or tuned), then copies the logits to pinned host memory, all
asynchronously on one CUDA stream, so the caller can bind its next stream while the device runs this one.
Both run streams with stored segments and capture saved points (runtime/saved): the ReferenceEngine through
its executor, the GraphEngine through its recordings' row copies and staging buffers (a stream without saved
points replays a second graph, without the copies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.fx

from flidec.ir.errors import ArtifactError
from flidec.ir.program import Bucket
from flidec.runtime.buffers import DeviceBuffers, MetaStage
from flidec.runtime.launch import CompiledKernel, Launch, Launcher, grid3, pack_args, scratch_bytes
from flidec.runtime.meta import Stream
from flidec.runtime.recording import Recording
from flidec.runtime.reference.executor import Captured
from flidec.runtime.reference.qwen3_5 import Qwen35
from flidec.runtime.saved.point import PointLayout, SavedPoint
from flidec.runtime.saved.staging import COPY_KERNEL, captured_points, stage_held, staging_names


class Pending(Protocol):
    captured: Sequence[Captured]  # after result(): the saved points' tensors the submit asked for

    def result(self) -> torch.Tensor:
        """The stream's label logits, [reads, >= labels] float32 on the host (waits for the device)."""
        ...


class Engine(Protocol):
    needs_bucket: bool  # streams run in a compiled bucket (static buffers, padding written by the meta stage)
    # or as they are
    resumes: bool  # runs streams with stored segments and captures saved points (runtime/saved)
    name: str  # what fixes its bits, for the saved points' scope: "reference:float32", "graph:sm_90"

    def submit(self, tree: str, bucket: Bucket | None, stream: Stream, held: Sequence[SavedPoint] = ()
               ) -> Pending:
        """Start running the stream after every stream submitted before it. One caller at a time (the
        Program's lock); `result()` may be called later from any thread, without the lock. `held`: per
        stored segment of the stream (meta.stored order), its saved point; the `captured` of the result:
        the tensors of each saved point meta.captures asks for (an engine that `resumes` only)."""
        ...


@dataclass(frozen=True)
class Done:
    logits: torch.Tensor
    captured: Sequence[Captured] = ()

    def result(self) -> torch.Tensor:
        return self.logits


@dataclass(frozen=True)
class _Copying:
    """Logits on their way to pinned host memory: an asynchronous copy, then an event recorded after it."""

    host: torch.Tensor
    copied: Any  # torch.cuda.Event
    captured: Sequence[Captured] = ()

    def result(self) -> torch.Tensor:
        self.copied.synchronize()
        return self.host


class ReferenceEngine:
    """The reference executor on the model graph: a cpu artifact, or any artifact on the CPU."""

    needs_bucket = False
    resumes = True

    def __init__(self, model_dir: Path, dtype: torch.dtype, device: torch.device,
                 readout: torch.Tensor | None = None):
        from flidec.runtime.reference.executor import ReferenceExecutor

        module = Qwen35.from_pretrained(model_dir, dtype, readout=readout).to(device)
        self.executor = ReferenceExecutor(torch.fx.symbolic_trace(module))
        self.device = device
        self.layout = PointLayout.of(module.cfg, dtype, module.act)
        self.name = f"reference:{str(dtype).removeprefix('torch.')}"

    def submit(self, tree: str, bucket: Bucket | None, stream: Stream, held: Sequence[SavedPoint] = ()
               ) -> Pending:
        if not held and not stream.meta.captures:
            return Done(self.executor.run_stream(stream, self.device).cpu())
        logits, captured = self.executor.run_saving(stream, self.device, held, stream.meta.captures)
        return Done(logits.cpu(), captured)


class GraphEngine:
    """A GPU artifact's buckets (by "tree/bucket"): per bucket its resolved launches, meta stage and
    (optionally) CUDA graph, each made at the bucket's first use. `submit` enqueues a stream's meta copy, its
    replay and the copy of its logits into fresh pinned memory on one CUDA stream (the one current at load)
    and returns without waiting, so the host can bind the next stream meanwhile: every step of stream i+1 is
    ordered after stream i's logits copy, the meta stage's host buffers are doubled (runtime/buffers.py), and
    each result owns its host tensor."""

    needs_bucket = True

    def __init__(self, recordings: Mapping[str, Recording], kernels: Mapping[str, CompiledKernel],
                 weights: Mapping[str, torch.Tensor], device: torch.device, launcher: Launcher, graphs: bool,
                 layout: PointLayout | None = None):
        self.recordings = dict(recordings)
        self.buffers = DeviceBuffers(self.recordings, weights, device)
        # saved points: when every recording restores and captures them for this model's layout
        self.layout = layout
        names = set(staging_names(layout)) if layout is not None else set()
        self.resumes = bool(names) and all(
            names <= {b.name for b in rec.buffers if b.region == "saved"} for rec in self.recordings.values())
        self.launcher = launcher
        self.handles = {key: launcher.load(k) for key, k in sorted(kernels.items())}  # all before any capture
        self.kernels = dict(kernels)
        self.pin = device.type == "cuda"
        for name, rec in self.recordings.items():
            if rec.missing:
                raise ArtifactError(f"bucket {name}: no kernel for {', '.join(rec.missing)}")
            for i, step in enumerate(rec.steps):
                if step.kernel not in self.kernels:
                    raise ArtifactError(f"bucket {name}, step {i} ({step.node}): kernel {step.kernel} is "
                                        "not in the artifact")
        # A bucket's launches (arguments packed), meta stage (pinned host buffers) and CUDA graph are made at
        # its first use, not at load: a ladder has many buckets, each costs host time to pack and stage and
        # more to capture, and a server may never see most of them.
        self.launches: dict[tuple[str, bool], tuple[tuple[object, Launch], ...]] = {}
        self.stages: dict[str, MetaStage] = {}
        self.stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
        self.capture = graphs
        self.graphs: dict[tuple[str, bool], Any] = {}
        self.name = "graph"
        # one global scratch buffer for every launch that takes one (TMA descriptors built on the device):
        # a bucket's launches run one after another on one stream, and so do its replays
        need = max((scratch_bytes(self.kernels[step.kernel], grid3(step.grid))
                    for rec in self.recordings.values() for step in rec.steps), default=0)
        self.scratch = torch.empty(need, dtype=torch.uint8, device=device) if need else None

    def resolve(self, name: str, saving: bool = False) -> tuple[tuple[object, Launch], ...]:
        """The bucket's launches: (kernel handle, packed arguments) per recorded step, made at the first
        call; without `saving`, less the saved-point copies (a stream with no stored root or capture)."""
        launches = self.launches.get((name, saving))
        if launches is None:
            rec = self.recordings[name]
            launches = self.launches[name, saving] = tuple(
                (self.handles[step.kernel],
                 Launch(self.kernels[step.kernel], grid3(step.grid),
                        pack_args(self.kernels[step.kernel], step.args,
                                  lambda a: self.buffers.pointer(rec, a),
                                  f"bucket {name}, step {i} ({step.node})",
                                  0 if self.scratch is None else self.scratch.data_ptr())))
                for i, step in enumerate(rec.steps)
                if saving or self.kernels[step.kernel].name != COPY_KERNEL)
        return launches

    def stage(self, name: str) -> MetaStage:
        """The bucket's meta stage, made at the first call."""
        stage = self.stages.get(name)
        if stage is None:
            stage = self.stages[name] = MetaStage(self.recordings[name], pin=self.pin)
        return stage

    def _launch_all(self, name: str, saving: bool = False) -> None:
        for handle, launch in self.resolve(name, saving):
            self.launcher.launch(handle, launch)

    def submit(self, tree: str, bucket: Bucket | None, stream: Stream, held: Sequence[SavedPoint] = ()
               ) -> Pending:
        assert bucket is not None
        meta = stream.meta
        saving = bool(held or meta.captures)
        assert not saving or self.resumes, "a stream with saved points on an engine that does not resume"
        if self.stream is None:  # a CPU arena (tests' fake launchers): every step is done when it returns
            out = self._enqueue(f"{tree}/{bucket.name}", stream, held).clone()
            return Done(out, self._captured(meta))
        with torch.cuda.stream(self.stream):
            out = self._enqueue(f"{tree}/{bucket.name}", stream, held)
            captured = self._captured(meta)
            host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
            host.copy_(out, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
        return _Copying(host, copied, captured)

    def _captured(self, meta) -> list[Captured]:
        if not meta.captures:
            return []
        assert self.layout is not None
        return captured_points(self.buffers.saved, meta, self.layout)

    def run(self, tree: str, bucket: Bucket | None, stream: Stream, held: Sequence[SavedPoint] = ()
            ) -> torch.Tensor:
        """Submit and wait: the stream's label logits on the host."""
        return self.submit(tree, bucket, stream, held).result()

    def _graph(self, key: str, saving: bool) -> Any:
        """The bucket's CUDA graph (with or without its saved-point copies), captured now if this is its
        first use (the capture waits for the device)."""
        graph = self.graphs.get((key, saving))
        if graph is None:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._launch_all(key, saving)
            self.graphs[key, saving] = graph
        return graph

    def _enqueue(self, key: str, stream: Stream, held: Sequence[SavedPoint] = ()) -> torch.Tensor:
        """Stage the held points, fill the meta stage, copy it to the arena, replay; the logits' rows as a
        view of the arena. The stream need not be padded to the bucket: the fill writes the padding rows'
        inert tables itself."""
        saving = bool(held or stream.meta.captures)
        if held:
            assert self.layout is not None
            stage_held(self.buffers.saved, held, self.layout)
        stage = self.stage(key)
        stage.fill(stream.tokens, stream.meta)
        stage.copy_to(self.buffers.arena)
        if self.capture:
            self._graph(key, saving).replay()
        else:
            self._launch_all(key, saving)
        return self.buffers.output(self.recordings[key])[: len(stream.meta.reads)]
