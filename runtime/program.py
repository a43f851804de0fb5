"""The minimal runtime: `load(artifact)` -> Program; `Program.run(instances)` -> answers.

Consumes an artifact directory (docs/ARTIFACT.md): the manifest (checked by runtime/artifact.load_manifest),
the tree IR (tree.json), the program IR with each tree's template and bucket ladder (program.txt), the
tokenizer files, the weights and, for a GPU target, the recordings and kernel records. Produces a Program
that plans instances from the template (tokenizing only the bound text; runtime/templates.py), splits an
instance over the largest bucket at tree boundaries (`split_plan`: sub-plans that each keep their reads'
whole paths; E1 makes the merged reads the bits of the whole), packs consecutive instances or sub-plans into
streams (each cut where it costs least per used row, in the smallest bucket that fits), runs the streams
and returns, per instance, its answer object (runtime/answers.py) or `{"error": {...}}` (a read whose path
alone is over the largest bucket is one).
Two engines run a bound stream: on CUDA, `GraphEngine` fills the bucket's meta region on the host, copies it
to the arena in one piece and replays the bucket's CUDA graph, captured from the recording's launches at the
bucket's first use (runtime/buffers.py, runtime/launch.py; nothing is traced, compiled or tuned), then
copies the logits to pinned host memory, all asynchronously on one CUDA stream: a call of several streams
plans and binds stream i+1 while the device runs stream i. On the CPU, the reference executor runs the model
graph (runtime/reference), one stream after the other. Imports torch, numpy, tokenizers, safetensors and
flidec.ir / flidec.runtime / flidec.models only (cuda.core lazily on the GPU path): never Triton, lark or
the compiler's packages.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import reduce
from itertools import accumulate, chain
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.fx

from flidec.ir.errors import ArtifactError, FlideError, InstanceError
from flidec.ir.instance import validate_instance
from flidec.ir.program import Bucket, TreeProgram
from flidec.ir.program_printer import parse_program
from flidec.ir.serde import spec_from_json
from flidec.ir.template import Sizes
from flidec.ir.tree import Tree
from flidec.models.tokenizer import load_tokenizer
from flidec.models.weights import load_weights
from flidec.runtime.answers import assemble
from flidec.runtime.artifact import load_manifest, weights_dir
from flidec.runtime.binder import Bound, Plan, Shape, Site, bound_from_plans, merge_chains
from flidec.runtime.buffers import DeviceBuffers, MetaStage
from flidec.runtime.launch import (
    CompiledKernel,
    Launch,
    Launcher,
    grid3,
    pack_args,
    read_kernel,
    scratch_bytes,
)
from flidec.runtime.meta import Stream, build_meta, pad_meta
from flidec.runtime.next_token import NextTokenFormat
from flidec.runtime.recording import MODEL_DTYPES as DTYPES
from flidec.runtime.recording import Recording, read_recording
from flidec.runtime.reference.qwen3_5 import Qwen35
from flidec.runtime.templates import _TemplateWalker

# A replay's fixed cost in rows, for choosing which pieces share a stream (`_groups`): ~4.5 ms fixed over
# ~5 us a row (r192 4.9 ms, r1024 8.7 ms, r6144 34.5 ms), measured on the H200 for Qwen3.5-0.8B shapes at
# 67d2c56 (BENCHMARKS.md). Refitted at 82ad9e4 (r1024 to r32768, one to twelve instances a stream): ~1.3 ms,
# 2.2 us a bucket row and 1.8 us more a used row, ~600 rows. Since the GEMMs compute only a stream's rows
# (68a9448, codegen/gemm.py ROWS), a bucket row costs less: ~1.7 ms, 0.7 us a bucket row and 3.0 us more a
# used row (six streams, r1024 to r32768), ~2,400 rows. With 600 or 2,400 the harness's workloads pack into
# the same streams but for mixed, which both fits predict no faster (<1%), so the value stays.
FIXED_ROWS = 1024


def error_record(e: FlideError) -> dict:
    """The result of an instance that could not be answered (one line of results.jsonl)."""
    problems = list(e.problems) if isinstance(e, InstanceError) else [str(e)]
    return {"error": {"type": type(e).__name__, "problems": problems}}


class Pending(Protocol):
    def result(self) -> torch.Tensor:
        """The stream's label logits, [reads, >= labels] float32 on the host (waits for the device)."""
        ...


