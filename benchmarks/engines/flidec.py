"""flidec: the compiled runtime, as a user runs it: `flidec compile` ahead of time, then
`flidec.runtime.program.load` and `Program.label_logits` per request.

Consumes a model directory and the Works of the run; `build` compiles one artifact per spec the workloads
use (sm_XY of this GPU, weights referenced, not bundled) into a scratch directory before `load` is timed,
so load and load-to-first-answer are the runtime's alone and compile seconds are reported apart. `run`
hands the workload's instance JSON to the runtime: validation, binding (tokenizing the bound text), packing
into buckets, the graph replay and the label read are all inside the timed region, where the other engines
get token ids prepared untimed. Offline, all instances go in one call (the runtime packs consecutive
instances into the smallest bucket that holds them); online, one instance per call.
flidec-solo runs the same artifacts with nothing shared: each question's whole prompt (the Work's ids) as a
root segment of its own, up to the largest bucket's reads, segments and rows per stream
(`Program.run_stream`): what a generation engine without prefix sharing computes, on flidec's kernels, and
the plain pass E3 says every forked read equals bit for bit.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.engines.base import Logits, free_device_memory
from benchmarks.work import Work

# (model, spec, target, activations) -> (artifact, seconds)
_BUILT: dict[tuple[Path, Path, str, str], tuple[Path, float]] = {}


class FlidecCompiled:
    def __init__(self, solo: bool = False, scratch: Path | None = None, activations: str = "bf16"):
        self.solo, self.activations = solo, activations
        suffix = "" if activations == "bf16" else f"-{activations}"  # flidec compile's default: no suffix
        self.name = ("flidec-solo" if solo else "flidec") + suffix
        self.computes = "solo" if solo else "tree"
        self.scratch = scratch or Path(tempfile.gettempdir()) / "flidec-bench"
        self.artifacts: dict[Path, Path] = {}  # spec -> artifact directory
        self.programs: dict[Path, object] = {}
        self.compile_s: dict[str, float] = {}

    def build(self, model_dir: Path, works: Sequence[Work], device: str) -> dict:
        from flidec.compile import compile_artifact

        if not device.startswith("cuda"):
            target = "cpu"
        else:
            major, minor = torch.cuda.get_device_capability(torch.device(device))
            target = f"sm_{major}{minor}"
        self.scratch.mkdir(parents=True, exist_ok=True)
        for spec in sorted({w.source.spec for w in works}):
            key = (model_dir.resolve(), spec.resolve(), target, self.activations)
            if key not in _BUILT:  # flidec and flidec-solo in one run share their artifacts
                out = Path(tempfile.mkdtemp(prefix=f"{spec.stem}-", dir=self.scratch)) / "artifact"
                t0 = time.perf_counter()
                compile_artifact(spec, model_dir, target, out, kernel_cache=self.scratch / "kernels",
                                 activations=self.activations)
                _BUILT[key] = (out, round(time.perf_counter() - t0, 1))
            self.artifacts[spec], self.compile_s[spec.name] = _BUILT[key]
        return {"target": target, "activations": self.activations, "compile_s": self.compile_s}

    def load(self, model_dir: Path, device: str) -> dict:
        from flidec.runtime.program import load

        for spec, artifact in self.artifacts.items():
            self.programs[spec] = load(artifact, device, dtype="bf16")
        return {"dtype": "bf16", "artifacts": sorted(p.name for p in self.artifacts),
                "compile_s": self.compile_s}

    def prepare(self, work: Work) -> Work:
        if work.source.spec not in self.programs:
            raise RuntimeError(f"no artifact was built for {work.source.spec.name}")
        return work

    def run(self, work: Work, instances: Sequence[int], offline: bool) -> Logits:
        program = self.programs[work.source.spec]
        if self.solo:
            return self._run_solo(program, work, instances)
        logits: Logits = {}
        groups = [list(instances)] if offline else [[i] for i in instances]
        for group in groups:
            got = program.label_logits([work.source.instances[i] for i in group], tree=work.source.tree)
            for i, per in zip(group, got, strict=True):
                if not isinstance(per, torch.Tensor):
                    raise RuntimeError(f"instance {i}: {per}")
                reads = work.reads_of[i]
                if per.shape[0] != len(reads):
                    raise RuntimeError(f"instance {i}: {per.shape[0]} reads, the binder made {len(reads)}")
                for row, r in enumerate(reads):
                    logits[r] = per[row, : len(work.reads[r].labels)]
        return logits

    def _run_solo(self, program, work: Work, instances: Sequence[int]) -> Logits:
        from flidec.testing.forests import pack_forest

        largest = program.tree(work.source.tree).largest
        logits: Logits = {}
        batches: list[list[int]] = []
        rows = 0
        for r in work.read_ids(instances):
            n = len(work.reads[r].path)
            if (not batches or len(batches[-1]) >= min(largest.reads, largest.segments)
                    or rows + n > largest.rows):
                batches.append([])
                rows = 0
            batches[-1].append(r)
            rows += n
        for batch in batches:
            nodes = [(-1, work.reads[r].path) for r in batch]
            stream = pack_forest(nodes, reads={j: work.reads[r].labels for j, r in enumerate(batch)})
            out = program.run_stream(stream, tree=work.source.tree)
            for j, r in enumerate(batch):
                logits[r] = out[j, : len(work.reads[r].labels)]
        return logits

    def facts(self) -> dict:
        out = {}
        for spec, program in self.programs.items():
            stats = program.stats
            out[spec.name] = {"streams": stats.streams, "stream_tokens": stats.stream_tokens,
                              "questions": stats.questions}
        return {"runtime_stats": out}

    def close(self) -> None:
        self.programs.clear()
        free_device_memory()
