"""Projection grouping: the linears that read one input become one `linear_group` launch.

Consumes a lowered model graph; produces the graph where every set of two or more `linear(x, W)` nodes with
the same x (a node) and parameter weights of one dtype and inner size is replaced, in graph order and at
most MAX_GROUP at a time, by `linear_group(x, (W0, W1, ...))` and a `getitem` per member. In Qwen3.5 that
is a Gated DeltaNet layer's qkv, z, b and a projections, an attention layer's q, k and v, and each MLP's
gate and up: 186 GEMM launches a 0.8B pass become 96, and the N = 16 projections b and a stop costing a
launch each. Each member keeps its own output tensor, so no consumer changes.
Numerics: the group's kernel (codegen/gemm.gemm_group_kernel) computes each member's tiles exactly as a
launch of its own would (same tiles, K from 0 upward, no split-K), so the answers are torch.equal, on the
reference executor (the op's body is the members' linears) and on the kernels.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from flidec.ir.errors import FlideError
from flidec.passes.graph import copy_module, finish, is_lowered, linear_group, op_name
from flidec.passes.manager import register

MAX_GROUP = 4  # the members codegen/gemm.gemm_group_kernel takes


@register("group_linears", level_in="fx", level_out="fx")
def group_linears(gm: torch.fx.GraphModule, ctx: object = None) -> torch.fx.GraphModule:
    if not is_lowered(gm):
        raise FlideError("group_linears needs a lowered graph (run lower_forks first)")
    gm = copy_module(gm)
    g = gm.graph
    params = dict(gm.named_parameters())
    by_input: dict[tuple[torch.fx.Node, torch.dtype, int], list[torch.fx.Node]] = {}
    for n in g.nodes:
        x, w = n.args[:2] if op_name(n) == "linear" else (None, None)
        if isinstance(x, torch.fx.Node) and isinstance(w, torch.fx.Node) and w.op == "get_attr" \
                and (p := params.get(str(w.target))) is not None:
            by_input.setdefault((x, p.dtype, p.shape[1]), []).append(n)
    for members in by_input.values():
        for i in range(0, len(members), MAX_GROUP):
            if len(part := members[i : i + MAX_GROUP]) > 1:
                _group(g, part)
    return finish(gm)


def _group(g: torch.fx.Graph, members: list[torch.fx.Node]) -> None:
    """One launch at the first member's place; the later members' weights (get_attr nodes, which read no
    other node) move up to it."""
    first = members[0]
    weights = tuple(m.args[1] for m in members)
    for w in weights:
        first.prepend(w)
    with g.inserting_before(first):
        group = g.call_function(linear_group, (first.args[0], weights))
    for k, m in enumerate(members):
        with g.inserting_before(m):
            m.replace_all_uses_with(g.call_function(operator.getitem, (group, k)))
        g.erase_node(m)
