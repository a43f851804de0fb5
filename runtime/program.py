"""The loaded artifact: `load(artifact)` -> Program, the runtime's one door for Requests (runtime/request.py).

`load` checks the manifest (runtime/artifact.py), reads the tree IR, the program IR (each tree's template and
bucket ladder), the tokenizer and the weights, and makes the engine (runtime/engines.py). `Program.prepare`
plans a request from its template (tokenizing only the bound text; runtime/templates.py) and splits what is
over the largest bucket (runtime/split.py); `Program.execute` runs prepared requests together: each root
resumes from its longest saved prefix (runtime/saved), roots with a common prefix are forked from one
(runtime/sharing.py), the pieces are packed into streams (runtime/packing.py) and run on the engine,
pipelined, and each request gets its Result: its answer object (runtime/answers.py) or `{"error": {...}}`.
Imports torch, numpy, tokenizers, safetensors and flidec.ir / flidec.runtime / flidec.models only: never
Triton, lark or the compiler's packages.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
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
from flidec.runtime.binder import BoundStream, bound_from_plans, merge_chains
from flidec.runtime.decision.load import load_reading
from flidec.runtime.decision.reading import DecisionReading
from flidec.runtime.engines import Engine, GraphEngine, Pending, ReferenceEngine
from flidec.runtime.launch import Launcher, read_kernel
from flidec.runtime.meta import Read, Segment, Stream, build_meta
from flidec.runtime.next_token import NextTokenFormat
from flidec.runtime.packing import Piece, pack_streams
from flidec.runtime.recording import MODEL_DTYPES as DTYPES
from flidec.runtime.recording import Recording, read_recording
from flidec.runtime.reference.qwen3_5 import READOUT
from flidec.runtime.request import Request, Result
from flidec.runtime.row_check import check_row_invariance
from flidec.runtime.saved.keys import scope_of
from flidec.runtime.saved.point import PointLayout, SavedPoint
from flidec.runtime.saved.resume import make_point, resume, split_session
from flidec.runtime.saved.store import GIB, SavedStates, SavedStats
from flidec.runtime.sharing import share
from flidec.runtime.split import fits, misfit, plan_sizes, split_plan, stream_sizes
from flidec.runtime.templates import TemplateWalker


@dataclass(frozen=True)
class Stats:
    """What a Program has run since it was loaded; `saved`: its saved-state store's (None: no store)."""

    streams: int = 0
    stream_tokens: int = 0  # rows computed (padding and rows resumed from saved points excluded)
    questions: int = 0  # reads
    shared: int = 0  # requests whose root was computed in part with other requests' (runtime/sharing.py)
    buckets: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (tree, bucket) -> streams run
    saved: SavedStats | None = None


@dataclass(frozen=True)
class TreeRuntime:
    tree: Tree
    program: TreeProgram

    @property
    def largest(self) -> Bucket:
        return self.program.largest


