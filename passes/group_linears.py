"""Projection grouping: the linears that read one input run as one launch.

Consumes a lowered, fused model graph (fuse_pointwise: the SwiGLU product is `silu_mul`); produces it with
each MLP's gate, up and SwiGLU product as one `linear_silu_mul` and every other set of projections of one
input (a Gated DeltaNet layer's qkv, z, b and a; attention's q, k and v) as one `linear_group`, so a pass
takes far fewer launches and the narrow projections b and a stop costing a launch each (docs/DESIGN.md).
The kernels compute each projection's tiles exactly as a launch of its own would (same tiles, K from 0
upward, no split-K), so the outputs are torch.equal; the reference bodies are the unfused ops.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from flidec.ir.errors import FlideError
from flidec.passes.context import CompileContext
from flidec.passes.graph import copy_module, finish, is_lowered, op_name
from flidec.passes.manager import register
from flidec.runtime.reference.op_table import linear_group, linear_silu_mul

MAX_GROUP = 4  # the members codegen/gemm.gemm_group_kernel takes


@register("group_linears", level_in="fx", level_out="fx")
def group_linears(gm: torch.fx.GraphModule, ctx: CompileContext | None = None) -> torch.fx.GraphModule:
    """First `_fuse_silu_mul` everywhere, then every other set of two or more `linear(x, W[, dtype])` nodes
    with the same x (a node), parameter weights of one dtype and inner size and one result dtype -> in graph
    order, at most MAX_GROUP at a time, `linear_group(x, (W0, W1, ...), dtype)` and a `getitem` per member,
    each member keeping its own output tensor (codegen/gemm.gemm_group_kernel)."""
    if not is_lowered(gm):
        raise FlideError("group_linears needs a lowered graph (run lower_forks first)")
    gm = copy_module(gm)
    g = gm.graph
    params = dict(gm.named_parameters())
    for n in list(g.nodes):
        _fuse_silu_mul(g, n, params)
    by_input: dict[tuple[torch.fx.Node, torch.dtype, int, torch.dtype | None], list[torch.fx.Node]] = {}
    for n in g.nodes:
        if (p := _projection(n, params)) is not None:
            by_input.setdefault((n.args[0], p.dtype, p.shape[1], _out_dtype(n)), []).append(n)
    for members in by_input.values():
        for i in range(0, len(members), MAX_GROUP):
            if len(part := members[i : i + MAX_GROUP]) > 1:
                _group(g, part)
    return finish(gm)


def _out_dtype(n: torch.fx.Node) -> torch.dtype | None:
    """The dtype `linear(x, W, dtype)` asks for (None: x's)."""
    return n.args[2] if len(n.args) > 2 else n.kwargs.get("dtype")


def _projection(n: object, params: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """The weight of `linear(x, W)` with x a node and W a parameter (a get_attr node), else None."""
    if not isinstance(n, torch.fx.Node) or op_name(n) != "linear" or not isinstance(n.args[0], torch.fx.Node):
        return None
    w = n.args[1]
    return params.get(str(w.target)) if isinstance(w, torch.fx.Node) and w.op == "get_attr" else None


def _fuse_silu_mul(g: torch.fx.Graph, n: torch.fx.Node, params: dict[str, torch.Tensor]) -> None:
    """`silu_mul(linear(x, Wg[, P]), linear(x, Wu[, P])[, D])`, each linear used only there, the weights
    alike and the product in the weights' dtype D -> `linear_silu_mul(x, Wg, Wu, P)`: both projections and
    the product in one launch, which writes the product only (codegen/gemm.gemm_silu_mul_kernel); its
    epilogue reads each projection as stored in P (rounded to the model dtype first without P, unrounded in
    fp32 with it), so the product's bits do not change."""
    if op_name(n) != "silu_mul":
        return
    gate, up, product = (*n.args, None)[:3]
    pg, pu = _projection(gate, params), _projection(up, params)
    if pg is None or pu is None or len(gate.users) != 1 or len(up.users) != 1:
        return
    x, w_gate, x_up, w_up = gate.args[0], gate.args[1], up.args[0], up.args[1]
    dtype = _out_dtype(gate)
    if (x is not x_up or pg.shape != pu.shape or pg.dtype != pu.dtype or pg.stride() != pu.stride()
            or _out_dtype(up) != dtype or product not in (None, pg.dtype)
            or (product is None and dtype not in (None, pg.dtype))):
        return  # the fused launch writes the weights' dtype
    with g.inserting_before(n):
        n.replace_all_uses_with(g.call_function(linear_silu_mul, (x, w_gate, w_up, dtype)))
    for dead in (n, gate, up):
        g.erase_node(dead)


def _group(g: torch.fx.Graph, members: list[torch.fx.Node]) -> None:
    """One launch at the first member's place; the later members' weights (get_attr nodes, which read no
    other node) move up to it."""
    first = members[0]
    weights = tuple(m.args[1] for m in members)
    for w in weights:
        first.prepend(w)
    with g.inserting_before(first):
        group = g.call_function(linear_group, (first.args[0], weights, _out_dtype(first)))
    for k, m in enumerate(members):
        with g.inserting_before(m):
            m.replace_all_uses_with(g.call_function(operator.getitem, (group, k)))
        g.erase_node(m)
