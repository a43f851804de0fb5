"""The tests' oracle for the runtime: a spec's instances answered without compiling.

Consumes a spec's tree, a model directory and a format (resolved as `flidec compile` resolves it); produces
per instance its answer object or error record, by the binder's verifying Walker (every ask's path ids
checked against its whole prompt tokenized in one go) and the traced model on the reference executor, a
token budget of instances a stream. It shares no code with the compiled path past the binder and the
executor (no template, no bucket ladder, no Program), which is what makes it an oracle for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.fx

from flidec.formats import resolve_format
from flidec.ir.errors import InstanceError
from flidec.ir.instance import validate_instance
from flidec.ir.tree import Spec, Tree
from flidec.models.tokenizer import load_tokenizer
from flidec.models.weights import resolve_model
from flidec.runtime.answers import assemble
from flidec.runtime.binder import Walker, bound_from_plans
from flidec.runtime.decision.reading import DecisionReading
from flidec.runtime.recording import MODEL_DTYPES as DTYPES
from flidec.runtime.reference.executor import ReferenceExecutor
from flidec.runtime.reference.qwen3_5 import Qwen35
from flidec.runtime.request import error_record


class ReferenceAnswerer:
    """The model traced once, the format and the executor: `run(instances)` -> answers or error records."""

    def __init__(self, spec: Spec, tree: Tree, model: str | Path, device: str = "cpu", dtype: str = "fp32",
                 served_name: str | None = None, format: str | None = None, max_stream_tokens: int = 8192):
        model_dir = resolve_model(str(model))
        self.tree = tree
        self.max_stream_tokens = max_stream_tokens
        chosen = resolve_format(spec.format, model_dir, load_tokenizer(model_dir), format, str(model))
        self.fmt = chosen.fmt
        readout = None if chosen.head is None else chosen.head["weight"]
        module = Qwen35.from_pretrained(model_dir, DTYPES[dtype], readout=readout).to(device)
        self.executor = ReferenceExecutor(torch.fx.symbolic_trace(module))
        self.device = device
        self.served_name = served_name or model_dir.name

    def run(self, instances: Sequence[object]) -> list[dict]:
        """Each instance's answer object or error record, in order; consecutive instances share a stream
        while their rows fit max_stream_tokens (one over it runs alone)."""
        walker = self.fmt.walker(self.tree, verify=True) if isinstance(self.fmt, DecisionReading) else \
            Walker(self.tree, self.fmt, verify=True)
        out: list[dict | None] = [None] * len(instances)
        planned = []
        for i, inst in enumerate(instances):
            try:
                validate_instance(self.tree, inst, self.fmt.count_tokens)
                planned.append((i, walker.plan(inst)))
            except InstanceError as e:
                out[i] = error_record(e)
        group: list[tuple[int, object]] = []
        used = 0
        for item in planned + [None]:  # None: the end, which runs whatever is gathered
            rows = 0 if item is None else sum(map(len, item[1][0].ids))
            if group and (item is None or used + rows > self.max_stream_tokens):
                bound = bound_from_plans(self.tree, self.fmt, [p for _, p in group], lambda p: p)
                logits = self.executor.run_stream(bound.stream, self.device).cpu()
                answers = assemble(bound, logits, served_name=self.served_name)
                for k, (i, _) in enumerate(group):
                    out[i] = answers[k] if answers[k] is not None else error_record(bound.errors[k])
                group, used = [], 0
            if item is not None:
                group.append(item)
                used += rows
        return out  # type: ignore[return-value]
