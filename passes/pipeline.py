"""The compile pipeline, as literal lists of pass names, and the context its passes read.

Consumes a verified Spec and a CompileContext; `compile_tree_passes` runs TREE_PIPELINE through the pass
manager and returns the program IR (ir/program.ProgramIR). GRAPH_PIPELINE lowers the traced model graph
(torch.fx) once for every bucket. Importing this module registers every pass either list names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from flidec.ir.program import ProgramIR
from flidec.ir.template import Sizes
from flidec.ir.tree import Spec
from flidec.passes import (  # noqa: F401 (registers them)
    bucket_topologies,
    dedup_prefixes,
    fold_prompt_text,
    fuse_gdn_norm,
    fuse_pointwise,
    group_linears,
    label_head,
    layout,
    levels,
    lower_forks,
    trim_reads,
    verify,
)
from flidec.passes.manager import Options, run
from flidec.runtime.next_token import NextTokenFormat

TREE_PIPELINE = (
    "verify",  # tree -> tree: the spec verifier, then the format's label check
    "fold_prompt_text",  # tree -> template: constant pieces pre-tokenized, slots bounded
    "dedup_prefixes",  # template -> template: sibling segments' shared constant prefixes computed once
    "bucket_topologies",  # template -> program: a bucket ladder per tree, with its padding
    "layout",  # program -> program: each bucket's level-contiguous stream order
)
GRAPH_PIPELINE = (
    "label_head",  # fx -> fx: the label logits of the read rows replace the vocabulary head
    "lower_forks",  # fx -> fx: fork ops read the bucket's static meta tables, not a StreamMeta
    "trim_reads",  # fx -> fx: the last MLP, final norm and head run at the read rows only
    "fuse_pointwise",  # fx -> fx: norms, gates, SiLU products and residual adds fused
    "group_linears",  # fx -> fx: projections of one input in one launch
    "fuse_gdn_norm",  # fx -> fx: the Gated DeltaNet's gated RMS norm in its output kernel
)


@dataclass(frozen=True)
class CompileContext:
    """What the tree passes read besides the IR: the format (with the model's tokenizer), a profile of
    instance sizes per tree name, the stated worst-case padding and the largest bucket without hints."""

    fmt: NextTokenFormat | None = None
    profile: Mapping[str, Sequence[Sizes]] = field(default_factory=dict)
    padding: float = bucket_topologies.PADDING
    max_rows: int = bucket_topologies.MAX_ROWS


def compile_tree_passes(spec: Spec, ctx: CompileContext, options: Options | None = None) -> ProgramIR:
    return run(spec, TREE_PIPELINE, ctx, level="tree", options=options or Options()).ir
