"""The loaded artifact: `load(artifact)` -> Program; `Program.run(instances)` -> answers.

`load` checks the manifest (runtime/artifact.py), reads the tree IR, the program IR (each tree's template and
bucket ladder), the tokenizer and the weights, and makes the engine (runtime/engines.py). `Program.run` plans
each instance from its template (tokenizing only the bound text; runtime/templates.py), splits what is over
the largest bucket (runtime/split.py), packs the pieces into streams (runtime/packing.py), runs them on the
engine, pipelined, and returns per instance its answer object (runtime/answers.py) or `{"error": {...}}`.
On an engine that resumes, a plan's root starts from its longest saved prefix and a resumable state saves
a new point (runtime/saved).
Imports torch, numpy, tokenizers, safetensors and flidec.ir / flidec.runtime / flidec.models only: never
Triton, lark or the compiler's packages.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from flidec.ir.errors import ArtifactError, FlideError, InstanceError
from flidec.ir.instance import validate_instance
from flidec.ir.program import Bucket, TreeProgram
from flidec.ir.program_printer import parse_program
from flidec.ir.serde import spec_from_json
from flidec.ir.template import worst_path_rows
from flidec.ir.tree import Tree
from flidec.models.config import TextConfig
from flidec.models.tokenizer import load_tokenizer
from flidec.models.weights import load_weights
from flidec.runtime.answers import answer_instance
from flidec.runtime.artifact import load_manifest, weights_dir
from flidec.runtime.binder import BoundStream, Plan, Shape, bound_from_plans, merge_chains
from flidec.runtime.decision.load import load_reading
from flidec.runtime.decision.reading import DecisionReading
from flidec.runtime.engines import Engine, GraphEngine, Pending, ReferenceEngine
from flidec.runtime.launch import Launcher, read_kernel
from flidec.runtime.meta import Stream
from flidec.runtime.next_token import NextTokenFormat
from flidec.runtime.packing import Piece, pack_streams
from flidec.runtime.recording import MODEL_DTYPES as DTYPES
from flidec.runtime.recording import Recording, read_recording
from flidec.runtime.reference.qwen3_5 import READOUT
from flidec.runtime.row_check import check_row_invariance
from flidec.runtime.saved.keys import scope_of
from flidec.runtime.saved.point import PointLayout, SavedPoint
from flidec.runtime.saved.resume import Session, make_point, resume, split_session
from flidec.runtime.saved.store import GIB, SavedStates, SavedStats
from flidec.runtime.split import fits, misfit, plan_sizes, split_plan, stream_sizes
from flidec.runtime.templates import TemplateWalker


def error_record(e: FlideError) -> dict:
    """The result of an instance that could not be answered (one line of results.jsonl)."""
    problems = list(e.problems) if isinstance(e, InstanceError) else [str(e)]
    return {"error": {"type": type(e).__name__, "problems": problems}}


@dataclass
class _Answered:
    """One instance's reads gathered from its streams, in its plan order."""

    plan: Plan
    shape: Shape
    rows: list[torch.Tensor | None]  # per read: its label logits row
    input_tokens: int = 0
    session: Session | None = None
    reused: int = 0  # its root's positions resumed from a saved point


@dataclass(frozen=True)
class Stats:
    """What a Program has run since it was loaded; `saved`: its saved-state store's (None: no store)."""

    streams: int = 0
    stream_tokens: int = 0  # rows computed (padding and rows resumed from saved points excluded)
    questions: int = 0  # reads
    saved: SavedStats | None = None


@dataclass(frozen=True)
class TreeRuntime:
    tree: Tree
    program: TreeProgram

    @property
    def largest(self) -> Bucket:
        return self.program.largest


