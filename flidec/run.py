"""`flidec run`: answer a spec's instances with the reference executor, without compiling, or an artifact's.

Consumes a spec and a model (local directory or hub id), or an artifact directory (flidec.runtime.load: its
recordings on a GPU, the reference executor on the CPU), and instances (JSON lines, optionally gzipped); produces
DIR/results.jsonl (one answer object per instance, in input order: System One responses for wire="systemone"
trees; `{"error": ...}` for an instance that could not be answered, which never stops the run) and
DIR/summary.json. Instances are bound a window at a time and packed several to a stream, up to
`max_stream_tokens` rows; the stream's packing never changes an answer (E1).
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.fx

from flidec.formats import make_format
from flidec.frontend import load_spec
from flidec.ir.errors import FlideError, InstanceError
from flidec.ir.instance import validate_instance
from flidec.ir.tree import Spec, Tree
from flidec.models import DEMO_MODEL
from flidec.models.qwen3_5 import Qwen35
from flidec.models.tokenizer import load_tokenizer
from flidec.models.weights import resolve_model
from flidec.runtime.answers import assemble
from flidec.runtime.binder import Plan, Shape, Walker, bound_from_plans
from flidec.runtime.program import error_record
from flidec.runtime.reference.executor import ReferenceExecutor

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass
class Summary:
    instances: int = 0
    answered: int = 0
    failed: int = 0
    questions: int = 0
    stream_tokens: int = 0
    streams: int = 0
    wall_s: float = 0.0

    @property
    def questions_per_s(self) -> float:
        return self.questions / self.wall_s if self.wall_s > 0 else 0.0


def pick_tree(spec: Spec, name: str | None) -> Tree:
    if name is None:
        if len(spec.trees) != 1:
            names = ", ".join(t.name for t in spec.trees)
            raise FlideError(f"the spec has {len(spec.trees)} trees ({names}): choose one with --tree")
        return spec.trees[0]
    try:
        return spec.tree(name)
    except KeyError:
        raise FlideError(f"the spec has no tree `{name}` (it has {', '.join(t.name for t in spec.trees)})")


def read_instances(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, parsed JSON or the InstanceError that says why the line is not JSON); blank lines skipped."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as e:
                    yield lineno, InstanceError([f"line {lineno}: not JSON ({e.msg} at column {e.colno})"])
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise FlideError(f"cannot read instances from {path}: {e}") from e


class Answerer:
    """The model traced once, the format and the executor: answers lists of instances."""

    def __init__(self, spec: Spec, tree: Tree, model: str, device: str, dtype: str, served_name: str | None):
        model_dir = resolve_model(model)
        self.tree = tree
        self.fmt = make_format(spec.format, load_tokenizer(model_dir))
        module = Qwen35.from_pretrained(model_dir, DTYPES[dtype]).to(device)
        self.executor = ReferenceExecutor(torch.fx.symbolic_trace(module))
        self.device = device
        self.served_name = served_name or model_dir.name

    def answer(self, instances: list[object], max_stream_tokens: int, summary: Summary) -> list[dict]:
        """Answers (or error objects) for `instances`, in order. Each instance is validated and tokenized
        once; its plan sizes it for packing and is packed as it is."""
        walker = Walker(self.tree, self.fmt, verify=True)

        def plan(inst: object) -> tuple[Plan, Shape] | InstanceError:
            try:
                validate_instance(self.tree, inst, self.fmt.count_tokens)
                return walker.plan(inst)
            except InstanceError as e:
                return e

        planned = [plan(inst) for inst in instances]
        sizes = [0 if isinstance(p, InstanceError) else sum(map(len, p[0].ids)) for p in planned]
        out: list[dict | None] = [None] * len(instances)
        for group in _pack_greedy(sizes, max_stream_tokens):
            bound = bound_from_plans(self.tree, self.fmt, [planned[i] for i in group], _planned)
            if bound.sites:
                logits = self.executor.run_stream(bound.stream, self.device).cpu()
                summary.streams += 1
                summary.stream_tokens += bound.rows_used
                summary.questions += len(bound.sites)
            else:
                logits = torch.zeros(0, 1)
            answers = assemble(bound, logits, served_name=self.served_name)
            for k, i in enumerate(group):
                out[i] = answers[k] if answers[k] is not None else _error(bound.errors[k])
        return out  # type: ignore[return-value]


def _planned(p: tuple[Plan, Shape] | InstanceError) -> tuple[Plan, Shape]:
    if isinstance(p, InstanceError):
        raise p
    return p


def _pack_greedy(sizes: list[int], budget: int) -> list[list[int]]:
    """Consecutive instances per stream while their rows fit the budget (an oversized one goes alone)."""
    groups: list[list[int]] = []
    used = budget + 1
    for i, n in enumerate(sizes):
        if used + n > budget:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += n
    return groups


_error = error_record


class ArtifactAnswerer:
    """An artifact loaded by the runtime (flidec.runtime.program): it packs instances into its buckets."""

    def __init__(self, artifact: Path, tree: str | None, device: str, dtype: str, served_name: str | None):
        from flidec.runtime.program import load

        self.program = load(artifact, device, dtype=dtype, served_name=served_name)
        self.tree = self.program.tree(tree).tree

    def answer(self, instances: list[object], max_stream_tokens: int, summary: Summary) -> list[dict]:
        before = self.program.stats
        results = self.program.run(instances, self.tree.name)
        after = self.program.stats
        summary.streams += after.streams - before.streams
        summary.stream_tokens += after.stream_tokens - before.stream_tokens
        summary.questions += after.questions - before.questions
        return results


def run(spec_path: str, model: str | None, instances_path: str, out_dir: str, *, tree: str | None = None,
        device: str = "cpu", dtype: str = "fp32", max_stream_tokens: int = 8192, window: int = 64,
        served_name: str | None = None, progress: bool = True) -> Summary:
    out = Path(out_dir)
    answerer: Answerer | ArtifactAnswerer
    if (Path(spec_path) / "manifest.json").is_file():
        answerer = ArtifactAnswerer(Path(spec_path), tree, device, dtype, served_name)
        chosen = answerer.tree
    else:
        spec, _ = load_spec(spec_path)
        model = model or str(DEMO_MODEL)  # the CLI says so on stderr
        chosen = pick_tree(spec, tree)
        answerer = Answerer(spec, chosen, model, device, dtype, served_name)
    out.mkdir(parents=True, exist_ok=True)
    summary = Summary()
    start = time.perf_counter()
    results = out / "results.jsonl"
    partial = results.with_suffix(".jsonl.partial")  # renamed only when complete: no half-written results
    with open(partial, "w", encoding="utf-8") as f:
        window_items: list[tuple[int, object]] = []
        for item in read_instances(Path(instances_path)):
            window_items.append(item)
            if len(window_items) == window:
                _flush(answerer, window_items, f, max_stream_tokens, summary, start, progress)
                window_items = []
        _flush(answerer, window_items, f, max_stream_tokens, summary, start, progress)
    partial.replace(results)
    summary.wall_s = time.perf_counter() - start
    (out / "summary.json").write_text(json.dumps(
        {**asdict(summary), "questions_per_s": round(summary.questions_per_s, 3), "tree": chosen.name,
         "device": device, "dtype": dtype}, indent=2) + "\n")
    if progress:
        sys.stderr.write("\n")
    return summary


def _flush(answerer: Answerer, items: list[tuple[int, object]], f, budget: int, summary: Summary,
           start: float, progress: bool) -> None:
    if not items:
        return
    parsed = [(k, obj) for k, (_, obj) in enumerate(items) if not isinstance(obj, InstanceError)]
    answers = answerer.answer([obj for _, obj in parsed], budget, summary)
    by_index = {k: a for (k, _), a in zip(parsed, answers)}
    for k, (_, obj) in enumerate(items):
        record = by_index.get(k) or _error(obj)  # type: ignore[arg-type]
        summary.instances += 1
        if "error" in record:
            summary.failed += 1
        else:
            summary.answered += 1
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
    f.flush()
    if progress:
        elapsed = time.perf_counter() - start
        sys.stderr.write(f"\r{summary.instances} instances, {summary.questions} questions, {elapsed:.1f} s")
        sys.stderr.flush()
