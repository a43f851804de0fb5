"""layout: program IR -> program IR, each bucket's stream layout recorded.

Consumes ir/program.ProgramIR; produces it with a Layout on every bucket: the template's segments in stream
order, level by level (pre-order within a level), and the most rows each level can take in the bucket
(its worst case within the declared bounds, at most the bucket's rows). Each tree level's rows are then
contiguous and come after its parents' level: the recurrent (Gated DeltaNet, conv) layers run one level's
segments as one batch from their parents' final states. runtime/binder.py packs instances in this order.
"""

from __future__ import annotations

from dataclasses import replace

from flidec.ir.program import Layout, ProgramIR
from flidec.ir.template import TreeTemplate, level_rows, segments_preorder
from flidec.passes.context import CompileContext
from flidec.passes.manager import register


@register("layout", level_in="program", level_out="program")
def layout(program: ProgramIR, ctx: CompileContext) -> ProgramIR:
    trees = []
    for t in program.trees:
        order, worst = stream_order(t.template), level_rows(t.template)
        plans = tuple(replace(p, layout=Layout(order, tuple(min(n, p.bucket.rows) for n in worst)))
                      for p in t.buckets)
        trees.append(replace(t, buckets=plans))
    return replace(program, trees=tuple(trees))


def stream_order(t: TreeTemplate) -> tuple[int, ...]:
    levels = [level for _, level in segments_preorder(t.root)]
    return tuple(sorted(range(len(levels)), key=lambda k: (levels[k], k)))