class Program:
    """A loaded artifact. `run` is thread-safe: binding runs in the caller's thread, one stream at a time is
    submitted to the device (the buckets share one arena) and, on CUDA, each call binds its next stream while
    the device runs its last."""

    def __init__(self, trees: Mapping[str, TreeRuntime], fmt: NextTokenFormat | DecisionReading,
                 engine: Engine, served_name: str, manifest: Mapping[str, Any],
                 saved: SavedStates | None = None):
        self.trees = dict(trees)
        self.fmt = fmt
        self.engine = engine
        self.served_name = served_name
        self.manifest = manifest
        self.saved = saved  # the saved-state store (runtime/saved): None when off or the engine cannot resume
        self._stats = Stats()
        self._lock = threading.Lock()

    @property
    def _store(self) -> SavedStates | None:
        """The store, while the engine can resume (a test may swap in an engine that cannot)."""
        return self.saved if getattr(self.engine, "resumes", False) else None

    @property
    def stats(self) -> Stats:
        return replace(self._stats, saved=None if self.saved is None else self.saved.stats())

    def tree(self, name: str | None = None) -> TreeRuntime:
        if name is None:
            if len(self.trees) != 1:
                raise FlideError(f"the artifact has {len(self.trees)} trees ({', '.join(self.trees)}): "
                                 "name one")
            return next(iter(self.trees.values()))
        if name not in self.trees:
            raise FlideError(f"the artifact has no tree `{name}` (it has {', '.join(self.trees)})")
        return self.trees[name]

    def run(self, instances: Sequence[object], tree: str | None = None, *,
            reused: list[int] | None = None) -> list[dict]:
        """Per instance, in order: its answer object (a System One response for wire="systemone" trees) or
        `{"error": {"type", "problems"}}`. An instance may carry `x_session` (runtime/saved/resume.py).
        `reused`, if given, is filled with each instance's state positions resumed from saved points."""
        t = self.tree(tree)
        answered, errors = self._run_all(instances, t)
        out: list[dict | None] = [None] * len(instances)
        for i, a in answered.items():
            out[i] = answer_instance(a.shape, [piece for _, piece, _ in a.plan.reads], _stacked(a), self.fmt,
                                     t.tree.wire, a.input_tokens, self.served_name)
        for i, e in errors.items():
            out[i] = error_record(e)
        if reused is not None:
            reused[:] = [answered[i].reused if i in answered else 0 for i in range(len(instances))]
        return out  # type: ignore[return-value]

    def label_logits(self, instances: Sequence[object], tree: str | None = None, *,
                     reused: list[int] | None = None) -> list[torch.Tensor | FlideError]:
        """Per instance: the label logits of its reads in its plan order, [reads, its most labels] float32
        (-inf past a read's own labels), or why it was not run. For exactness tests and tools."""
        answered, errors = self._run_all(instances, self.tree(tree))
        out: list[torch.Tensor | FlideError | None] = [None] * len(instances)
        for i, a in answered.items():
            out[i] = _stacked(a)
        for i, e in errors.items():
            out[i] = e
        if reused is not None:
            reused[:] = [answered[i].reused if i in answered else 0 for i in range(len(instances))]
        return out  # type: ignore[return-value]

    def run_stream(self, stream: Stream, tree: str | None = None, bucket: str | None = None) -> torch.Tensor:
        """Label logits of an already bound stream (unpadded), in the smallest bucket that fits or the named
        one: the plain single-sequence passes E3 compares with."""
        t = self.tree(tree)
        need = stream_sizes(stream)
        if bucket is not None:
            chosen = next((p.bucket for p in t.program.buckets if p.bucket.name == bucket), None)
            if chosen is None or not fits(need, chosen):
                raise FlideError(f"the stream does not fit bucket {bucket}")
        else:
            chosen = t.program.bucket_for(need)
        if chosen is None and self.engine.needs_bucket:
            raise InstanceError([f"the stream needs {misfit(need, t.largest)}"])
        return self._submit(t.tree.name, chosen, stream).result()

    # -- internals -------------------------------------------------------------------------------------------

    def _submit(self, tree: str, bucket: Bucket | None, stream: Stream, held: Sequence[SavedPoint] = ()
                ) -> Pending:
        assert bucket is not None or not self.engine.needs_bucket
        with self._lock:
            saving = held or stream.meta.captures
            pending = self.engine.submit(tree, bucket, stream, held) if saving else \
                self.engine.submit(tree, bucket, stream)
            meta = stream.meta
            used = sum(seg.length for i, seg in enumerate(meta.segments) if i not in meta.stored)
            s = self._stats
            self._stats = Stats(s.streams + 1, s.stream_tokens + used, s.questions + len(meta.reads))
        return pending

    def _run_all(self, instances: Sequence[object], t: TreeRuntime
                 ) -> tuple[dict[int, _Answered], dict[int, FlideError]]:
        """Plan every instance (errors by caller index), split those over the largest bucket, pack the pieces
        into streams and run them, gathering each instance's reads back in its plan order. Pipelined: the
        instances of stream i+1 are planned (tokenized), bound and submitted before stream i's logits are
        waited for, so on CUDA the host's part of a stream overlaps the device's part of the one before."""
        answered: dict[int, _Answered] = {}
        errors: dict[int, FlideError] = {}
        waiting: deque[tuple[list[Piece], BoundStream, Pending]] = deque()
        for group, bucket in pack_streams(self._pieces(instances, t, answered, errors), t.program):
            bound = bound_from_plans(t.tree, self.fmt, group, lambda p: (p.plan, None))
            held = [p.plan.held for p in group if p.plan.held is not None]  # meta.stored's order
            waiting.append((group, bound, self._submit(t.tree.name, bucket, bound.stream, held)))
            if len(waiting) > 1:
                self._gather(*waiting.popleft(), answered)
        while waiting:
            self._gather(*waiting.popleft(), answered)
        if self._store is not None:
            for a in answered.values():
                if a.session is not None and a.session.drop:
                    self._store.drop(a.session.id)
        return answered, errors

    def _pieces(self, instances: Sequence[object], t: TreeRuntime, answered: dict[int, _Answered],
                errors: dict[int, FlideError]) -> Iterator[Piece]:
        """Each instance planned (its InstanceError into `errors`), its chains merged (`merge_chains`: fewer
        segments, the same bits), whole or split to fit the largest bucket."""
        walker = self.fmt.walker(t.tree, max_path=worst_path_rows(t.program.template)) \
            if isinstance(self.fmt, DecisionReading) else TemplateWalker(t.tree, t.program.template, self.fmt)
        for i, inst in enumerate(instances):
            session = None
            try:
                inst, session = split_session(inst)
                validate_instance(t.tree, inst)  # the spec's token bounds: the walker counts them in a batch
                if not isinstance(inst, Mapping) or t.tree.state.name not in inst:
                    raise InstanceError([f"{t.tree.state.name}: missing"])
                plan, shape = walker.plan(inst)
                plan = merge_chains(plan)
                sizes = plan_sizes(plan)
                whole = [(plan, tuple(range(len(plan.reads))))]
                try:
                    parts = whole if fits(sizes, t.largest) else split_plan(plan, t.largest)
                except InstanceError:
                    if self.engine.needs_bucket:
                        raise
                    parts = whole  # the reference executor runs a stream of any size
            except InstanceError as e:
                errors[i] = e
                continue
            a = answered[i] = _Answered(plan, shape, [None] * len(plan.reads), session=session)
            store = self._store
            # a split plan runs fresh (its parts share a root), and so does one with no room for a stored root
            # or with no one root (a decision format whose questions share no token: runtime/decision)
            grown = replace(sizes, segments=sizes.segments + 1)
            room = not self.engine.needs_bucket or fits(grown, t.largest)
            if store is not None and parts is whole and room and plan.parents.count(-1) == 1:
                a.reused = resume(plan, store, saves=t.tree.state.resumable or session is not None)
                sizes = plan_sizes(plan)
            for p, reads in parts:
                if p is not plan:  # a sub-plan can keep one child of a parent that had several: a chain again
                    p = merge_chains(p)
                yield Piece(i, p, sizes if p is plan else plan_sizes(p), reads)

    def _gather(self, group: list[Piece], bound: BoundStream, pending: Pending,
                answered: dict[int, _Answered]) -> None:
        """Route a stream's logits rows to its instances (_route) and keep the saved points it captured."""
        _route(group, bound, pending, answered)
        saving = [p for p in group if p.plan.save]  # meta.captures' order
        for piece, captured in zip(saving, pending.captured, strict=True):
            assert self.saved is not None
            session = answered[piece.index].session
            self.saved.save(make_point(piece.plan, captured), session and session.id)




