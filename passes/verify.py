"""verify: tree IR -> tree IR, unchanged when the spec can be compiled for the context's format.

Consumes a Spec; raises SpecError with every diagnostic of flidec.ir.verify, then, given a format
(ctx.fmt), every ask whose labels that format's tokenizer cannot read as single distinct tokens. Produces
the same Spec: the first pass of the pipeline, so later passes may assume a well-formed tree.
"""

from __future__ import annotations

from flidec.ir.tree import Spec
from flidec.ir.verify import check
from flidec.passes import levels  # noqa: F401  (registers the tree level this pass reads and writes)
from flidec.passes.context import CompileContext
from flidec.passes.manager import register


@register("verify", level_in="tree", level_out="tree")
def verify(spec: Spec, ctx: CompileContext) -> Spec:
    check(spec)
    if ctx.fmt is not None:
        for tree in spec.trees:
            ctx.fmt.check_tree(tree)
    return spec