class Engine(Protocol):
    needs_bucket: bool  # streams run in a compiled bucket (static buffers, padding written by the meta stage)
    # or as they are

    def submit(self, tree: str, bucket: Bucket | None, stream: Stream) -> Pending:
        """Start running the stream after every stream submitted before it. One caller at a time (the
        Program's lock); `result()` may be called later from any thread, without the lock."""
        ...


@dataclass(frozen=True)
class _Done:
    logits: torch.Tensor

    def result(self) -> torch.Tensor:
        return self.logits


@dataclass(frozen=True)
class _Copying:
    """Logits on their way to pinned host memory: an asynchronous copy, then an event recorded after it."""

    host: torch.Tensor
    copied: Any  # torch.cuda.Event

    def result(self) -> torch.Tensor:
        self.copied.synchronize()
        return self.host


# ---- engines -----------------------------------------------------------------------------------------------


class ReferenceEngine:
    """The reference executor on the model graph: a cpu artifact, or any artifact on the CPU."""

    needs_bucket = False

    def __init__(self, model_dir: Path, dtype: torch.dtype, device: torch.device):
        from flidec.runtime.reference.executor import ReferenceExecutor

        module = Qwen35.from_pretrained(model_dir, dtype).to(device)
        self.executor = ReferenceExecutor(torch.fx.symbolic_trace(module))
        self.device = device

    def submit(self, tree: str, bucket: Bucket | None, stream: Stream) -> Pending:
        return _Done(self.executor.run_stream(stream, self.device).cpu())