def _route(group: list[Piece], bound: BoundStream, pending: Pending, answered: dict[int, _Answered]) -> None:
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


def load(artifact: str | Path, device: str | torch.device = "cuda", *, dtype: str | None = None,
         served_name: str | None = None, graphs: bool = True, launcher: Launcher | None = None,
         verify_weights: bool = True, saved_states: bool = True, checkpoints: str | Path | None = None,
         gpu_budget_gib: float = 4.0, host_budget_gib: float = 8.0, check_rows: bool = True) -> Program:
    """Load an artifact for `device`. CUDA: the artifact's target must be this GPU's (sm_XY) and complete;
    its recordings become CUDA graphs, each captured at its bucket's first use (`graphs=False`: eager launches
    of the same kernels); `dtype`, if given, must be the recordings' weight dtype. CPU: the reference executor
    in `dtype` (default fp32) runs any artifact's model. Every file is hashed against the manifest, the
    weights too unless `verify_weights=False` (a trusted in-place swap of same-sized weights: hashing costs a
    few seconds a GB). On CUDA, `check_rows` (the default) runs runtime/row_check.py first: the artifact's
    projection kernels must give a row the same bits at every bucket's rows on this GPU (E3), else the load
    is refused. ArtifactError says why not.

    Saved states (runtime/saved, docs/SAVED_STATES.md; both engines resume): `saved_states`
    turns them on, within `gpu_budget_gib` of GPU memory (a CUDA device) and `host_budget_gib` of host
    memory; `checkpoints`: a directory every saved point is also written to, and read back from by later
    processes."""
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
    head = None
    if spec.format.name == "decision":  # the checkpoint's own reading: format.json (runtime/decision)
        decision = load_reading(directory)
        if decision is None:
            raise ArtifactError(f"{directory}: tree.json reads format decision, but format.json is missing")
        fmt: NextTokenFormat | DecisionReading = decision[0]
        head = decision[1]
    elif spec.format.name == "next_token":
        fmt = NextTokenFormat(load_tokenizer(directory / "tokenizer"))
    else:
        raise ArtifactError(f"{directory}: format {spec.format.name} is not one this runtime reads")
    by_name = {t.name: t for t in spec.trees}
    trees = {t.name: TreeRuntime(by_name[t.name], t) for t in program.trees}
    model_dir = weights_dir(directory, manifest, verify_weights=verify_weights)
    if served_name is None:
        served_name = (directory if manifest["model"]["weights"] == "weights" else model_dir).name
    if device.type == "cuda":
        engine: Engine = _graph_engine(directory, manifest, model_dir, device, launcher, graphs, dtype, head)
        if check_rows:
            check_row_invariance(engine)
    else:
        if launcher is not None:
            engine = _graph_engine(directory, manifest, model_dir, device, launcher, graphs=False, head=head)
        else:
            engine = ReferenceEngine(model_dir, DTYPES[dtype or "fp32"], device,
                                     None if head is None else head["weight"])
    for name, gib in (("gpu_budget_gib", gpu_budget_gib), ("host_budget_gib", host_budget_gib)):
        if not gib >= 0:
            raise FlideError(f"{name}={gib}: a budget is a number of GiB, at least 0")
    if checkpoints is not None and not (saved_states and engine.resumes):
        why = ("saved states are off (saved_states=False)" if not saved_states else
               "this artifact's recordings do not restore saved points (docs/SAVED_STATES.md)")
        raise FlideError(f"checkpoints={checkpoints}: {why}; leave the checkpoint directory out")
    saved = None
    if saved_states and engine.resumes:
        saved = SavedStates(scope_of(manifest, engine.name), engine.layout, device,  # type: ignore[attr-defined]
                            gpu_bytes=int(gpu_budget_gib * GIB), host_bytes=int(host_budget_gib * GIB),
                            checkpoints=checkpoints)
    return Program(trees, fmt, engine, served_name, manifest, saved)


