"""write_artifact: kernels -> artifact, the last stage: the artifact directory written and its manifest.

Consumes codegen/levels.Kernels (the program IR, the recordings, the compiled kernels) and, from the
context, the spec, its source, the model directory, the target, whether to bundle the weights and the
directory to write (ctx.out, the compile's staging directory); produces codegen/levels.Artifact. The bytes
are codegen/artifact.write_artifact's: the same inputs give byte-identical files.
"""

from __future__ import annotations

from flidec.codegen import artifact, levels
from flidec.passes.context import CompileContext
from flidec.passes.manager import register


@register("write_artifact", level_in="kernels", level_out="artifact")
def write_artifact(ks: levels.Kernels, ctx: CompileContext) -> levels.Artifact:
    if ctx.spec is None or ctx.model_dir is None or ctx.out is None:
        raise ValueError("write_artifact needs the context's spec, model_dir and out")
    rs = ks.recordings
    manifest = artifact.write_artifact(
        artifact.ArtifactInputs(ctx.spec, ctx.spec_source, rs.program, ctx.model_dir, ctx.target,
                                rs.by_bucket, ks.by_key, ctx.bundle_weights, ctx.activations, ctx.decision,
                                ctx.head), ctx.out)
    return levels.Artifact(ctx.out, manifest, ks.compiled)
