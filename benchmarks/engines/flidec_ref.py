"""flidec-ref and flidec-ref-solo: flidec's reference executor on the traced Qwen35, forked or not.

Consumes a model directory (flidec.runtime.reference.qwen3_5.Qwen35 in bf16, traced with torch.fx and run by
flidec.runtime.reference.executor.ReferenceExecutor) and a Work; produces label logits per read.
flidec-ref packs each instance's segment forest (the binder's segments) into streams of at most
`max_rows` rows, several instances per stream offline: the state is computed once per instance.
flidec-ref-solo packs each read's whole prompt as its own root segment (nothing shared): what a generation
engine without prefix sharing computes, and the plain pass E3 says every forked read equals bit for bit.
Stream meta is built inside the timed run (host work every request needs).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.engines.base import Logits, free_device_memory
from benchmarks.work import Work

MAX_ROWS = 16384


class FlidecReference:
    def __init__(self, solo: bool = False, max_rows: int = MAX_ROWS, dtype: torch.dtype = torch.bfloat16):
        self.solo, self.max_rows, self.dtype = solo, max_rows, dtype
        self.name = "flidec-ref-solo" if solo else "flidec-ref"
        self.computes = "solo" if solo else "tree"
        self.executor = None

    def load(self, model_dir: Path, device: str) -> dict:
        import torch.fx

        from flidec.runtime.reference.executor import ReferenceExecutor
        from flidec.runtime.reference.qwen3_5 import Qwen35

        self.device = device
        model = Qwen35.from_pretrained(model_dir, self.dtype).to(device)
        self.executor = ReferenceExecutor(torch.fx.symbolic_trace(model))
        return {
            "dtype": str(self.dtype).removeprefix("torch."),
            "executor": "flidec.runtime.reference",
            "max_stream_rows": self.max_rows,
        }

    def prepare(self, work: Work) -> Work:
        return work

    def _batches(self, sizes: Sequence[tuple[int, int]]) -> list[list[int]]:
        """Greedy runs of (key, rows) in order, each at most max_rows (an oversized item goes alone)."""
        out: list[list[int]] = []
        used = 0
        for key, rows in sizes:
            if not out or used + rows > self.max_rows:
                out.append([])
                used = 0
            out[-1].append(key)
            used += rows
        return out

    def run(self, work: Work, instances: Sequence[int], offline: bool) -> Logits:
        from flidec.testing.forests import pack_forest

        logits: Logits = {}
        if self.solo:
            reads = work.read_ids(instances)
            for batch in self._batches([(r, len(work.reads[r].path)) for r in reads]):
                nodes = [(-1, work.reads[r].path) for r in batch]
                stream = pack_forest(nodes, reads={j: work.reads[r].labels for j, r in enumerate(batch)})
                self._collect(stream, batch, logits)
            return logits
        sizes = [(i, sum(len(ids) for _, ids in work.forests[i])) for i in instances]
        for batch in self._batches(sizes):
            nodes, read_map, order = [], {}, []
            for i in batch:
                base = len(nodes)
                nodes += [(p + base if p >= 0 else -1, ids) for p, ids in work.forests[i]]
                for r in work.reads_of[i]:
                    read_map[base + work.reads[r].segment] = work.reads[r].labels
                    order.append(r)
            self._collect(pack_forest(nodes, reads=read_map), order, logits)
        return logits

    def _collect(self, stream, read_ids: list[int], logits: Logits) -> None:
        out = self.executor.run_stream(stream, self.device).float().cpu()
        for j, r in enumerate(read_ids):
            n = len(stream.meta.reads[j].labels)
            logits[r] = out[j, :n].clone()

    def close(self) -> None:
        self.executor = None
        free_device_memory()