def _graph_engine(directory: Path, manifest: Mapping[str, Any], model_dir: Path, device: torch.device,
                  launcher: Launcher | None, graphs: bool, dtype: str | None = None,
                  head: Mapping[str, torch.Tensor] | None = None) -> GraphEngine:
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
    dtypes = {b.torch_dtype for p in plans.values() for b in p.buffers  # a readout head is fp32 whatever
              if b.region == "weight" and b.name != READOUT}
    if dtype is not None and DTYPES[dtype] not in dtypes:  # the recordings fix it: refused, never ignored
        names = ", ".join(sorted(k for k, v in DTYPES.items() if v in dtypes))
        raise ArtifactError(f"{directory}: dtype {dtype}: this {manifest['target']} artifact's kernels run "
                            f"{names or 'no known dtype'}; leave the dtype out or recompile")
    weight_dtype = torch.float32 if torch.float32 in dtypes else torch.bfloat16
    weights = load_weights(model_dir, weight_dtype)
    if head is not None:
        weights[READOUT] = head["weight"]
    if launcher is None:
        from flidec.runtime.launch import CudaLauncher

        launcher = CudaLauncher()
    windows = {b.torch_dtype for p in plans.values() for b in p.buffers if b.name.endswith(".window")}
    if len(windows) > 1:
        raise ArtifactError(f"{directory}: the recordings hold conv windows of several dtypes")
    layout = PointLayout.of(TextConfig.from_dir(model_dir), weight_dtype, next(iter(windows), None))
    return GraphEngine(plans, kernels, weights, device, launcher, graphs, layout)
