"""Pointwise fusion: norms, gates, SiLU products and residual adds merged into single kernels' ops.

Consumes a lowered model graph (lower_forks, so attention is fork_attention_static); produces the graph with
RULES applied in turn, each wherever its pattern matches: the SwiGLU product (and its cast to the down
projection's operand dtype), the attention output gate, the
final fp32 norm, residual add + norm, and the Gated DeltaNet's gates each become one fused op. Each fused
op's reference body is the unfused composition, so the reference executor's answers are torch.equal; their
kernels round once where the unfused ops rounded between steps, which moves bf16 results within TOLERANCE
(fp32 too, by reassociation of the sigmoid), never more.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from flidec.ir.errors import FlideError
from flidec.passes.context import CompileContext
from flidec.passes.graph import copy_module, finish, is_lowered, op_name
from flidec.passes.manager import register
from flidec.runtime.reference.op_table import (
    add_rms_norm,
    fork_attention_gated,
    fork_gdn_gated,
    rms_norm_f32,
    silu_mul,
)


def _single_use(n: object, name: str) -> bool:
    return isinstance(n, torch.fx.Node) and op_name(n) == name and len(n.users) == 1


def _fuse_silu_mul(g: torch.fx.Graph, n: torch.fx.Node) -> bool:
    """`F.silu(a) * b` -> `silu_mul(a, b)` (the SwiGLU product)."""
    if op_name(n) != "mul":
        return False
    a, b = n.args
    if not _single_use(a, "silu") or a.kwargs.get("inplace"):
        return False
    with g.inserting_before(n):
        n.replace_all_uses_with(g.call_function(silu_mul, (a.args[0], b)))
    g.erase_node(n)
    g.erase_node(a)
    return True


def _fuse_cast(g: torch.fx.Graph, n: torch.fx.Node) -> bool:
    """`silu_mul(a, b).to(dtype)` -> `silu_mul(a, b, dtype)`: fp32 projections' product rounded once, to the
    GEMM operand it is."""
    if op_name(n) != "to" or n.kwargs or len(n.args) != 2 or not isinstance(n.args[1], torch.dtype):
        return False
    product, dtype = n.args
    if not _single_use(product, "silu_mul") or len(product.args) != 2:
        return False
    with g.inserting_before(n):
        n.replace_all_uses_with(g.call_function(silu_mul, (*product.args, dtype)))
    g.erase_node(n)
    g.erase_node(product)
    return True


def _fuse_gate(g: torch.fx.Graph, n: torch.fx.Node) -> bool:
    """`reshape(fork_attention_static(q, k, v, s)) * sigmoid(reshape(gate))` -> `fork_attention_gated(q, k,
    v, gate, s)`: the output gate applied inside the attention kernel, reading the gate through its view of
    the q projection (no copy of the gate)."""
    if op_name(n) != "mul":
        return False
    o, s = n.args
    if not (_single_use(o, "reshape") and _single_use(s, "sigmoid") and _single_use(s.args[0], "reshape")
            and _single_use(o.args[0], "fork_attention_static")):
        return False
    q, k, v, segments = o.args[0].args
    gate = s.args[0].args[0]
    with g.inserting_before(n):
        n.replace_all_uses_with(g.call_function(fork_attention_gated, (q, k, v, gate, segments)))
    for dead in (n, o, o.args[0], s, s.args[0]):
        g.erase_node(dead)
    return True


def _fuse_add_norm(g: torch.fx.Graph, n: torch.fx.Node) -> bool:
    """`rms_norm(x + y)` where the sum also feeds the residual stream -> `add_rms_norm(x, y)` -> (sum,
    normed)."""
    if op_name(n) != "rms_norm" or op_name(n.args[0]) != "add" or len(n.args[0].users) < 2:
        return False
    total = n.args[0]
    x, y = total.args
    if not (isinstance(x, torch.fx.Node) and isinstance(y, torch.fx.Node)):
        return False
    order = {node: i for i, node in enumerate(g.nodes)}
    if any(order[u] < order[n] for u in total.users):  # the fused op sits at the norm: no user before it
        return False
    with g.inserting_before(n):
        both = g.call_function(add_rms_norm, (x, y, *n.args[1:]))
        new_total = g.call_function(operator.getitem, (both, 0))
        normed = g.call_function(operator.getitem, (both, 1))
    n.replace_all_uses_with(normed)
    g.erase_node(n)
    total.replace_all_uses_with(new_total)
    g.erase_node(total)
    return True


def _fuse_norm_f32(g: torch.fx.Graph, n: torch.fx.Node) -> bool:
    """`rms_norm(x.float())` -> `rms_norm_f32(x)` (the final norm reads bf16 and computes in fp32)."""
    if op_name(n) != "rms_norm" or not _single_use(n.args[0], "float"):
        return False
    cast = n.args[0]
    with g.inserting_before(n):
        n.replace_all_uses_with(g.call_function(rms_norm_f32, (cast.args[0], *n.args[1:])))
    g.erase_node(n)
    g.erase_node(cast)
    return True


def _fuse_gdn_gates(g: torch.fx.Graph, n: torch.fx.Node) -> bool:
    """`fork_gdn_static(q, k, v, gdn_decay(a, A_log, dt_bias), gdn_beta(b), s)` -> `fork_gdn_gated(q, k, v,
    a, b, A_log, dt_bias, s)`: the Gated DeltaNet prep kernel computes its gates from the raw projections."""
    if op_name(n) != "fork_gdn_static":
        return False
    q, k, v, decay, beta, segments = n.args
    if not (_single_use(decay, "gdn_decay") and _single_use(beta, "gdn_beta")):
        return False
    a, a_log, dt_bias = decay.args
    with g.inserting_before(n):
        n.replace_all_uses_with(g.call_function(fork_gdn_gated, (q, k, v, a, beta.args[0], a_log, dt_bias,
                                                                 segments)))
    for dead in (n, decay, beta):
        g.erase_node(dead)
    return True


RULES = (_fuse_silu_mul, _fuse_cast, _fuse_gate, _fuse_norm_f32, _fuse_add_norm, _fuse_gdn_gates)


@register("fuse_pointwise", level_in="fx", level_out="fx")
def fuse_pointwise(gm: torch.fx.GraphModule, ctx: CompileContext | None = None) -> torch.fx.GraphModule:
    if not is_lowered(gm):
        raise FlideError("fuse_pointwise needs a lowered graph (run lower_forks first)")
    gm = copy_module(gm)
    for rule in RULES:  # one rule at a time, in graph order: the result does not depend on dict orders
        for n in list(gm.graph.nodes):
            if n in set(gm.graph.nodes) and n.op != "output":  # an earlier match may have erased it
                rule(gm.graph, n)
    return finish(gm)
