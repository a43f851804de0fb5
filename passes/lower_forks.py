"""Fork lowering: the fork ops read the bucket's static meta buffers by name instead of the StreamMeta object.

Consumes a model graph taking `(tokens, meta)` (after label_head, so nothing reads a meta field other than the
buffers below); produces one taking `(tables)`: `tables[name]` for each static buffer of
runtime/tables.meta_buffers (tokens, positions, conv_prev, segments, read_rows, read_labels, read_nlabels),
one node per buffer, read by `fork_conv_static(x, w, conv_prev, dtype)`, `fork_attention_static(q, k, v,
segments)` and `fork_gdn_static(..., segments)`. Those buffer names are what the recording turns into arena
offsets and the binder fills before each replay. Numerics unchanged (the static ops' bodies call the reference
ops on the same structure): answers are torch.equal, on the bucket-padded stream.
"""

from __future__ import annotations

import operator

import torch.fx

from flidec.ir.errors import FlideError
from flidec.passes.context import CompileContext
from flidec.passes.graph import copy_module, finish, op_name, placeholder
from flidec.passes.manager import register
from flidec.runtime.reference.op_table import fork_attention_static, fork_conv_static, fork_gdn_static
from flidec.runtime.tables import META_BUFFERS

# fork op -> (its lowered form, the static buffer that replaces its meta argument)
LOWERED = {
    "fork_conv": (fork_conv_static, "conv_prev"),
    "fork_attention": (fork_attention_static, "segments"),
    "fork_gdn": (fork_gdn_static, "segments"),
}


@register("lower_forks", level_in="fx", level_out="fx")
def lower_forks(gm: torch.fx.GraphModule, ctx: CompileContext | None = None) -> torch.fx.GraphModule:
    gm = copy_module(gm)
    g = gm.graph
    meta, tokens = placeholder(gm, "meta"), placeholder(gm, "tokens")
    if meta is None or tokens is None:
        raise FlideError("lower_forks needs a graph taking (tokens, meta)")
    with g.inserting_before(tokens):
        tables = g.placeholder("tables")
    buffers: dict[str, torch.fx.Node] = {}

    def buffer(name: str) -> torch.fx.Node:
        if name not in buffers:
            with g.inserting_after(list(buffers.values())[-1] if buffers else tables):
                buffers[name] = g.create_node("call_function", operator.getitem, (tables, name),
                                              name=f"meta_{name}")
        return buffers[name]

    tokens.replace_all_uses_with(buffer("tokens"))
    for user in list(meta.users):
        name = op_name(user)
        if name == "getattr" and user.args[1] in META_BUFFERS:
            user.replace_all_uses_with(buffer(user.args[1]))
        elif name in LOWERED:
            fn, field = LOWERED[name]
            if user.kwargs or sum(a is meta for a in user.args) != 1:
                raise FlideError(f"%{user.name}: {name} must take the meta object as one positional "
                                 "argument")
            with g.inserting_before(user):
                new = g.call_function(fn, tuple(buffer(field) if a is meta else a for a in user.args))
            user.replace_all_uses_with(new)
        else:
            raise FlideError(f"%{user.name}: {name or user.op} reads the meta object and has no lowering "
                             "(run label_head first for label_logits)")
        g.erase_node(user)
    g.erase_node(meta)
    g.erase_node(tokens)
    return finish(gm)
