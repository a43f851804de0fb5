"""The model-graph IR level ("fx"): torch.fx GraphModules of the reference Qwen3.5 and the passes' helpers.

Consumes a GraphModule traced from Qwen35 (`forward(tokens, meta)`); the graph passes rewrite it with the
GRAPH ops of runtime/reference/op_table.py, leaf functions whose bodies are their plain-torch references, so
the reference executor runs every stage. After lower_forks the graph reads no StreamMeta object: it takes
`forward(tokens, tables)`, `tables` mapping the static meta buffer names (META_BUFFERS) to tensors sized by
the bucket (`static_tables` fills them from a stream's meta). Registers the level with the pass manager: its
verifier is Graph.lint plus "no lowered graph calls a meta-reading op"; its printer is `render`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.fx

from flidec.ir.program import Bucket
from flidec.passes.manager import LEVELS, register_level
from flidec.runtime.meta import StreamMeta
from flidec.runtime.reference.op_table import META_OPS
from flidec.runtime.tables import static_tables

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
            if op_name(n) in META_OPS:
                problems.append(f"%{n.name}: {op_name(n)} reads a StreamMeta in a lowered graph")
    return problems


if "fx" not in LEVELS:
    register_level("fx", verify=verify, render=render)