class Program:
    """A loaded artifact, the runtime's one door: `prepare` a Request (the host stage, any thread), then
    `execute` prepared requests of a run (the device stage, one caller at a time per stream: binding runs in
    the caller's thread, one stream at a time is submitted to the device since the buckets share one arena,
    and on CUDA each run binds its next stream while the device runs its last). `answer` and `run` do both
    for a list of instances."""

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
        self._buckets: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    @property
    def _store(self) -> SavedStates | None:
        """The store, while the engine can resume (a test may swap in an engine that cannot)."""
        return self.saved if getattr(self.engine, "resumes", False) else None

    @property
    def stats(self) -> Stats:
        with self._lock:
            return replace(self._stats, buckets=dict(self._buckets),
                           saved=None if self.saved is None else self.saved.stats())

    def tree(self, name: str | None = None) -> TreeRuntime:
        if name is None:
            if len(self.trees) != 1:
                raise FlideError(f"the artifact has {len(self.trees)} trees ({', '.join(self.trees)}): "
                                 "name one")
            return next(iter(self.trees.values()))
        if name not in self.trees:
            raise FlideError(f"the artifact has no tree `{name}` (it has {', '.join(self.trees)})")
        return self.trees[name]

    def run_rows(self, tree: str | None = None) -> int:
        """The rows of the tree's largest bucket: what one stream of a run computes at most."""
        return self.tree(tree).largest.rows

    # -- the door --------------------------------------------------------------------------------------------

    def answer(self, instances: Sequence[object], tree: str | None = None) -> list[Result]:
        """Each instance's Result, in order: prepared, then executed as one run. FlideError for a tree the
        artifact does not have."""
        tree = self.tree(tree).tree.name
        requests = [self.prepare(Request(inst, tree)) for inst in instances]
        self.execute(requests)
        return [r.result for r in requests]  # type: ignore[misc]

    def run(self, instances: Sequence[object], tree: str | None = None) -> list[dict]:
        """Per instance, in order: its answer object (a System One response for wire="systemone" trees) or
        `{"error": {"type", "problems"}}`. An instance may carry `x_session` (runtime/saved/resume.py)."""
        return [r.record for r in self.answer(instances, tree)]

    def label_logits(self, instances: Sequence[object], tree: str | None = None
                     ) -> list[torch.Tensor | FlideError]:
        """Per instance: the label logits of its reads in its plan order, [reads, its most labels] float32
        (-inf past a read's own labels), or why it was not run. For exactness tests and tools."""
        return [r.logits if r.logits is not None else r.error or FlideError(str(r.record))
                for r in self.answer(instances, tree)]

    def prepare(self, request: Request) -> Request:
        """The host stage, safe in any thread: the request's tree, session, one validation (structure here,
        token bounds counted in the walker's one tokenizer batch), its plan with chains merged
        (`merge_chains`: fewer segments, the same bits) and, when it is over the largest bucket, its split.
        A request that cannot be answered ends here with its error Result."""
        try:
            t = self.tree(request.tree)
            request.tree = t.tree.name
            inst, request.session = split_session(request.instance)
            validate_instance(t.tree, inst)
            if not isinstance(inst, Mapping) or t.tree.state.name not in inst:
                raise InstanceError([f"{t.tree.state.name}: missing"])
            if isinstance(self.fmt, DecisionReading):
                walker = self.fmt.walker(t.tree, max_path=worst_path_rows(t.program.template))
            else:
                walker = TemplateWalker(t.tree, t.program.template, self.fmt)
            plan, request.shape = walker.plan(inst)
            plan = merge_chains(plan)
            request.sizes = plan_sizes(plan)
            if not fits(request.sizes, t.largest):
                try:
                    request.parts = split_plan(plan, t.largest)
                except InstanceError:
                    if self.engine.needs_bucket:
                        raise  # the reference executor runs a stream of any size
            request.plan = plan
        except FlideError as e:
            request.fail(e)
        return request

    def execute(self, requests: Sequence[Request]) -> None:
        """The device stage of one run: every prepared request without a result gets one. Requests of one
        tree resume from saved points, share their common roots (runtime/sharing.py), pack into streams by
        the bucket ladder and run, pipelined. Raises only for what is no request's fault (the Scheduler
        then runs the requests again apart)."""
        live = [r for r in requests if r.result is None]
        for r in live:
            if r.plan is None:
                raise ValueError("execute takes prepared requests: call Program.prepare first")
        by_tree: dict[str, list[Request]] = {}
        for r in live:
            by_tree.setdefault(r.tree, []).append(r)  # type: ignore[arg-type]
        for name, group in by_tree.items():
            self._execute(self.trees[name], group)

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

    def warm(self) -> int:
        """Run a one-token stream in every bucket of every tree (on CUDA: each bucket's graph captured and its
        kernels loaded; on the CPU: the executor's first-call costs paid), so a server's first requests run
        at speed. Returns the streams run."""
        n = 0
        for name, t in self.trees.items():
            for rung in t.program.buckets:
                self._submit(name, rung.bucket, warm_stream(), count=False).result()
                n += 1
        return n

    # -- internals -------------------------------------------------------------------------------------------

    def _submit(self, tree: str, bucket: Bucket | None, stream: Stream, held: Sequence[SavedPoint] = (), *,
                count: bool = True) -> Pending:
        assert bucket is not None or not self.engine.needs_bucket
        with self._lock:
            saving = held or stream.meta.captures
            pending = self.engine.submit(tree, bucket, stream, held) if saving else \
                self.engine.submit(tree, bucket, stream)
            if count:
                meta = stream.meta
                used = sum(seg.length for i, seg in enumerate(meta.segments) if i not in meta.stored)
                s = self._stats
                self._stats = replace(s, streams=s.streams + 1, stream_tokens=s.stream_tokens + used,
                                      questions=s.questions + len(meta.reads))
                self._buckets[tree, bucket.name if bucket is not None else "none"] += 1
        return pending

    def _execute(self, t: TreeRuntime, requests: list[Request]) -> None:
        """One tree's requests: pieces (resumed where a saved prefix exists), shared, packed, run and
        answered. Pipelined: stream i+1 is bound and submitted before stream i's logits are waited for."""
        store = self._store
        pieces: list[Piece] = []
        for k, r in enumerate(requests):
            plan = r.plan
            assert plan is not None and r.sizes is not None
            r.rows, r.input_tokens, r.reused, r.shared, r.buckets = [None] * len(plan.reads), 0, 0, 0, set()
            if r.parts is not None:  # a split plan runs fresh (its parts share a root)
                for p, reads in r.parts:
                    if p is not plan:  # a sub-plan can keep one child of a parent that had several: a chain
                        p = merge_chains(p)
                    pieces.append(Piece(p, plan_sizes(p), tuple((k, i) for i in reads)))
                continue
            sizes = r.sizes
            # a plan with no room for a stored root, or with no one root (a decision format whose questions
            # share no token: runtime/decision), runs fresh
            grown = replace(sizes, segments=sizes.segments + 1)
            room = not self.engine.needs_bucket or fits(grown, t.largest)
            if store is not None and room and plan.parents.count(-1) == 1:
                r.reused = resume(plan, store, saves=t.tree.state.resumable or r.session is not None)
                sizes = plan_sizes(plan)
            pieces.append(Piece(plan, sizes, tuple((k, i) for i in range(len(plan.reads))), whole=True,
                                saver=k if plan.save else -1))
        counted: dict[int, int] = {}
        pieces = share(pieces, t.largest, counted)
        for k, n in counted.items():
            requests[k].shared = n
        waiting: deque[tuple[list[Piece], BoundStream, Pending, str]] = deque()
        for group, bucket in pack_streams(pieces, t.program):
            bound = bound_from_plans(t.tree, self.fmt, [p.plan for p in group], lambda plan: (plan, None))
            held = [p.plan.held for p in group if p.plan.held is not None]  # meta.stored's order
            name = bucket.name if bucket is not None else "none"
            waiting.append((group, bound, self._submit(t.tree.name, bucket, bound.stream, held), name))
            if len(waiting) > 1:
                self._gather(*waiting.popleft(), requests)
        while waiting:
            self._gather(*waiting.popleft(), requests)
        with self._lock:
            self._stats = replace(self._stats, shared=self._stats.shared + len(counted))
        for r in requests:
            assert r.shape is not None and r.plan is not None
            logits = _stacked(r)
            record = answer_instance(r.shape, [piece for _, piece, _ in r.plan.reads], logits, self.fmt,
                                     t.tree.wire, r.input_tokens, self.served_name)
            r.result = Result(record, r.input_tokens, r.reused, r.shared, tuple(sorted(r.buckets)), logits)
            if store is not None and r.session is not None and r.session.drop:
                store.drop(r.session.id)

    def _gather(self, group: list[Piece], bound: BoundStream, pending: Pending, bucket: str,
                requests: list[Request]) -> None:
        """Route a stream's logits rows to the requests its pieces hold (the binder lays each piece's reads
        out contiguously, in piece order, each in its plan order) and keep the saved points it captured."""
        logits = pending.result()
        row = 0
        for piece in group:
            for k, r in piece.owners:
                request = requests[k]
                request.rows[r] = logits[row]
                request.input_tokens += bound.read_tokens[row]
                request.buckets.add(bucket)
                row += 1
        assert row == len(bound.sites)
        saving = [p for p in group if p.plan.save]  # meta.captures' order
        for piece, captured in zip(saving, pending.captured, strict=True):
            assert self.saved is not None
            session = requests[piece.saver].session if piece.saver >= 0 else None
            self.saved.save(make_point(piece.plan, captured), session and session.id)


