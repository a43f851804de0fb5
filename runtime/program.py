"""The minimal runtime: `load(artifact)` -> Program; `Program.run(instances)` -> answers.

Consumes an artifact directory (docs/ARTIFACT.md): the manifest (checked by runtime/artifact.load_manifest),
the tree IR (tree.json), the program IR with each tree's template and bucket ladder (program.txt), the
tokenizer files, the weights and, for a GPU target, the recordings and kernel records. Produces a Program
that binds instances from the template (tokenizing only the bound text; runtime/templates.py), packs
consecutive instances into the smallest bucket that fits, runs the stream and returns, per instance, its
answer object (runtime/answers.py) or `{"error": {...}}`.
Two engines run a bound stream: on CUDA, `GraphEngine` fills the bucket's meta region on the host, copies it
to the arena in one piece and replays the bucket's CUDA graph, captured at load from the recording's
launches (runtime/buffers.py, runtime/launch.py; nothing is traced, compiled or tuned); on the CPU, the
reference executor runs the model graph (runtime/reference). Imports torch, numpy, tokenizers, safetensors
and flidec.ir / flidec.runtime / flidec.models only (cuda.core lazily on the GPU path): never Triton, lark
or the compiler's packages. An instance larger than the largest bucket is refused on the GPU (per row).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from flidec.ir.errors import ArtifactError, FlideError, InstanceError
from flidec.ir.instance import validate_instance
from flidec.ir.program import Bucket, TreeProgram
from flidec.ir.program_printer import parse_program
from flidec.ir.serde import spec_from_json
from flidec.ir.template import Sizes
from flidec.ir.tree import Tree
from flidec.runtime.answers import assemble
from flidec.runtime.artifact import load_manifest, weights_dir
from flidec.runtime.binder import Bound, Plan, bound_from_plans
from flidec.runtime.buffers import DeviceBuffers, MetaStage, RecordingPlan, read_recording
from flidec.runtime.launch import CompiledKernel, Launch, Launcher, grid3, pack_args, read_kernel
from flidec.runtime.meta import Stream, pad_meta
from flidec.runtime.next_token import NextTokenFormat
from flidec.runtime.templates import _TemplateWalker

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def error_record(e: FlideError) -> dict:
    """The result of an instance that could not be answered (one line of results.jsonl)."""
    problems = list(e.problems) if isinstance(e, InstanceError) else [str(e)]
    return {"error": {"type": type(e).__name__, "problems": problems}}


class Engine(Protocol):
    needs_bucket: bool  # streams are padded to a compiled bucket (static buffers) or run as they are

    def run(self, tree: str, bucket: Bucket | None, stream: Stream) -> torch.Tensor:
        """Label logits of the stream's reads, [reads, >= labels] float32 on the host."""
        ...


# ---- engines ------------------------------------------------------------------------------------------------


class ReferenceEngine:
    """The reference executor on the model graph: a cpu artifact, or any artifact on the CPU."""

    needs_bucket = False

    def __init__(self, model_dir: Path, dtype: torch.dtype, device: torch.device):
        import torch.fx

        from flidec.models.qwen3_5 import Qwen35
        from flidec.runtime.reference.executor import ReferenceExecutor

        module = Qwen35.from_pretrained(model_dir, dtype).to(device)
        self.executor = ReferenceExecutor(torch.fx.symbolic_trace(module))
        self.device = device

    def run(self, tree: str, bucket: Bucket | None, stream: Stream) -> torch.Tensor:
        return self.executor.run_stream(stream, self.device).cpu()


