"""Read trimming: the last layer's MLP, the final norm and the head run only at the read rows.

Consumes a model graph after label_head (its head starts with `gather_rows(hidden, read_rows)`); produces
the graph with that gather moved up to the residual stream entering the last layer's MLP (the input of the
last `post_attention_layernorm`): every op after it (norm, MLP, residual add, final fp32 norm) sees
[R, ...] rows instead of [T, ...]. Valid because those ops are row-wise and batch-invariant (fixed row
tiles: a row's bits depend on that row only), so the answers are torch.equal; the MLP's work drops from T
rows to R. Works before or after lower_forks.
"""

from __future__ import annotations

import re

import torch.fx

from flidec.ir.errors import FlideError
from flidec.passes.context import CompileContext
from flidec.passes.graph import copy_module, finish, op_name
from flidec.passes.manager import register
from flidec.runtime.reference.op_table import gather_rows

_POST_NORM = re.compile(r"layers\.(\d+)\.post_attention_layernorm\.weight")


@register("trim_reads", level_in="fx", level_out="fx")
def trim_reads(gm: torch.fx.GraphModule, ctx: CompileContext | None = None) -> torch.fx.GraphModule:
    gm = copy_module(gm)
    g = gm.graph
    heads = [n for n in g.nodes if op_name(n) == "label_head"]
    if len(heads) != 1 or op_name(heads[0].args[0]) != "gather_rows":
        raise FlideError("trim_reads needs the label head's read gather (run label_head first)")
    head_gather = heads[0].args[0]
    norms = [(int(m.group(1)), n) for n in g.nodes if op_name(n) == "rms_norm"
             and n.args[1].op == "get_attr" and (m := _POST_NORM.fullmatch(str(n.args[1].target)))]
    if not norms:
        raise FlideError("trim_reads found no post_attention_layernorm in the graph")
    residual = max(norms, key=lambda t: t[0])[1].args[0]
    with g.inserting_after(residual):
        trimmed = g.call_function(gather_rows, (residual, head_gather.args[1]))
    trimmed.prepend(head_gather.args[1])  # the read rows are needed earlier now (they read inputs only)
    residual.replace_all_uses_with(trimmed, delete_user_cb=lambda user: user is not trimmed)
    head_gather.replace_all_uses_with(head_gather.args[0])
    g.erase_node(head_gather)
    return finish(gm)