def warm_stream() -> Stream:
    """A one-token stream with one read of one label: the smallest stream every bucket holds."""
    meta = build_meta((Segment(start=0, length=1, pos0=0, parent=-1, level=0),), (Read(row=0, labels=(0,)),),
                      1, (), ())
    return Stream(torch.zeros(1, dtype=torch.int64), meta)


def _stacked(r: Request) -> torch.Tensor:
    """[reads, the request's most labels] float32, -inf past each read's own labels."""
    assert r.plan is not None
    width = max((len(piece.labels) for _, piece, _ in r.plan.reads), default=0)
    if r.rows and all(x is not None and x.dtype == torch.float32 and x.shape[0] >= width for x in r.rows):
        return torch.stack([row[:width] for row in r.rows])  # every row as wide: one op, not one copy a row
    out = torch.full((len(r.rows), width), float("-inf"))
    for i, row in enumerate(r.rows):
        assert row is not None
        w = min(width, row.shape[0])
        out[i, :w] = row[:w]
    return out



def load(artifact: str | Path, device: str | torch.device = "cuda", *, dtype: str | None = None,
         served_name: str | None = None, graphs: bool = True, launcher: Launcher | None = None,
         verify_weights: bool = True, saved_states: bool = True, checkpoints: str | Path | None = None,
         gpu_budget_gib: float = 4.0, host_budget_gib: float = 8.0, check_rows: bool = True,
         reference: bool = False) -> Program:
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
    processes. `reference`: run the reference executor on `device` whatever the target (a CUDA device too:
    `flidec run SPEC --device cuda`)."""
    directory = Path(artifact)
    device = torch.device(device)
    if dtype is not None and dtype not in DTYPES:
        raise ArtifactError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if device.type == "cuda" and not reference:
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
    if device.type == "cuda" and not reference:
        engine: Engine = _graph_engine(directory, manifest, model_dir, device, launcher, graphs, dtype, head)
        if check_rows:
            check_row_invariance(engine)
    else:
        if launcher is not None and not reference:
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