class GraphEngine:
    """A GPU artifact's buckets (by "tree/bucket"): per bucket its resolved launches, meta stage and (optionally) CUDA graph."""

    needs_bucket = True

    def __init__(self, plans: Mapping[str, RecordingPlan], kernels: Mapping[str, CompiledKernel],
                 weights: Mapping[str, torch.Tensor], device: torch.device, launcher: Launcher, graphs: bool):
        self.plans = dict(plans)
        self.buffers = DeviceBuffers(self.plans, weights, device)
        self.launcher = launcher
        self.handles = {key: launcher.load(k) for key, k in sorted(kernels.items())}  # all before any capture
        self.launches: dict[str, tuple[tuple[object, Launch], ...]] = {}
        self.stages: dict[str, MetaStage] = {}
        for name, plan in self.plans.items():
            if plan.missing:
                raise ArtifactError(f"bucket {name}: no kernel for {', '.join(plan.missing)}")
            self.launches[name] = tuple(self._resolve(name, plan, kernels))
            self.stages[name] = MetaStage(plan, pin=device.type == "cuda")
        self.graphs: dict[str, Any] = {}
        if graphs:
            for name in self.plans:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    self._launch_all(name)
                self.graphs[name] = graph

    def _resolve(self, name: str, plan: RecordingPlan, kernels: Mapping[str, CompiledKernel]):
        for i, step in enumerate(plan.steps):
            where = f"bucket {name}, step {i} ({step.node})"
            kernel = kernels.get(step.kernel)
            if kernel is None:
                raise ArtifactError(f"{where}: kernel {step.kernel} is not in the artifact")
            args = pack_args(kernel, step.args, lambda a: self.buffers.pointer(plan, a), where)
            yield self.handles[step.kernel], Launch(kernel, grid3(step.grid), args)

    def _launch_all(self, name: str) -> None:
        for handle, launch in self.launches[name]:
            self.launcher.launch(handle, launch)

    def run(self, tree: str, bucket: Bucket | None, stream: Stream) -> torch.Tensor:
        assert bucket is not None
        key = f"{tree}/{bucket.name}"
        stage = self.stages[key]
        stage.fill(stream.tokens, stream.meta)
        stage.copy_to(self.buffers.arena)
        if key in self.graphs:
            self.graphs[key].replay()
        else:
            self._launch_all(key)
        plan = self.plans[key]
        return self.buffers.output(plan)[: len(stream.meta.reads)].cpu()


# ---- binding and packing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Planned:
    index: int  # in the caller's list
    plan: Plan
    shape: object
    sizes: Sizes


def plan_sizes(plan: Plan) -> Sizes:
    levels: list[int] = []
    for parent in plan.parents:
        levels.append(0 if parent < 0 else levels[parent] + 1)
    return Sizes(rows=sum(map(len, plan.ids)), segments=len(plan.ids), depth=1 + max(levels, default=0),
                 reads=len(plan.reads), labels=max((len(p.labels) for _, p, _ in plan.reads), default=0))


def combine(a: Sizes, b: Sizes) -> Sizes:
    """The needs of two instances packed into one stream."""
    return Sizes(a.rows + b.rows, a.segments + b.segments, max(a.depth, b.depth), a.reads + b.reads,
                 max(a.labels, b.labels))


