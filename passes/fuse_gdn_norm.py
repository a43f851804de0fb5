"""Gated DeltaNet norm fusion: the layer's gated RMS norm runs in the Gated DeltaNet's output kernel.

Consumes a lowered, fused model graph (fuse_pointwise: the Gated DeltaNet is `fork_gdn_gated`); produces it
with each gated RMS norm that is its Gated DeltaNet's only user fused into one `fork_gdn_normed`: in Qwen3.5
every linear-attention layer's norm launch, and o's round trip through memory, go away. The output kernel
rounds o to q's dtype as the unfused kernel would store it (fp32 activations: not at all) and computes the
norm with gated_rms_norm_kernel's own functions (codegen/pointwise.sum_squares, gated_norm), so its outputs
are torch.equal to the two launches'; the reference body is the unfused composition.
"""

from __future__ import annotations

import torch
import torch.fx

from flidec.ir.errors import FlideError
from flidec.passes.context import CompileContext
from flidec.passes.graph import copy_module, finish, is_lowered, op_name
from flidec.passes.manager import register
from flidec.runtime.reference.op_table import fork_gdn_normed


@register("fuse_gdn_norm", level_in="fx", level_out="fx")
def fuse_gdn_norm(gm: torch.fx.GraphModule, ctx: CompileContext | None = None) -> torch.fx.GraphModule:
    if not is_lowered(gm):
        raise FlideError("fuse_gdn_norm needs a lowered graph (run lower_forks first)")
    gm = copy_module(gm)
    g = gm.graph
    for n in list(g.nodes):
        _fuse(g, n)
    return finish(gm)


def _fuse(g: torch.fx.Graph, n: torch.fx.Node) -> None:
    """`gated_rms_norm(fork_gdn_gated(q, k, v, a, b, A_log, dt_bias, s), z, w, eps[, dtype])`, the norm the
    Gated DeltaNet's only user -> `fork_gdn_normed(q, k, v, a, b, A_log, dt_bias, z, w, eps, dtype, s)` at
    the norm's place (z and w are defined by then)."""
    if op_name(n) != "gated_rms_norm" or n.kwargs or len(n.args) not in (4, 5):
        return
    gdn, z, weight, eps, dtype = (*n.args, None)[:5]
    if not (isinstance(gdn, torch.fx.Node) and op_name(gdn) == "fork_gdn_gated" and len(gdn.users) == 1
            and not gdn.kwargs and isinstance(z, torch.fx.Node) and isinstance(weight, torch.fx.Node)
            and isinstance(eps, float)):
        return
    q, k, v, a, b, a_log, dt_bias, segments = gdn.args
    with g.inserting_before(n):
        fused = g.call_function(fork_gdn_normed, (q, k, v, a, b, a_log, dt_bias, z, weight, eps, dtype,
                                                  segments))
    n.replace_all_uses_with(fused)
    g.erase_node(n)
    g.erase_node(gdn)
