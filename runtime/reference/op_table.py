"""The op table: every fork-aware or fused op of the model graph, declared once.

Each Op names a torch.fx leaf function, its plain-torch reference (the function itself: its body composes
runtime/reference/ops.py), the rule giving its output(s) on meta-device operands, and where it goes next.
runtime/reference/qwen3_5.py wraps the MODEL ops as leaf calls, the passes insert the GRAPH ops, and
codegen/recording.py registers one emitter per Op and shapes the graph by `outputs`. It
sits beside the reference ops, the lowest level all of them import: the runtime may not import passes/ or
codegen/, and the reference executor runs every stage of the graph. A new op is one entry here plus its
kernel and emitter in codegen/. Relies on runtime/meta.py and runtime/tables.py for the segments table.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from flidec.runtime.meta import Segment, StreamMeta, build_meta
from flidec.runtime.reference import ops
from flidec.runtime.tables import PADDING_LEVEL

MODEL, GRAPH, TORCH = "model", "graph", "torch"  # who puts an op in the graph: the model, a pass, or torch


@dataclass(frozen=True, slots=True, eq=False)
class Op:
    """One op of the model graph, compared by identity (the table holds each once)."""

    fn: Callable[..., Any]  # the leaf function a graph node calls, and its plain-torch reference
    stage: str  # MODEL: the model calls it; GRAPH: a pass inserts it; TORCH: plain torch the recorder emits
    outputs: Callable[..., Any] | None  # meta-device operands -> output(s); None: lowered before recording
    lowered: str  # where it goes next: the pass that replaces it, or the codegen module with its kernel
    reads_meta: bool = False  # reads a StreamMeta, so no lowered graph may call it

    @property
    def name(self) -> str:
        return self.fn.__name__


# ---- the ops passes insert (leaf calls; bodies are the reference) ------------------------------------------


def segments_meta(segments: torch.Tensor, rows: int) -> StreamMeta:
    """The StreamMeta a segments table stands for (padding rows dropped), as the fork ops' oracle sees it."""
    return _segments_meta(tuple(map(tuple, segments.tolist())), rows)


@lru_cache(maxsize=8)  # one stream runs every layer's fork ops on the same table
def _segments_meta(table: tuple[tuple[int, ...], ...], rows: int) -> StreamMeta:
    segs = tuple(Segment(*row) for row in table if row[4] != PADDING_LEVEL)
    return build_meta(segs, (), rows)


def fork_conv_static(x: torch.Tensor, weight: torch.Tensor, conv_prev: torch.Tensor,
                     dtype: torch.dtype | None = None) -> torch.Tensor:
    """ops.fork_conv reading its predecessor table from a static buffer (the only meta it reads)."""
    return ops.fork_conv(x, weight, SimpleNamespace(conv_prev=conv_prev), dtype)


def fork_attention_static(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: torch.Tensor
                          ) -> torch.Tensor:
    return ops.fork_attention(q, k, v, segments_meta(segments, q.shape[0]))


def fork_attention_gated(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gate: torch.Tensor,
                         segments: torch.Tensor) -> torch.Tensor:
    """Fork attention with Qwen3.5's output gate: [T, Hq * D] = attention * sigmoid(gate), gate [T, Hq, D]."""
    o = fork_attention_static(q, k, v, segments)
    return o.reshape(o.shape[0], -1) * torch.sigmoid(gate.reshape(o.shape[0], -1))


def fork_gdn_static(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                    segments: torch.Tensor) -> torch.Tensor:
    return ops.fork_gdn(q, k, v, g, beta, segments_meta(segments, q.shape[0]))


def fork_gdn_gated(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                   a_log: torch.Tensor, dt_bias: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """fork_gdn_static on the raw gate projections: g = gdn_decay(a, A_log, dt_bias), beta = gdn_beta(b)
    computed inside the prep kernel instead of by two launches of their own."""
    return fork_gdn_static(q, k, v, ops.gdn_decay(a, a_log, dt_bias), ops.gdn_beta(b), segments)


def fork_gdn_normed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                    a_log: torch.Tensor, dt_bias: torch.Tensor, z: torch.Tensor, weight: torch.Tensor,
                    eps: float, dtype: torch.dtype | None, segments: torch.Tensor) -> torch.Tensor:
    """fork_gdn_gated followed by the layer's gated RMS norm with z [T, Hv, Dv], its result in `dtype`
    (None: q's): the norm applied by the Gated DeltaNet's output kernel instead of a launch of its own."""
    o = fork_gdn_gated(q, k, v, a, b, a_log, dt_bias, segments)
    return ops.gated_rms_norm(o, z, weight, eps, dtype)


def gather_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """x[rows]: a copy, exact."""
    return x[rows]


def label_head(hidden: torch.Tensor, weight: torch.Tensor, read_labels: torch.Tensor,
               read_nlabels: torch.Tensor) -> torch.Tensor:
    """fp32 logits of each read's labels from its own hidden row (hidden [R, H], row r = read r) [R, L]."""
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    return ops.label_logits(hidden, weight, SimpleNamespace(read_rows=rows, read_labels=read_labels,
                                                            read_nlabels=read_nlabels))


def linear_group(x: torch.Tensor, weights: tuple[torch.Tensor, ...], dtype: torch.dtype | None = None
                 ) -> tuple[torch.Tensor, ...]:
    """x @ W^T for each W of `weights` (projections of one input), each in `dtype` (default x's): one
    launch, each output its own tensor."""
    return tuple(ops.linear(x, w, dtype) for w in weights)