def stream_sizes(stream: Stream) -> Sizes:
    meta = stream.meta
    depth = 1 + max((len(a) for a in meta.ancestors), default=0)
    labels = max((len(r.labels) for r in meta.reads), default=0)
    return Sizes(meta.num_rows, len(meta.segments), depth, len(meta.reads), labels)


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
    """A loaded artifact. `run` is thread-safe: binding runs in the caller's thread, one stream at a time
    runs on the device (the buckets share one arena)."""

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
                raise FlideError(f"the artifact has {len(self.trees)} trees ({', '.join(self.trees)}): name one")
            return next(iter(self.trees.values()))
        if name not in self.trees:
            raise FlideError(f"the artifact has no tree `{name}` (it has {', '.join(self.trees)})")
        return self.trees[name]

    def run(self, instances: Sequence[object], tree: str | None = None) -> list[dict]:
        """Per instance, in order: its answer object (a System One response for wire="systemone" trees) or
        `{"error": {"type", "problems"}}`."""
        batches, errors = self._run_batches(instances, tree)
        out: list[dict | None] = [None] * len(instances)
        for bound, indices, logits in batches:
            answers = assemble(bound, logits, served_name=self.served_name) if logits is not None else []
            for k, i in enumerate(indices):
                out[i] = answers[k]
        for i, e in errors.items():
            out[i] = error_record(e)
        return out  # type: ignore[return-value]

    def label_logits(self, instances: Sequence[object], tree: str | None = None
                     ) -> list[torch.Tensor | FlideError]:
        """Per instance: the label logits of its reads in its plan order, [reads, its most labels] float32
        (-inf past a read's own labels), or why it was not run. For exactness tests and tools."""
        batches, errors = self._run_batches(instances, tree)
        out: list[torch.Tensor | FlideError | None] = [None] * len(instances)
        for bound, indices, logits in batches:
            for k, i in enumerate(indices):
                rows = [r for r, site in enumerate(bound.sites) if site.instance == k]
                width = max((len(bound.sites[r].piece.labels) for r in rows), default=0)
                out[i] = logits[rows, :width] if logits is not None else torch.zeros(0, 0)
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
            if chosen is None or not chosen.fits(need.rows, need.segments, need.depth, need.reads, need.labels):
                raise FlideError(f"the stream does not fit bucket {bucket}")
        else:
            chosen = t.program.bucket_for(need)
        return self._execute(t.tree.name, chosen, stream)

    # -- internals --------------------------------------------------------------------------------------------

    def _execute(self, tree: str, bucket: Bucket | None, stream: Stream) -> torch.Tensor:
        if self.engine.needs_bucket:
            if bucket is None:
                raise InstanceError([f"the stream needs {stream.meta.num_rows} rows; no compiled bucket holds it"])
            stream = _padded(stream, bucket.rows)
        with self._lock:
            logits = self.engine.run(tree, bucket, stream)
            used = sum(seg.length for seg in stream.meta.segments)
            self.stats = Stats(self.stats.streams + 1, self.stats.stream_tokens + used,
                               self.stats.questions + len(stream.meta.reads))
            return logits

    def _run_batches(self, instances: Sequence[object], tree: str | None
                     ) -> tuple[list[tuple[Bound, list[int], torch.Tensor | None]], dict[int, FlideError]]:
        """Bind every instance (errors by caller index), pack them in groups and run each group's stream:
        (bound group, caller indices, its logits or None when it has no read) per stream."""
        t = self.tree(tree)
        walker = _TemplateWalker(t.tree, t.program.template, self.fmt)
        planned: list[_Planned] = []
        errors: dict[int, FlideError] = {}
        for i, inst in enumerate(instances):
            try:
                validate_instance(t.tree, inst)  # token bounds are the template slots' (enforced by the walker)
                if not isinstance(inst, Mapping) or t.tree.state.name not in inst:
                    raise InstanceError([f"{t.tree.state.name}: missing"])
                plan, shape = walker.plan(inst)
            except InstanceError as e:
                errors[i] = e
                continue
            planned.append(_Planned(i, plan, shape, plan_sizes(plan)))
        batches = []
        for group, bucket in _groups(planned, t):
            if bucket is None and self.engine.needs_bucket:
                s, big = group[0].sizes, t.largest
                problem = (f"the instance needs {s.rows} rows, {s.segments} segments, {s.reads} reads; the largest "
                           f"bucket ({big.name}) holds {big.rows} rows, {big.segments} segments, {big.reads} reads")
                errors[group[0].index] = InstanceError([problem])
                continue
            bound = _bind(t.tree, group, self.fmt)
            logits = self._execute(t.tree.name, bucket, bound.stream) if bound.sites else None
            batches.append((bound, [p.index for p in group], logits))
        return batches, errors


def _groups(planned: list[_Planned], t: TreeRuntime):
    """Consecutive instances per stream while they fit the largest bucket, each group in the smallest bucket
    that holds it; an instance that fits no bucket goes alone (bucket None)."""
    largest = t.largest
    group: list[_Planned] = []
    need: Sizes | None = None
    for p in planned:
        both = p.sizes if need is None else combine(need, p.sizes)
        if group and not largest.fits(both.rows, both.segments, both.depth, both.reads, both.labels):
            yield group, t.program.bucket_for(need)  # type: ignore[arg-type]
            group, both = [], p.sizes
        group.append(p)
        need = both
    if group:
        yield group, t.program.bucket_for(need)  # type: ignore[arg-type]


