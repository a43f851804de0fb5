"""The load-time row-invariance check (runtime/row_check.py) on the CPU: the tiny model's projections recorded
for two buckets whose GEMM launches take different kernel records, run through the Triton interpreter. The
check compares every class's launches and passes; a launcher whose launches over more rows compute other bits
(a GPU whose tile shapes change a row's bits) is refused, naming the op and both buckets."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = """
import json, sys, torch
sys.path.insert(0, sys.argv[2])
from test_launch import BUCKET, fake_records, record
from flidec.codegen import eager, recording
from flidec.ir.errors import ArtifactError
from flidec.ir.program import Bucket
from flidec.runtime.engines import GraphEngine
from flidec.runtime.row_check import PROJECTIONS, check_row_invariance
from flidec.testing.interpreter import InterpreterLauncher
assert eager.interpreting()
rec, weights = record(sys.argv[1])
wide = Bucket("b1", rows=320, segments=BUCKET.segments, depth=BUCKET.depth, reads=BUCKET.reads,
              labels=BUCKET.labels)
from flidec.passes.manager import run
from flidec.passes.pipeline import GRAPH_PIPELINE
from flidec.runtime.reference.qwen3_5 import Qwen35
import torch.fx
lowered = run(torch.fx.symbolic_trace(Qwen35.from_pretrained(sys.argv[1], torch.bfloat16)), GRAPH_PIPELINE).ir
rec_wide = recording.record(lowered, wide)
recs = {"t/b0": rec, "t/b1": rec_wide}
kernels = {**fake_records(rec), **fake_records(rec_wide)}
by_weights = {}  # (op, weight shapes) -> its kernel records: a class of two or more is compared
for r in recs.values():
    for s in r.steps:
        if s.op in PROJECTIONS:
            shapes = tuple(a.shape for a in s.args if a.buffer and r.buffer(a.buffer).region == "weight")
            by_weights.setdefault((s.op, shapes), set()).add(s.kernel)
compared = sum(len(k) for k in by_weights.values() if len(k) > 1)


class Skewed(InterpreterLauncher):
    # launches over five or more row tiles read their x's first element one larger: other bits for row 0
    def launch(self, kernel, launch):
        names = [n for n, _ in kernel.params]
        if kernel.name.startswith("gemm") and launch.grid[0] >= 5:
            value = launch.args[names.index("x_ptr")]
            t = next(s for s in self.storages
                     if s.data_ptr() <= value < s.data_ptr() + s.numel() * s.element_size())
            t.reshape(-1).view(torch.uint8)[value - t.data_ptr():][:2].view(torch.bfloat16).add_(1.0)
        super().launch(kernel, launch)


out = {"compared": compared}
for name, launcher in (("plain", InterpreterLauncher()), ("skewed", Skewed())):
    engine = GraphEngine(recs, kernels, weights, torch.device("cpu"), launcher, graphs=False)
    launcher.storages = [engine.buffers.arena, *engine.buffers.tensors.values()]
    try:
        out[name] = check_row_invariance(engine)
    except ArtifactError as e:
        out[name] = str(e)
print(json.dumps(out))
"""


def test_the_check_compares_every_kernel_and_refuses_other_bits(tiny_checkpoint) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(tiny_checkpoint), os.path.dirname(__file__)],
                         env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    # every projection kernel record ran once where its class has another (the buckets take other rungs)
    assert out["plain"] == out["compared"] >= 6, out
    refused = out["skewed"]
    assert isinstance(refused, str), refused
    assert refused.startswith("the projections are not row-invariant on this GPU: linear")
    assert "over 320 rows in bucket t/b1" in refused and "bucket t/b0" in refused
    assert "must not serve this artifact" in refused
