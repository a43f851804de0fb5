"""The reference executor: runs a model graph on a stream with plain-torch fork ops, on any device.

Consumes a torch.fx GraphModule traced from a model definition whose fork-aware ops (fork_attention,
fork_gdn, fork_conv, label_logits, and the batch-invariant linear and norms) are leaf calls, and a Stream
from the binder. It runs the graph node by node (torch.fx.Interpreter), calling for each leaf op the
implementation registered under its name: by default runtime/reference/ops.py, the oracle every generated
kernel is checked against; tests swap single ops for kernels through `overrides`. It produces the label
logits of every read, [R, Lmax] float32 (padding labels -inf).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.fx

from flidec.runtime.meta import Stream


class ReferenceExecutor(torch.fx.Interpreter):
    def __init__(self, graph: torch.fx.GraphModule, overrides: Mapping[str, Callable] | None = None):
        super().__init__(graph)
        self.overrides = dict(overrides or {})

    def call_function(self, target, args, kwargs):
        impl = self.overrides.get(getattr(target, "__name__", ""))
        return (impl or target)(*args, **kwargs)

    @torch.inference_mode()
    def run_stream(self, stream: Stream, device: torch.device | str = "cpu") -> torch.Tensor:
        tokens = stream.tokens.to(device)
        meta = stream.meta.to(device)
        return self.run(tokens, meta)
