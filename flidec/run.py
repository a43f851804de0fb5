"""`flidec run`: answer an artifact's instances, or a spec's (compiled for the cpu target on the fly).

Consumes an artifact directory (flidec.runtime.load: its recordings on a GPU, the reference executor on the
CPU) or a spec and a model (local directory or hub id), which it compiles for the cpu target into a
temporary directory and runs as that artifact on the reference executor (on `--device`, a GPU too), and
instances (JSON lines, optionally gzipped); produces DIR/results.jsonl (one answer object per instance, in
input order: System One responses for wire="systemone" trees; `{"error": ...}` for an instance that could
not be answered, which never stops the run) and DIR/summary.json. Both go through the runtime's one door:
a window of instances at a time is prepared and executed as one run (`Program.prepare` / `execute`), packed
by the bucket ladder; packing never changes an answer (E1). Lines are parsed strictly (loads_instance); a
run that fails as a whole is redone in halves (runtime/scheduler.execute_isolated), so only the bad row
gets the error. Results go to a temporary directory moved into DIR at the end: an interrupt leaves DIR's
old results intact.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.fx

from flidec.frontend import load_spec
from flidec.ir.errors import FlideError, InstanceError
from flidec.ir.instance import loads_instance, value_problems
from flidec.ir.tree import Spec, Tree
from flidec.models import DEMO_MODEL
from flidec.runtime.request import Request, error_record
from flidec.runtime.scheduler import execute_isolated


@dataclass
class Summary:
    instances: int = 0
    answered: int = 0
    failed: int = 0
    questions: int = 0
    stream_tokens: int = 0
    streams: int = 0
    wall_s: float = 0.0
    saved_states: dict | None = None  # an artifact's saved-state stats at the end (runtime/saved/store.py)

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
        raise FlideError(f"the spec has no tree `{name}` (it has {', '.join(t.name for t in spec.trees)})") \
            from None


def read_instances(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, parsed JSON or the InstanceError that says why the line is not JSON, naming the line);
    blank lines skipped. Lines are read as bytes, so invalid UTF-8 is one line's error, not the file's."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark
                    line = line[3:]
                if not line.strip():
                    continue
                try:
                    obj = loads_instance(line)
                    problems = value_problems(obj)  # validation finds these too, but without the line
                    if problems:
                        raise InstanceError(problems)
                    yield lineno, obj
                except InstanceError as e:
                    yield lineno, InstanceError([f"line {lineno}: {p}" for p in e.problems])
    except (OSError, EOFError) as e:
        raise FlideError(f"cannot read instances from {path}: {e}") from e


class OutputDir:
    """Where a run's results go. `check` runs before any expensive work: DIR must be a directory (or absent)
    that can be written. Results are written into a temporary directory, inside DIR when it exists (else
    next to it), then moved in by `commit`: each file with one atomic rename, or the whole directory when
    DIR did not exist. `discard` removes the temporary directory; a killed run leaves only it behind, hidden
    (`.flidec-partial-*`), never half of DIR's results."""

    FILES = ("results.jsonl", "summary.json")

    def __init__(self, out: Path):
        self.out = out
        self.tmp: Path | None = None

    def check(self, instances: Path) -> None:
        out = self.out
        if out.exists() and not out.is_dir():
            raise FlideError(f"--out {out}: exists and is not a directory; name a directory (created if "
                             "missing)")
        if instances.exists() and any(_same(instances, out / n) for n in self.FILES):
            raise FlideError(f"--instances {instances} is this run's own output in --out {out}: copy it "
                             "elsewhere first, or choose another --out")
        home = out if out.is_dir() else out.parent
        try:
            home.mkdir(parents=True, exist_ok=True)
            self.tmp = staging_dir(home, "" if home == out else out.name)
            if home == out:  # the results replace DIR's files: DIR's own entries must be writable
                for n in self.FILES:
                    if (out / n).exists() and not os.access(out / n, os.W_OK, follow_symlinks=False):
                        raise PermissionError(f"{out / n}: not writable")
        except OSError as e:
            self.discard()
            raise FlideError(f"--out {out}: cannot write there ({_reason(e)}); choose a writable directory") \
                from None

    def commit(self) -> None:
        assert self.tmp is not None
        try:
            if self.tmp.parent == self.out:
                for n in self.FILES:
                    os.replace(self.tmp / n, self.out / n)
                stale = self.out / "results.jsonl.partial"  # what flidec before this layout left on a crash
                if stale.is_file():
                    stale.unlink()
            else:
                os.replace(self.tmp, self.out)
                self.tmp = None
        except OSError as e:
            raise FlideError(f"--out {self.out}: cannot move the results in ({_reason(e)})") from None

    def discard(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def staging_dir(parent: Path, name: str) -> Path:
    """A new, hidden, uniquely named directory in `parent` (the umask's mode, unlike mkdtemp's 0700, since it
    may become the output directory itself)."""
    for _ in range(100):
        path = parent / f".{name + '.' if name else ''}flidec-partial-{secrets.token_hex(4)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{parent}: no free name for a staging directory")