def silu_mul(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The SwiGLU product silu(a) * b in `dtype` (default a's: fp32 projections, a bf16 GEMM operand)."""
    out = F.silu(a) * b
    return out if dtype is None else out.to(dtype)


def linear_silu_mul(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                    dtype: torch.dtype | None = None) -> torch.Tensor:
    """The SwiGLU product silu(x @ Wg^T) * (x @ Wu^T) in x's dtype, the projections in `dtype` (default
    x's), in one launch (the product in the GEMM's epilogue)."""
    return silu_mul(ops.linear(x, w_gate, dtype), ops.linear(x, w_up, dtype), x.dtype)


def add_rms_norm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float,
                 dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add and the norm of its sum: (x + y, rms_norm(x + y) in `dtype`, default the sum's)."""
    s = x + y
    return s, ops.rms_norm(s, weight, eps, dtype)


def rms_norm_f32(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """rms_norm of x cast to fp32 (the final norm: E4)."""
    return ops.rms_norm(x.float(), weight, eps)


# ---- the table --------------------------------------------------------------------------------------------


def meta_like(x: torch.Tensor, dtype: torch.dtype | None = None, shape: tuple[int, ...] | None = None
          ) -> torch.Tensor:
    """An empty meta tensor shaped and typed like x unless told otherwise."""
    return torch.empty(x.shape if shape is None else shape, dtype=dtype or x.dtype, device="meta")


F32 = torch.float32
GEMM, POINTWISE = "codegen/gemm.py", "codegen/pointwise.py"
LOWER_FORKS = "passes/lower_forks.py"
OPS: tuple[Op, ...] = (
    Op(ops.embed, MODEL, lambda ids, w, dtype=None: meta_like(w, dtype, (ids.shape[0], w.shape[1])),
       POINTWISE),
    Op(ops.linear, MODEL, lambda x, w, dtype=None: meta_like(x, dtype, (x.shape[0], w.shape[0])), GEMM),
    Op(ops.rms_norm, MODEL, lambda x, w, eps, dtype=None: meta_like(x, dtype), POINTWISE),
    Op(ops.gated_rms_norm, MODEL, lambda x, z, w, eps, dtype=None: meta_like(x, dtype), POINTWISE),
    Op(ops.gdn_decay, MODEL, lambda a, *_: meta_like(a, F32), POINTWISE),
    Op(ops.gdn_beta, MODEL, lambda b: meta_like(b, F32), POINTWISE),
    Op(ops.rotary, MODEL, lambda x, pos, inv: meta_like(x), POINTWISE),
    Op(ops.fork_conv, MODEL, None, LOWER_FORKS, reads_meta=True),
    Op(ops.fork_attention, MODEL, None, LOWER_FORKS, reads_meta=True),
    Op(ops.fork_gdn, MODEL, None, LOWER_FORKS, reads_meta=True),
    Op(ops.label_logits, MODEL, None, "passes/label_head.py", reads_meta=True),
    Op(fork_conv_static, GRAPH, lambda x, w, prev, dtype=None: meta_like(x, dtype), "codegen/conv.py"),
    Op(fork_attention_static, GRAPH, lambda q, k, v, s: meta_like(q), "passes/fuse_pointwise.py"),
    Op(fork_attention_gated, GRAPH,
       lambda q, k, v, gate, s: meta_like(q, shape=(q.shape[0], q.shape[1] * q.shape[2])),
       "codegen/attention.py"),
    Op(fork_gdn_static, GRAPH, lambda q, k, v, g, beta, s: meta_like(v, q.dtype), "codegen/gdn.py"),
    Op(fork_gdn_gated, GRAPH, lambda q, k, v, a, b, a_log, dt_bias, s: meta_like(v, q.dtype),
       "codegen/gdn.py"),
    Op(fork_gdn_normed, GRAPH,
       lambda q, k, v, a, b, a_log, dt_bias, z, w, eps, dtype, s: meta_like(v, dtype or q.dtype),
       "codegen/gdn.py"),
    Op(gather_rows, GRAPH, lambda x, rows: meta_like(x, shape=(rows.shape[0], *x.shape[1:])), POINTWISE),
    Op(label_head, GRAPH, lambda h, w, labels, n: meta_like(h, F32, tuple(labels.shape)), POINTWISE),
    Op(linear_group, GRAPH,
       lambda x, ws, dtype=None: tuple(meta_like(x, dtype, (x.shape[0], w.shape[0])) for w in ws), GEMM),
    Op(linear_silu_mul, GRAPH, lambda x, wg, wu, dtype=None: meta_like(x, shape=(x.shape[0], wg.shape[0])),
       GEMM),
    Op(silu_mul, GRAPH, lambda a, b, dtype=None: meta_like(a, dtype), POINTWISE),
    Op(add_rms_norm, GRAPH, lambda x, y, w, eps, dtype=None: (meta_like(x), meta_like(x, dtype)), POINTWISE),
    Op(rms_norm_f32, GRAPH, lambda x, w, eps: meta_like(x, F32), POINTWISE),
    # plain torch calls of the traced model: meta tensors shape them, the recorder still emits a kernel
    Op(operator.add, TORCH, None, POINTWISE),
)
BY_NAME: dict[str, Op] = {op.name: op for op in OPS}
BY_FN: dict[Callable[..., Any], Op] = {op.fn: op for op in OPS}
MODEL_OPS = tuple(op for op in OPS if op.stage == MODEL)
GRAPH_OPS = tuple(op for op in OPS if op.stage == GRAPH)
META_OPS = frozenset(op.name for op in OPS if op.reads_meta)  # what no lowered graph may call

for _op in GRAPH_OPS:  # leaves if code of this module is ever traced, as in the graphs the passes build
    torch.fx.wrap(_op.name)
