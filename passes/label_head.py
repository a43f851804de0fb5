"""Label head: the answer head computes fp32 logits of each read's label rows only, from the read's row.

Consumes the traced model graph (`label_logits(hidden, lm_head, meta)` at its end); produces the graph with
that call replaced by `gather_rows(hidden, meta.read_rows)` then `label_head(rows, lm_head, read_labels,
read_nlabels)`: the head sees [R, H] hidden rows (one per read, in read order) and multiplies each by its
own label rows of the output embedding in fp32 (E4), never the whole vocabulary. The explicit gather is
what trim_reads hoists into the last layer. Numerics unchanged: the answers are torch.equal.
"""

from __future__ import annotations

import torch.fx

from flidec.ir.errors import FlideError
from flidec.passes.context import CompileContext
from flidec.passes.graph import copy_module, finish, op_name
from flidec.passes.manager import register
from flidec.runtime.reference.op_table import gather_rows
from flidec.runtime.reference.op_table import label_head as label_head_op


@register("label_head", level_in="fx", level_out="fx")
def label_head(gm: torch.fx.GraphModule, ctx: CompileContext | None = None) -> torch.fx.GraphModule:
    gm = copy_module(gm)
    heads = [n for n in gm.graph.nodes if op_name(n) == "label_logits"]
    if len(heads) != 1:
        raise FlideError(f"expected one label_logits call in the model graph, found {len(heads)}")
    (head,) = heads
    hidden, weight, meta = head.args
    with gm.graph.inserting_before(head):
        fields = {f: gm.graph.call_function(getattr, (meta, f))
                  for f in ("read_rows", "read_labels", "read_nlabels")}
        rows = gm.graph.call_function(gather_rows, (hidden, fields["read_rows"]))
        new = gm.graph.call_function(label_head_op,
                                     (rows, weight, fields["read_labels"], fields["read_nlabels"]))
    head.replace_all_uses_with(new)
    gm.graph.erase_node(head)
    return finish(gm)