def _same(a: Path, b: Path) -> bool:
    try:
        return b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _reason(e: OSError) -> str:
    return e.strerror or str(e)


def check_device(device: str) -> None:
    """Refuse a device this machine does not have, in one line, before the model is loaded."""
    m = re.fullmatch(r"cuda(?::(\d+))?", device)
    if device == "cpu" or m is None:
        return
    if not torch.cuda.is_available():
        raise FlideError(f"--device {device}: no CUDA device is available here (torch {torch.__version__}); "
                         "use --device cpu")
    if m.group(1) is not None and int(m.group(1)) >= torch.cuda.device_count():
        raise FlideError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                         f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")


def _json_line(record: dict) -> bytes:
    """One results line; a string the row validation let through that is not Unicode (a lone surrogate)
    is written as its \\u escape rather than failing the write."""
    text = json.dumps(record, ensure_ascii=False) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(record) + "\n").encode("ascii")


class ArtifactAnswerer:
    """An artifact loaded by the runtime (flidec.runtime.program): it packs instances into its buckets."""

    def __init__(self, artifact: Path, tree: str | None, device: str, dtype: str | None,
                 served_name: str | None, verify_weights: bool = True, saved: SavedOptions | None = None,
                 reference: bool = False):
        from flidec.runtime.program import load

        saved = saved or SavedOptions()
        self.program = load(artifact, device, dtype=dtype, served_name=served_name,
                            verify_weights=verify_weights, saved_states=saved.enabled,
                            checkpoints=saved.checkpoints, gpu_budget_gib=saved.gpu_gib,
                            host_budget_gib=saved.host_gib, reference=reference)
        self.tree = self.program.tree(tree).tree
        self.summary = Summary()

    def run_rows(self, tree: str | None = None) -> int:
        return self.program.run_rows(tree)

    def prepare(self, request: Request) -> Request:
        request.tree = self.tree.name
        return self.program.prepare(request)

    def execute(self, requests: Sequence[Request]) -> None:
        before = self.program.stats
        self.program.execute(requests)
        after = self.program.stats
        self.summary.streams += after.streams - before.streams
        self.summary.stream_tokens += after.stream_tokens - before.stream_tokens
        self.summary.questions += after.questions - before.questions


@dataclass(frozen=True)
class SavedOptions:
    """An artifact run's saved states (runtime/saved): on or off, the checkpoint directory, the budgets."""

    enabled: bool = True
    checkpoints: str | None = None
    gpu_gib: float = 4.0
    host_gib: float = 8.0


class Answerer(ArtifactAnswerer):
    """A spec compiled for the cpu target into a temporary directory and run as that artifact, through the
    runtime's one door (runtime/program.py): its model on `device` by the reference executor, its instances
    packed by the compiled bucket ladder, no saved states."""

    def __init__(self, spec_path: str | Path, tree: str | None, model: str, device: str, dtype: str,
                 served_name: str | None, format: str | None = None):
        from flidec.compile import compile_artifact

        self._dir = tempfile.TemporaryDirectory(prefix="flidec-run-")  # removed with the answerer
        out = Path(self._dir.name) / "artifact"
        compile_artifact(spec_path, model, "cpu", out, tree=tree, format=format, log=sys.stderr)
        super().__init__(out, tree, device, dtype, served_name, verify_weights=False,
                         saved=SavedOptions(enabled=False), reference=True)