class GraphEngine:
    """A GPU artifact's buckets (by "tree/bucket"): per bucket its resolved launches, meta stage and
    (optionally) CUDA graph, each made at the bucket's first use. `submit` enqueues a stream's meta copy, its
    replay and the copy of its logits into fresh pinned memory on one CUDA stream (the one current at load)
    and returns without waiting, so the host can bind the next stream meanwhile: every step of stream i+1 is
    ordered after stream i's logits copy, the meta stage's host buffers are doubled (runtime/buffers.py), and
    each result owns its host tensor."""

    needs_bucket = True

    def __init__(self, recordings: Mapping[str, Recording], kernels: Mapping[str, CompiledKernel],
                 weights: Mapping[str, torch.Tensor], device: torch.device, launcher: Launcher, graphs: bool):
        self.recordings = dict(recordings)
        self.buffers = DeviceBuffers(self.recordings, weights, device)
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
        # its first use, not at load: packing and staging alone cost ~0.08 s a 0.8B bucket on a 2-core CPU, a
        # capture more, a ladder has ~20 buckets, and a server may never see most of them.
        self.launches: dict[str, tuple[tuple[object, Launch], ...]] = {}
        self.stages: dict[str, MetaStage] = {}
        self.stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
        self.capture = graphs
        self.graphs: dict[str, Any] = {}
        # one global scratch buffer for every launch that takes one (TMA descriptors built on the device):
        # a bucket's launches run one after another on one stream, and so do its replays
        need = max((scratch_bytes(self.kernels[step.kernel], grid3(step.grid))
                    for rec in self.recordings.values() for step in rec.steps), default=0)
        self.scratch = torch.empty(need, dtype=torch.uint8, device=device) if need else None

    def resolve(self, name: str) -> tuple[tuple[object, Launch], ...]:
        """The bucket's launches: (kernel handle, packed arguments) per recorded step, made at the first
        call."""
        launches = self.launches.get(name)
        if launches is None:
            rec = self.recordings[name]
            launches = self.launches[name] = tuple(
                (self.handles[step.kernel],
                 Launch(self.kernels[step.kernel], grid3(step.grid),
                        pack_args(self.kernels[step.kernel], step.args,
                                  lambda a: self.buffers.pointer(rec, a),
                                  f"bucket {name}, step {i} ({step.node})",
                                  0 if self.scratch is None else self.scratch.data_ptr())))
                for i, step in enumerate(rec.steps))
        return launches

    def stage(self, name: str) -> MetaStage:
        """The bucket's meta stage, made at the first call."""
        stage = self.stages.get(name)
        if stage is None:
            stage = self.stages[name] = MetaStage(self.recordings[name], pin=self.pin)
        return stage

    def _launch_all(self, name: str) -> None:
        for handle, launch in self.resolve(name):
            self.launcher.launch(handle, launch)

    def submit(self, tree: str, bucket: Bucket | None, stream: Stream) -> Pending:
        assert bucket is not None
        if self.stream is None:  # a CPU arena (tests' fake launchers): every step is done when it returns
            return _Done(self._enqueue(f"{tree}/{bucket.name}", stream).clone())
        with torch.cuda.stream(self.stream):
            out = self._enqueue(f"{tree}/{bucket.name}", stream)
            host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
            host.copy_(out, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
        return _Copying(host, copied)

    def run(self, tree: str, bucket: Bucket | None, stream: Stream) -> torch.Tensor:
        """Submit and wait: the stream's label logits on the host."""
        return self.submit(tree, bucket, stream).result()

    def _graph(self, key: str) -> Any:
        """The bucket's CUDA graph, captured now if this is its first use (the capture waits for the
        device)."""
        graph = self.graphs.get(key)
        if graph is None:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._launch_all(key)
            self.graphs[key] = graph
        return graph

    def _enqueue(self, key: str, stream: Stream) -> torch.Tensor:
        """Fill the meta stage, copy it to the arena, replay; the logits' rows as a view of the arena. The
        stream need not be padded to the bucket: the fill writes the padding rows' inert tables itself."""
        stage = self.stage(key)
        stage.fill(stream.tokens, stream.meta)
        stage.copy_to(self.buffers.arena)
        if self.capture:
            self._graph(key).replay()
        else:
            self._launch_all(key)
        return self.buffers.output(self.recordings[key])[: len(stream.meta.reads)]


# ---- binding, splitting and packing ------------------------------------------------------------------------


def plan_sizes(plan: Plan) -> Sizes:
    levels: list[int] = []
    for parent in plan.parents:
        levels.append(0 if parent < 0 else levels[parent] + 1)
    return Sizes(rows=sum(map(len, plan.ids)), segments=len(plan.ids), depth=1 + max(levels, default=0),
                 reads=len(plan.reads), labels=max((len(p.labels) for _, p, _ in plan.reads), default=0))


def combine(a: Sizes, b: Sizes) -> Sizes:
    """The needs of two instances packed into one stream (or of two disjoint parts of one plan)."""
    return Sizes(a.rows + b.rows, a.segments + b.segments, max(a.depth, b.depth), a.reads + b.reads,
                 max(a.labels, b.labels))


def stream_sizes(stream: Stream) -> Sizes:
    meta = stream.meta
    depth = 1 + max((len(a) for a in meta.ancestors), default=0)
    labels = max((len(r.labels) for r in meta.reads), default=0)
    return Sizes(meta.num_rows, len(meta.segments), depth, len(meta.reads), labels)


def _fits(need: Sizes, bucket: Bucket) -> bool:
    return bucket.fits(need.rows, need.segments, need.depth, need.reads, need.labels)


def _misfit(need: Sizes, bucket: Bucket) -> str:
    """What of `need` the bucket does not hold, in words: "300 rows; the largest bucket (r256) holds 256
    rows"."""
    caps = {"rows": bucket.rows, "segments": bucket.segments, "levels": bucket.depth, "reads": bucket.reads,
            "labels per read": bucket.labels}
    needs = dict(zip(caps, (need.rows, need.segments, need.depth, need.reads, need.labels), strict=True))
    over = [k for k in caps if needs[k] > caps[k]]
    return (f"{', '.join(f'{needs[k]} {k}' for k in over)}; the largest bucket ({bucket.name}) holds "
            f"{', '.join(f'{caps[k]} {k}' for k in over)}")


def split_plan(plan: Plan, bucket: Bucket) -> list[tuple[Plan, tuple[int, ...]]]:
    """Split a plan that does not fit `bucket` at tree boundaries: sub-plans that each fit it, with the plan's
    read indices each one holds (every read in exactly one). A sub-plan keeps the whole ancestor path of the
    segments it holds plus a run of whole subtrees, packed greedily in plan order; a subtree too large even
    alone with its path is split the same way one level down; subtrees with no read are left out. A read's
    path (tokens, positions, fork points) is the same in its sub-plan as in the plan, so by E1 its bits are
    too. InstanceError when the path of some read does not fit on its own (naming it and what is over)."""
    n = len(plan.ids)
    children: list[list[int]] = [[] for _ in range(n)]
    level = [0] * n
    for j, p in enumerate(plan.parents):
        if p >= 0:
            children[p].append(j)
            level[j] = level[p] + 1
    own_reads: list[list[int]] = [[] for _ in range(n)]
    for r, (seg, _, _) in enumerate(plan.reads):
        own_reads[seg].append(r)

    def labels(reads: list[int]) -> int:
        return max((len(plan.reads[r][1].labels) for r in reads), default=0)

    subtree = [Sizes(len(plan.ids[j]), 1, level[j] + 1, len(own_reads[j]), labels(own_reads[j]))
               for j in range(n)]
    for j in reversed(range(n)):  # children come after their parents
        if plan.parents[j] >= 0:
            subtree[plan.parents[j]] = combine(subtree[plan.parents[j]], subtree[j])

    def members(j: int) -> tuple[list[int], list[int]]:  # the segments and reads of j's subtree
        segs, reads, todo = [], [], [j]
        while todo:
            k = todo.pop()
            segs.append(k)
            reads += own_reads[k]
            todo += children[k]
        return segs, reads

    out: list[tuple[Plan, tuple[int, ...]]] = []

    def emit(segs: list[int], reads: list[int]) -> None:
        if not reads:
            return
        segs, reads = sorted(segs), sorted(reads)
        local = {s: k for k, s in enumerate(segs)}
        sub = Plan([plan.ids[s] for s in segs], [local.get(plan.parents[s], -1) for s in segs],
                   [(local[plan.reads[r][0]], plan.reads[r][1], plan.reads[r][2]) for r in reads])
        out.append((sub, tuple(reads)))

    def visit(j: int, path: list[int], above: Sizes) -> None:  # j's subtree with its path does not fit
        own = path + [j]
        base = Sizes(above.rows + len(plan.ids[j]), above.segments + 1, level[j] + 1, 0, 0)
        need = combine(base, Sizes(0, 0, 0, len(own_reads[j]), labels(own_reads[j])))
        if not _fits(need, bucket):
            first = own_reads[j][0] if own_reads[j] else min(members(j)[1])
            problem = f"{plan.reads[first][2]}: its path alone needs {_misfit(need, bucket)}"
            raise InstanceError([problem])
        segs, reads = list(own), list(own_reads[j])
        for c in children[j]:
            if subtree[c].reads == 0:
                continue  # no read needs it
            more = combine(need, subtree[c])
            if _fits(more, bucket):
                cs, cr = members(c)
                segs, reads, need = segs + cs, reads + cr, more
            elif _fits(combine(base, subtree[c]), bucket):
                emit(segs, reads)
                cs, cr = members(c)
                segs, reads, need = own + cs, cr, combine(base, subtree[c])
            else:
                visit(c, own, base)
        emit(segs, reads)

    for root in (j for j in range(n) if plan.parents[j] < 0):
        if subtree[root].reads == 0:
            continue
        if _fits(subtree[root], bucket):
            emit(*members(root))
        else:
            visit(root, [], Sizes(0, 0, 0, 0, 0))
    return out


@dataclass(frozen=True)
class _Piece:
    """One stream's share of one instance: its whole plan or a sub-plan of it."""

    index: int  # the instance's index in the caller's list
    plan: Plan
    sizes: Sizes
    reads: tuple[int, ...]  # the instance's read index of each of the plan's reads, in order


@dataclass
class _Answered:
    """One instance's reads gathered from its streams, in its plan order."""

    plan: Plan
    shape: Shape
    rows: list[torch.Tensor | None]  # per read: its label logits row
    input_tokens: int = 0


@dataclass(frozen=True)
class Stats:
    """What a Program has run since it was loaded."""

    streams: int = 0
    stream_tokens: int = 0  # rows holding segments (padding excluded)
    questions: int = 0  # reads


@dataclass(frozen=True)
class TreeRuntime:
    tree: Tree
    program: TreeProgram

    @property
    def largest(self) -> Bucket:
        return self.program.buckets[-1].bucket


class Program:
    """A loaded artifact. `run` is thread-safe: binding runs in the caller's thread, one stream at a time is
    submitted to the device (the buckets share one arena) and, on CUDA, each call binds its next stream while
    the device runs its last."""

    def __init__(self, trees: Mapping[str, TreeRuntime], fmt: NextTokenFormat, engine: Engine,
                 served_name: str, manifest: Mapping[str, Any]):
        self.trees = dict(trees)
        self.fmt = fmt
        self.engine = engine
        self.served_name = served_name
        self.manifest = manifest
        self.stats = Stats()
        self._lock = threading.Lock()

    def tree(self, name: str | None = None) -> TreeRuntime:
        if name is None:
            if len(self.trees) != 1:
                raise FlideError(f"the artifact has {len(self.trees)} trees ({', '.join(self.trees)}): "
                                 "name one")
            return next(iter(self.trees.values()))
        if name not in self.trees:
            raise FlideError(f"the artifact has no tree `{name}` (it has {', '.join(self.trees)})")
        return self.trees[name]

    def run(self, instances: Sequence[object], tree: str | None = None) -> list[dict]:
        """Per instance, in order: its answer object (a System One response for wire="systemone" trees) or
        `{"error": {"type", "problems"}}`."""
        t = self.tree(tree)
        answered, errors = self._run_all(instances, t)
        out: list[dict | None] = [None] * len(instances)
        for i, a in answered.items():
            sites = tuple(Site(0, path, piece) for _, piece, path in a.plan.reads)
            # assemble reads only the sites, shapes, format, wire and input tokens of a Bound
            bound = Bound(_NO_STREAM, sites, (a.shape,), {}, self.fmt, t.tree.wire, 0, (a.input_tokens,))
            out[i] = assemble(bound, _stacked(a), served_name=self.served_name)[0]
        for i, e in errors.items():
            out[i] = error_record(e)
        return out  # type: ignore[return-value]

    def label_logits(self, instances: Sequence[object], tree: str | None = None
                     ) -> list[torch.Tensor | FlideError]:
        """Per instance: the label logits of its reads in its plan order, [reads, its most labels] float32
        (-inf past a read's own labels), or why it was not run. For exactness tests and tools."""
        answered, errors = self._run_all(instances, self.tree(tree))
        out: list[torch.Tensor | FlideError | None] = [None] * len(instances)
        for i, a in answered.items():
            out[i] = _stacked(a)
        for i, e in errors.items():
            out[i] = e
        return out  # type: ignore[return-value]

    def run_stream(self, stream: Stream, tree: str | None = None, bucket: str | None = None) -> torch.Tensor:
        """Label logits of an already bound stream (unpadded), in the smallest bucket that fits or the named
        one: the plain single-sequence passes E3 compares with."""
        t = self.tree(tree)
        need = stream_sizes(stream)
        if bucket is not None:
            chosen = next((p.bucket for p in t.program.buckets if p.bucket.name == bucket), None)
            if chosen is None or not _fits(need, chosen):
                raise FlideError(f"the stream does not fit bucket {bucket}")
        else:
            chosen = t.program.bucket_for(need)
        if chosen is None and self.engine.needs_bucket:
            raise InstanceError([f"the stream needs {_misfit(need, t.largest)}"])
        return self._submit(t.tree.name, chosen, stream).result()

    # -- internals -------------------------------------------------------------------------------------------

    def _submit(self, tree: str, bucket: Bucket | None, stream: Stream) -> Pending:
        assert bucket is not None or not self.engine.needs_bucket
        with self._lock:
            pending = self.engine.submit(tree, bucket, stream)
            used = sum(seg.length for seg in stream.meta.segments)
            self.stats = Stats(self.stats.streams + 1, self.stats.stream_tokens + used,
                               self.stats.questions + len(stream.meta.reads))
        return pending

    def _run_all(self, instances: Sequence[object], t: TreeRuntime
                 ) -> tuple[dict[int, _Answered], dict[int, FlideError]]:
        """Plan every instance (errors by caller index), split those over the largest bucket, pack the pieces
        into streams and run them, gathering each instance's reads back in its plan order. Pipelined: the
        instances of stream i+1 are planned (tokenized), bound and submitted before stream i's logits are
        waited for, so on CUDA the host's part of a stream overlaps the device's part of the one before."""
        answered: dict[int, _Answered] = {}
        errors: dict[int, FlideError] = {}
        waiting: deque[tuple[list[_Piece], Bound, Pending]] = deque()
        for group, bucket in _groups(self._pieces(instances, t, answered, errors), t):
            bound = bound_from_plans(t.tree, self.fmt, group, lambda p: (p.plan, None))
            waiting.append((group, bound, self._submit(t.tree.name, bucket, bound.stream)))
            if len(waiting) > 1:
                _gather(*waiting.popleft(), answered)
        while waiting:
            _gather(*waiting.popleft(), answered)
        return answered, errors

    def _pieces(self, instances: Sequence[object], t: TreeRuntime, answered: dict[int, _Answered],
                errors: dict[int, FlideError]) -> Iterator[_Piece]:
        """Each instance planned (its InstanceError into `errors`), its chains merged (`merge_chains`: fewer
        segments, the same bits), whole or split to fit the largest bucket."""
        walker = _TemplateWalker(t.tree, t.program.template, self.fmt)
        for i, inst in enumerate(instances):
            try:
                validate_instance(t.tree, inst)  # the spec's token bounds: the walker counts them in a batch
                if not isinstance(inst, Mapping) or t.tree.state.name not in inst:
                    raise InstanceError([f"{t.tree.state.name}: missing"])
                plan, shape = walker.plan(inst)
                plan = merge_chains(plan)
                sizes = plan_sizes(plan)
                whole = [(plan, tuple(range(len(plan.reads))))]
                try:
                    parts = whole if _fits(sizes, t.largest) else split_plan(plan, t.largest)
                except InstanceError:
                    if self.engine.needs_bucket:
                        raise
                    parts = whole  # the reference executor runs a stream of any size
            except InstanceError as e:
                errors[i] = e
                continue
            answered[i] = _Answered(plan, shape, [None] * len(plan.reads))
            for p, reads in parts:
                if p is not plan:  # a sub-plan can keep one child of a parent that had several: a chain again
                    p = merge_chains(p)
                yield _Piece(i, p, sizes if p is plan else plan_sizes(p), reads)


_NO_STREAM = Stream(torch.zeros(0, dtype=torch.int64), build_meta((), (), 0))


def _gather(group: list[_Piece], bound: Bound, pending: Pending, answered: dict[int, _Answered]) -> None:
    """Route a stream's logits rows to the instances its pieces belong to (the binder lays each piece's reads
    out contiguously, in piece order, each in its plan order)."""
    logits = pending.result()
    row = 0
    for k, piece in enumerate(group):
        a = answered[piece.index]
        for r in piece.reads:
            a.rows[r] = logits[row]
            row += 1
        a.input_tokens += bound.input_tokens[k]
    assert row == len(bound.sites)


def _stacked(a: _Answered) -> torch.Tensor:
    """[reads, the instance's most labels] float32, -inf past each read's own labels."""
    width = max((len(piece.labels) for _, piece, _ in a.plan.reads), default=0)
    if a.rows and all(r is not None and r.dtype == torch.float32 and r.shape[0] >= width for r in a.rows):
        return torch.stack([row[:width] for row in a.rows])  # every row as wide: one op, not one copy a row
    out = torch.full((len(a.rows), width), float("-inf"))
    for r, row in enumerate(a.rows):
        assert row is not None
        w = min(width, row.shape[0])
        out[r, :w] = row[:w]
    return out


def _groups(pieces: Iterable[_Piece], t: TreeRuntime) -> Iterator[tuple[list[_Piece], Bucket | None]]:
    """The pieces in streams, in order, each stream in the smallest bucket that holds it. Consecutive pieces
    are gathered while together they fit the largest bucket; once the next one would not (or none is left),
    a stream takes the prefix of the gathered pieces that costs least per used row, (its bucket's rows +
    FIXED_ROWS) / its rows, the longer on a tie, and the rest stay gathered. Taking them all would often land
    just past a rung of the ladder: six QuALITY-like instances of 6,106 rows (36,636) pad r49152 by a quarter
    where four fill r24576. A piece that fits no bucket (reference engine only) goes alone (bucket None).
    Only the gathered pieces are held, so each piece is planned just before the stream that needs it."""
    group: list[_Piece] = []
    for p in chain(pieces, [None]):  # None: the end, which sends whatever is gathered
        while group and (p is None or not _fits(_need([*group, p]), t.largest)):
            k, bucket = _cheapest_prefix(group, t)
            yield group[:k], bucket
            group = group[k:]
        if p is not None and not _fits(p.sizes, t.largest):
            yield [p], None
        elif p is not None:
            group.append(p)


def _need(pieces: list[_Piece]) -> Sizes:
    return reduce(combine, (p.sizes for p in pieces))


def _cheapest_prefix(group: list[_Piece], t: TreeRuntime) -> tuple[int, Bucket]:
    """The length of the prefix of `group` (all of which fits the largest bucket) with the least
    (bucket rows + FIXED_ROWS) / used rows, the longest of those, and its bucket."""
    needs = list(accumulate((p.sizes for p in group), combine))
    buckets = [t.program.bucket_for(n) for n in needs]
    cost = [Fraction(b.rows + FIXED_ROWS, n.rows)  # type: ignore[union-attr]
            for b, n in zip(buckets, needs, strict=True)]
    k = min(range(len(group)), key=lambda k: (cost[k], -k))
    return k + 1, buckets[k]  # type: ignore[return-value]


def _padded(stream: Stream, rows: int) -> Stream:
    """The same stream with padding rows up to `rows` (inert: no segment, token 0). The meta stage fills the
    same tables from the stream unpadded, so the runtime does not pad (tests and tools do)."""
    meta = stream.meta
    if meta.num_rows == rows:
        return stream
    tokens = torch.zeros(rows, dtype=torch.int64)
    tokens[: meta.num_rows] = stream.tokens
    return Stream(tokens, pad_meta(meta, rows))


# ---- loading -----------------------------------------------------------------------------------------------


def load(artifact: str | Path, device: str | torch.device = "cuda", *, dtype: str | None = None,
         served_name: str | None = None, graphs: bool = True, launcher: Launcher | None = None,
         verify_weights: bool = True) -> Program:
    """Load an artifact for `device`. CUDA: the artifact's target must be this GPU's (sm_XY) and complete;
    its recordings become CUDA graphs, each captured at its bucket's first use (`graphs=False`: eager launches
    of the same kernels); `dtype`, if given, must be the recordings' weight dtype. CPU: the reference executor
    in `dtype` (default fp32) runs any artifact's model. Every file is hashed against the manifest, the
    weights too unless `verify_weights=False` (a trusted in-place swap of same-sized weights: hashing costs a
    few seconds a GB). ArtifactError says why not."""
    directory = Path(artifact)
    device = torch.device(device)
    if dtype is not None and dtype not in DTYPES:
        raise ArtifactError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        manifest = load_manifest(directory, target=f"sm_{major}{minor}", verify_weights=verify_weights)
    else:  # the reference executor needs no kernel
        manifest = load_manifest(directory, allow_incomplete=True, verify_weights=verify_weights)
    spec = spec_from_json(json.loads((directory / "tree.json").read_text(encoding="utf-8")))
    program = parse_program((directory / "program.txt").read_text(encoding="utf-8"))
    if spec.format.name != "next_token":
        raise ArtifactError(f"{directory}: format {spec.format.name} is not one this runtime reads")
    fmt = NextTokenFormat(load_tokenizer(directory / "tokenizer"))
    by_name = {t.name: t for t in spec.trees}
    trees = {t.name: TreeRuntime(by_name[t.name], t) for t in program.trees}
    model_dir = weights_dir(directory, manifest, verify_weights=verify_weights)
    if served_name is None:
        served_name = (directory if manifest["model"]["weights"] == "weights" else model_dir).name
    if device.type == "cuda":
        engine: Engine = _graph_engine(directory, manifest, model_dir, device, launcher, graphs, dtype)
    else:
        if launcher is not None:
            engine = _graph_engine(directory, manifest, model_dir, device, launcher, graphs=False)
        else:
            engine = ReferenceEngine(model_dir, DTYPES[dtype or "fp32"], device)
    return Program(trees, fmt, engine, served_name, manifest)


def _graph_engine(directory: Path, manifest: Mapping[str, Any], model_dir: Path, device: torch.device,
                  launcher: Launcher | None, graphs: bool, dtype: str | None = None) -> GraphEngine:
    plans: dict[str, Recording] = {}
    for entry in manifest["buckets"]:
        if "recording" not in entry:
            raise ArtifactError(f"{directory}: bucket {entry['tree']}/{entry['bucket']} has no recording "
                                f"(a {manifest['target']} artifact cannot run on {device.type})")
        plans[f"{entry['tree']}/{entry['bucket']}"] = read_recording(directory / entry["recording"])
    used = {s.kernel for p in plans.values() for s in p.steps}
    records = manifest.get("kernels", {})
    missing = sorted(used - set(records))
    if missing:
        raise ArtifactError(f"{directory}: the recordings use kernels the manifest does not list: "
                            f"{missing[:3]}")
    kernels = {key: read_kernel(directory / "kernels", records[key]["digest"]) for key in sorted(used)}
    dtypes = {b.torch_dtype for p in plans.values() for b in p.buffers if b.region == "weight"}
    if dtype is not None and DTYPES[dtype] not in dtypes:  # the recordings fix it: refused, never ignored
        names = ", ".join(sorted(k for k, v in DTYPES.items() if v in dtypes))
        raise ArtifactError(f"{directory}: dtype {dtype}: this {manifest['target']} artifact's kernels run "
                            f"{names or 'no known dtype'}; leave the dtype out or recompile")
    weights = load_weights(model_dir, torch.float32 if torch.float32 in dtypes else torch.bfloat16)
    if launcher is None:
        from flidec.runtime.launch import CudaLauncher

        launcher = CudaLauncher()
    return GraphEngine(plans, kernels, weights, device, launcher, graphs)
