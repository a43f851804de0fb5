"""flide and flide-solo: flide 0.1.4 (PyPI) as a black-box peer, through its public API only.

Consumes a model directory and a Work; produces label logits per read. Uses, from flide's public API and
docstrings (never its code): `flide.runtime.engine.Engine(model, format, device, dtype,
backbone_options={"cuda_graphs": True})`, `Engine.run_plans(plans)` (offline, packed micro-batches) and
`Engine.forward([plan], mode="graphs")` (one request at a time from CUDA graphs), with plans built from
flidec's own token ids: `flide.formats.base.Plan(prefix, suffixes, reads)`, one plan per instance, the
prefix its state piece and one suffix per question (the rest of that question's whole prompt, so deeper
trees run flattened to one fork level, the only one flide forks). Reads are `Read(head=None)`: the
final-normed hidden state at each suffix's last token, which this adapter turns into fp32 label logits
with the checkpoint's head rows, as flidec does. flide-solo sends the same plans with an empty prefix
("every suffix a sequence of its own"). The engine is built with CUDA graphs on and serves both modes;
flide and flide-solo share one (`_SHARED`, counted by holders: the harness loads the next engine before it
closes the previous one), so flide's 20-40 s start-up is paid once. flide compiles for every new input
shape, so the engine says `compiles_per_shape` and the harness gives each timed call an untimed pass first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.engines.base import EngineUnavailable, Logits, free_device_memory, head_weight, label_logits
from benchmarks.work import Work

_SHARED: dict[tuple[str, str], list] = {}  # (model dir, device) -> [flide Engine, head weight, holders]


class Flide:
    # flide JIT-compiles for every new input shape: measure.py runs each call it times once untimed first
    compiles_per_shape = True

    def __init__(self, solo: bool = False):
        self.solo = solo
        self.name = "flide-solo" if solo else "flide"
        self.computes = "solo" if solo else "one-level"
        self.engine = None
        self.paths: Counter = Counter()

    def load(self, model_dir: Path, device: str) -> dict:
        try:
            import flide
            from flide.formats.base import Plan, Read
            from flide.runtime.engine import Engine
        except Exception as e:  # noqa: BLE001 -- not installed, or its imports fail on this box
            raise EngineUnavailable(f"flide is not importable: {type(e).__name__}: {e}") from None
        if not device.startswith("cuda"):
            raise EngineUnavailable("flide runs on CUDA only")
        self.Plan, self.Read = Plan, Read
        self.key = (str(model_dir), device)
        shared = self.key in _SHARED
        if not shared:
            engine = Engine(
                str(model_dir),
                format="next_token",
                device=device,
                dtype="bfloat16",
                backbone_options={"cuda_graphs": True},
            )
            _SHARED[self.key] = [engine, head_weight(model_dir).to(device), 0]
        entry = _SHARED[self.key]
        entry[2] += 1
        self.engine, self.head = entry[0], entry[1]
        self.hidden_size = self.head.shape[1]
        from importlib import metadata

        return {
            "version": metadata.version("flide"),
            "module": flide.__file__,
            "dtype": "bfloat16",
            "backbone_options": {"cuda_graphs": True},
            "reads": "Read(head=None) -> fp32 label rows",
            "engine_shared_with_previous": shared,
        }

    def prepare(self, work: Work) -> dict:
        plans = {}
        for i in range(work.instances):
            reads = work.reads_of[i]
            if self.solo:
                prefix, suffixes = [], [list(work.reads[r].path) for r in reads]
            else:
                root = work.reads[reads[0]].root
                prefix = list(work.reads[reads[0]].path[:root])
                suffixes = [list(work.reads[r].path[root:]) for r in reads]
            plans[i] = self.Plan(prefix=prefix, suffixes=suffixes, reads=(self.Read(head=None),))
        labels = {r: torch.tensor(read.labels, device=self.head.device) for r, read in enumerate(work.reads)}
        return {"work": work, "plans": plans, "labels": labels}

    def run(self, prepared: dict, instances: Sequence[int], offline: bool) -> Logits:
        work, plans = prepared["work"], prepared["plans"]
        if offline:
            outputs, _stats = self.engine.run_plans([plans[i] for i in instances])
            self.paths["run_plans"] += 1
        else:
            outputs = []
            for i in instances:
                outs, modes = self.engine.forward([plans[i]], mode="graphs")
                self.paths.update(str(m) for m in modes)
                outputs.append(outs[0])
        hidden, order = [], []
        for i, out in zip(instances, outputs, strict=True):
            for b, r in enumerate(work.reads_of[i]):
                hidden.append(self._hidden(out[b]))
                order.append(r)
        logits: Logits = {}
        for r, h in zip(order, hidden, strict=True):
            logits[r] = label_logits(h, self.head[prepared["labels"][r]])
        return {r: v.cpu() for r, v in logits.items()}

    def _hidden(self, branch_output) -> torch.Tensor:
        """One branch's output (its reads, each rows per position) -> the hidden state at its last token."""
        x = branch_output[0] if isinstance(branch_output, (list, tuple)) else branch_output
        t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=torch.float32)
        while t.dim() > 1:
            t = t[-1]
        if t.numel() != self.hidden_size:
            raise RuntimeError(
                f"flide returned {t.numel()} values for a hidden-state read; expected {self.hidden_size}"
            )
        return t.to(self.head.device)

    def close(self) -> None:
        if self.engine is not None:
            entry = _SHARED[self.key]
            entry[2] -= 1
            if entry[2] == 0:
                del _SHARED[self.key]
        self.engine = None
        self.head = None
        free_device_memory()

    def facts(self) -> dict:
        return {"paths": dict(self.paths)}