def run(spec_path: str, model: str | None, instances_path: str, out_dir: str, *, tree: str | None = None,
        device: str = "cpu", dtype: str | None = None, window: int = 64,
        served_name: str | None = None, progress: bool = True, trust_weights: bool = False,
        saved: SavedOptions | None = None, format: str | None = None) -> Summary:
    instances = Path(instances_path)
    if not instances.exists() or instances.is_dir():
        what = "a directory" if instances.is_dir() else "no such file"
        raise FlideError(f"cannot read instances from {instances}: {what}")
    source = Path(spec_path)
    if source.is_dir() and not (source / "manifest.json").is_file():
        raise FlideError(f"{source} is a directory but not an artifact (no manifest.json): give a .flide "
                         "spec or a directory `flidec compile -o` finished writing")
    check_device(device)
    _refuse_ignored(source, model, trust_weights, saved, format)
    dtype = dtype or (None if source.is_dir() and device != "cpu" else "fp32")  # cuda: the artifact's own
    output = OutputDir(Path(out_dir))
    output.check(instances)
    try:
        answerer: ArtifactAnswerer
        if source.is_dir():
            answerer = ArtifactAnswerer(source, tree, device, dtype, served_name, not trust_weights, saved)
            chosen = answerer.tree
        else:
            spec, _ = load_spec(spec_path)
            model = model or str(DEMO_MODEL)  # the CLI says so on stderr
            chosen = pick_tree(spec, tree)
            answerer = Answerer(spec_path, chosen.name, model, device, dtype or "fp32", served_name, format)
        summary = answerer.summary = Summary()  # the run's counts (a test may reuse one answerer)
        start = time.perf_counter()
        assert output.tmp is not None
        with open(output.tmp / "results.jsonl", "wb") as f:
            window_items: list[tuple[int, object]] = []
            for item in read_instances(instances):
                window_items.append(item)
                if len(window_items) == window:
                    _flush(answerer, window_items, f, summary, start, progress)
                    window_items = []
            _flush(answerer, window_items, f, summary, start, progress)
        summary.wall_s = time.perf_counter() - start
        stats = answerer.program.stats.saved
        summary.saved_states = None if stats is None else asdict(stats)
        (output.tmp / "summary.json").write_text(json.dumps(
            {**asdict(summary), "questions_per_s": round(summary.questions_per_s, 3), "tree": chosen.name,
             "device": device, "dtype": dtype}, indent=2) + "\n")
        output.commit()
    finally:
        output.discard()
    if progress:
        sys.stderr.write("\n")
    return summary


def _refuse_ignored(source: Path, model: str | None, trust_weights: bool, saved: SavedOptions | None,
                    format: str | None = None) -> None:
    """Options the chosen path would ignore are refused, never dropped silently."""
    if not source.is_dir() and saved is not None and saved != SavedOptions():
        raise FlideError("saved states (--checkpoints, --no-saved-states, --saved-*-gib) apply to an "
                         "artifact, not to a .flide spec: compile it first")
    if source.is_dir():
        for flag, value in (("--model", model), ("--format", format)):
            if value is not None:
                raise FlideError(f"{flag} does not apply to an artifact ({source} brings its own model and "
                                 "packs into its buckets): leave it out, or run the .flide spec")
    elif trust_weights:
        raise FlideError("--trust-weights applies to an artifact's referenced weights, not to a .flide spec")


def _flush(answerer: ArtifactAnswerer, items: list[tuple[int, object]], f, summary: Summary,
           start: float, progress: bool) -> None:
    """A window of lines answered as one run (runtime/scheduler.execute_isolated: a run that raises is
    redone in halves, so only the line that fails alone gets the error) and written in input order."""
    if not items:
        return
    requests = [None if isinstance(obj, InstanceError) else answerer.prepare(Request(obj))
                for _, obj in items]
    execute_isolated(answerer, [r for r in requests if r is not None and r.result is None])
    for r, (_, obj) in zip(requests, items, strict=True):
        ended = r is not None and r.result is not None
        record = r.result.record if ended else error_record(obj)  # type: ignore[union-attr, arg-type]
        summary.instances += 1
        if "error" in record:
            summary.failed += 1
        else:
            summary.answered += 1
        f.write(_json_line(record))
    f.flush()
    if progress:
        elapsed = time.perf_counter() - start
        sys.stderr.write(f"\r{summary.instances} instances, {summary.questions} questions, {elapsed:.1f} s")
        sys.stderr.flush()
