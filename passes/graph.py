"""The model-graph IR level ("fx"): torch.fx GraphModules of flidec.models.qwen3_5, and the ops passes put in.

Consumes a GraphModule traced from Qwen35 (`forward(tokens, meta)`); the graph passes (lower_forks,
label_head, trim_reads, fuse_pointwise, group_linears, fuse_gdn_norm) rewrite it with the ops below, each a
torch.fx leaf function whose body is its plain-torch reference, composed from runtime/reference/ops.py, so
the reference executor runs every stage of the pipeline. After lower_forks the graph reads no StreamMeta
object: it takes `forward(tokens, tables)`, `tables` mapping the static meta buffer names (META_BUFFERS) to
tensors sized by the bucket (`static_tables` fills them from a stream's meta). Registers the level with the
pass manager: its verifier is Graph.lint plus "nothing reads the meta object after lowering"; its printer is
`render`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from types import SimpleNamespace

import torch
import torch.fx
import torch.nn.functional as F

from flidec.ir.program import Bucket
from flidec.passes.manager import LEVELS, register_level
from flidec.runtime.meta import Segment, StreamMeta, build_meta
from flidec.runtime.reference import ops
from flidec.runtime.tables import PADDING_LEVEL, static_tables

# ---- the ops passes insert (leaf calls; bodies are the reference) ------------------------------------------


def segments_meta(segments: torch.Tensor, rows: int) -> StreamMeta:
    """The StreamMeta a segments table stands for (padding rows dropped), as the fork ops' oracle sees it."""
    return _segments_meta(tuple(map(tuple, segments.tolist())), rows)


@lru_cache(maxsize=8)  # one stream runs every layer's fork ops on the same table
def _segments_meta(table: tuple[tuple[int, ...], ...], rows: int) -> StreamMeta:
    segs = tuple(Segment(*row) for row in table if row[4] != PADDING_LEVEL)
    return build_meta(segs, (), rows)


def fork_conv_static(x: torch.Tensor, weight: torch.Tensor, conv_prev: torch.Tensor) -> torch.Tensor:
    """ops.fork_conv reading its predecessor table from a static buffer (the only meta it reads)."""
    return ops.fork_conv(x, weight, SimpleNamespace(conv_prev=conv_prev))


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
                    eps: float, segments: torch.Tensor) -> torch.Tensor:
    """fork_gdn_gated followed by the layer's gated RMS norm with z [T, Hv, Dv]: the norm applied by the
    Gated DeltaNet's output kernel instead of a launch of its own."""
    return ops.gated_rms_norm(fork_gdn_gated(q, k, v, a, b, a_log, dt_bias, segments), z, weight, eps)


def gather_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """x[rows]: a copy, exact."""
    return x[rows]


def label_head(hidden: torch.Tensor, weight: torch.Tensor, read_labels: torch.Tensor,
               read_nlabels: torch.Tensor) -> torch.Tensor:
    """fp32 logits of each read's labels from its own hidden row (hidden [R, H], row r = read r) [R, L]."""
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    return ops.label_logits(hidden, weight, SimpleNamespace(read_rows=rows, read_labels=read_labels,
                                                            read_nlabels=read_nlabels))


