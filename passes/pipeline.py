"""The compile pipeline, as literal lists of pass names, in the order flidec/compile.py runs them.

TREE_PIPELINE turns a Spec into the program IR (ir/program.ProgramIR); GRAPH_PIPELINE lowers the traced
model graph (torch.fx) once for every bucket (GPU targets only); BUILD_PIPELINE's stages take the program
IR, with the lowered graph from the context (passes/context.py), to recordings, compiled kernels and the
written artifact. Importing this module registers the tree and graph passes; the build stages register
from codegen/ (they import Triton, which passes/ never does) when flidec/compile.py imports them.
"""

from __future__ import annotations

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
BUILD_PIPELINE = (
    "record_buckets",  # program -> recordings: each bucket's launches of the lowered graph (none for cpu)
    "compile_kernels",  # recordings -> kernels: every distinct kernel compiled for the target, or cached
    "write_artifact",  # kernels -> artifact: the artifact directory and its manifest
)