def _bind(tree: Tree, group: list[_Planned], fmt: NextTokenFormat) -> Bound:
    """One stream of the group's already planned instances, laid out as the binder lays out any."""
    return bound_from_plans(tree, fmt, group, lambda p: (p.plan, p.shape))


def _padded(stream: Stream, rows: int) -> Stream:
    """The same stream with padding rows up to `rows` (inert: no segment, token 0)."""
    meta = stream.meta
    if meta.num_rows == rows:
        return stream
    tokens = torch.zeros(rows, dtype=torch.int64)
    tokens[: meta.num_rows] = stream.tokens
    return Stream(tokens, pad_meta(meta, rows))


# ---- loading ------------------------------------------------------------------------------------------------


def load(artifact: str | Path, device: str | torch.device = "cuda", *, dtype: str | None = None,
         served_name: str | None = None, graphs: bool = True, launcher: Launcher | None = None) -> Program:
    """Load an artifact for `device`. CUDA: the artifact's target must be this GPU's (sm_XY) and complete;
    its recordings become CUDA graphs (`graphs=False`: eager launches of the same kernels). CPU: the
    reference executor in `dtype` (default fp32) runs any artifact's model. ArtifactError says why not."""
    directory = Path(artifact)
    device = torch.device(device)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        manifest = load_manifest(directory, target=f"sm_{major}{minor}")
    else:
        manifest = load_manifest(directory, allow_incomplete=True)  # the reference executor needs no kernel
    spec = spec_from_json(json.loads((directory / "tree.json").read_text(encoding="utf-8")))
    program = parse_program((directory / "program.txt").read_text(encoding="utf-8"))
    if spec.format.name != "next_token":
        raise ArtifactError(f"{directory}: format {spec.format.name} is not one this runtime reads")
    from flidec.models.tokenizer import load_tokenizer

    fmt = NextTokenFormat(load_tokenizer(directory / "tokenizer"))
    by_name = {t.name: t for t in spec.trees}
    trees = {t.name: TreeRuntime(by_name[t.name], t) for t in program.trees}
    model_dir = weights_dir(directory, manifest)
    if served_name is None:
        served_name = (directory if manifest["model"]["weights"] == "weights" else model_dir).name
    if device.type == "cuda":
        engine: Engine = _graph_engine(directory, manifest, model_dir, device, launcher, graphs)
    else:
        if launcher is not None:
            engine = _graph_engine(directory, manifest, model_dir, device, launcher, graphs=False)
        else:
            engine = ReferenceEngine(model_dir, DTYPES[dtype or "fp32"], device)
    return Program(trees, fmt, engine, served_name, manifest)


def _graph_engine(directory: Path, manifest: Mapping[str, Any], model_dir: Path, device: torch.device,
                  launcher: Launcher | None, graphs: bool) -> GraphEngine:
    from flidec.models.weights import load_weights

    plans: dict[str, RecordingPlan] = {}
    for entry in manifest["buckets"]:
        if "recording" not in entry:
            raise ArtifactError(f"{directory}: bucket {entry['tree']}/{entry['bucket']} has no recording "
                                f"(a {manifest['target']} artifact cannot run on {device.type})")
        plans[f"{entry['tree']}/{entry['bucket']}"] = read_recording(directory / entry["recording"])
    used = {s.kernel for p in plans.values() for s in p.steps}
    records = manifest.get("kernels", {})
    missing = sorted(used - set(records))
    if missing:
        raise ArtifactError(f"{directory}: the recordings use kernels the manifest does not list: {missing[:3]}")
    kernels = {key: read_kernel(directory / "kernels", records[key]["digest"]) for key in sorted(used)}
    dtypes = {b.torch_dtype for p in plans.values() for b in p.buffers if b.region == "weight"}
    weights = load_weights(model_dir, torch.float32 if torch.float32 in dtypes else torch.bfloat16)
    if launcher is None:
        from flidec.runtime.launch import CudaLauncher

        launcher = CudaLauncher()
    return GraphEngine(plans, kernels, weights, device, launcher, graphs)