def linear_group(x: torch.Tensor, weights: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """x @ W^T for each W of `weights` (projections of one input): one launch, each output its own tensor."""
    return tuple(ops.linear(x, w) for w in weights)


def silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def linear_silu_mul(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """The SwiGLU product silu(x @ Wg^T) * (x @ Wu^T) in one launch (the product in the GEMM's epilogue)."""
    return silu_mul(ops.linear(x, w_gate), ops.linear(x, w_up))


def add_rms_norm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual add and the norm of its sum: (x + y, rms_norm(x + y))."""
    s = x + y
    return s, ops.rms_norm(s, weight, eps)


def rms_norm_f32(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """rms_norm of x cast to fp32 (the final norm: E4)."""
    return ops.rms_norm(x.float(), weight, eps)


GRAPH_OPS: tuple[Callable, ...] = (
    fork_conv_static, fork_attention_static, fork_attention_gated, fork_gdn_static, fork_gdn_gated,
    fork_gdn_normed,
    gather_rows, label_head, linear_group, linear_silu_mul, silu_mul, add_rms_norm, rms_norm_f32,
)
for _fn in GRAPH_OPS:
    torch.fx.wrap(_fn.__name__)


# ---- helpers for passes ----------------------------------------------------------------------------------


def op_name(node: torch.fx.Node) -> str:
    """`call_function` target name, `call_method` method name, or '' for other nodes."""
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    return str(node.target) if node.op == "call_method" else ""


def copy_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A new GraphModule sharing gm's parameters but not its graph (passes never mutate their input)."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph, gm.__class__.__name__)


def finish(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    return gm


def placeholder(gm: torch.fx.GraphModule, name: str) -> torch.fx.Node | None:
    return next((n for n in gm.graph.nodes if n.op == "placeholder" and n.target == name), None)


def is_lowered(gm: torch.fx.GraphModule) -> bool:
    return placeholder(gm, "tables") is not None


def run_graph(gm: torch.fx.GraphModule, tokens: torch.Tensor, meta: StreamMeta, bucket: Bucket,
              overrides: Mapping[str, Callable] | None = None) -> torch.Tensor:
    """Run any stage of the pipeline on a stream with the reference executor: the traced graph on
    (tokens, meta), a lowered one on the bucket's static tables (its result is bucket-sized)."""
    from flidec.runtime.reference.executor import ReferenceExecutor

    executor = ReferenceExecutor(gm, overrides)
    with torch.inference_mode():
        if is_lowered(gm):
            tables = static_tables(tokens, meta, bucket)
            return executor.run(tables)
        return executor.run(tokens, meta)


# ---- the level --------------------------------------------------------------------------------------------


def render(gm: torch.fx.GraphModule) -> str:
    """One line per node, `%name = op(args)`, parameters by their dotted names: the `--dump-ir` text."""
    lines = []
    for n in gm.graph.nodes:
        args = ", ".join([_arg(a) for a in n.args] + [f"{k}={_arg(v)}" for k, v in n.kwargs.items()])
        if n.op == "placeholder":
            lines.append(f"%{n.name} = input {n.target}")
        elif n.op == "get_attr":
            lines.append(f"%{n.name} = param {n.target}")
        elif n.op == "output":
            lines.append(f"return {args}")
        elif n.op == "call_method":
            lines.append(f"%{n.name} = .{n.target}({args})")
        else:
            lines.append(f"%{n.name} = {op_name(n)}({args})")
    return "\n".join(lines) + "\n"


def _arg(a: object) -> str:
    if isinstance(a, torch.fx.Node):
        return f"%{a.name}"
    if isinstance(a, tuple):
        return "(" + ", ".join(_arg(x) for x in a) + ("," if len(a) == 1 else "") + ")"
    if isinstance(a, list):
        return "[" + ", ".join(_arg(x) for x in a) + "]"
    if isinstance(a, slice):
        parts = ["" if v is None else str(v) for v in (a.start, a.stop)]
        return ":".join(parts) + (f":{a.step}" if a.step is not None else "")
    if a is Ellipsis:
        return "..."
    return repr(a)


def verify(gm: torch.fx.GraphModule) -> list[str]:
    try:
        gm.graph.lint()
    except (RuntimeError, AssertionError) as e:  # lint names the node in its message
        return [f"graph lint: {e}"]
    problems = []
    meta = placeholder(gm, "meta")
    if meta is not None and is_lowered(gm):
        problems.append("the graph takes both `meta` and `tables`")
    if is_lowered(gm):
        for n in gm.graph.nodes:
            if op_name(n) in ("fork_conv", "fork_attention", "fork_gdn", "label_logits"):
                problems.append(f"%{n.name}: {op_name(n)} reads a StreamMeta in a lowered graph")
    return problems


if "fx" not in LEVELS:
    register_level("fx", verify=verify, render=render)

