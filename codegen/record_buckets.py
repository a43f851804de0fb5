"""record_buckets: program IR -> recordings, each bucket's launch sequence of the lowered model graph.

Consumes the program IR and, from the context, the target and the model graph GRAPH_PIPELINE lowered
(ctx.graph); produces codegen/levels.Recordings with one Recording per bucket of every tree, recorded by
codegen/recording.record. A cpu target records nothing: its artifact runs the graph on the reference
executor. A recording with a step no emitter knows is refused here, naming its tree, bucket and ops: the
runtime could not run it.
"""

from __future__ import annotations

from flidec.codegen import levels
from flidec.codegen.recording import record
from flidec.ir.errors import FlideError
from flidec.ir.program import ProgramIR
from flidec.passes.context import CompileContext
from flidec.passes.manager import register
from flidec.runtime.recording import Recording


@register("record_buckets", level_in="program", level_out="recordings")
def record_buckets(program: ProgramIR, ctx: CompileContext) -> levels.Recordings:
    if ctx.target == "cpu":
        return levels.Recordings(program, {})
    if ctx.graph is None:
        raise ValueError(f"record_buckets needs the lowered model graph for {ctx.target}: ctx.graph is None")
    recordings: dict[tuple[str, str], Recording] = {}
    for t in program.trees:
        for plan in t.buckets:
            rec = record(ctx.graph, plan.bucket)
            if rec.missing:
                raise FlideError(f"tree {t.name}, bucket {plan.bucket.name}: no kernel for "
                                 f"{', '.join(rec.missing)}")
            recordings[t.name, plan.bucket.name] = rec
    return levels.Recordings(program, recordings)
