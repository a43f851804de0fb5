"""bucket_topologies and layout: golden program text, round trip, hints honoured, the stated padding held
over a profile, every instance within the bounds in some bucket or flagged eager, level-contiguous layouts,
and broken output rejected naming the pass."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from flidec.ir.program import ROW_ALIGN
from flidec.ir.program_printer import parse_program, print_program
from flidec.ir.template import Sizes, segments_preorder, worst_sizes
from flidec.passes.manager import PassError, run
from flidec.passes.pipeline import TREE_PIPELINE
from flidec.runtime.templates import bind_template

TO_TEMPLATE = ["verify", "fold_prompt_text", "dedup_prefixes"]


def test_small_spec_golden(small_spec, ctx, golden):
    golden("small.program.ir", print_program(run(small_spec, list(TREE_PIPELINE), ctx).ir))


@pytest.mark.parametrize("name", ["classifier", "lookahead", "planner", "systemone", "tool_router"])
def test_round_trip_and_ladder_shape(name, example, ctx):
    spec = example(name)
    program = run(spec, list(TREE_PIPELINE), ctx).ir
    assert parse_program(print_program(program)) == program
    (t,) = program.trees
    rows = [p.bucket.rows for p in t.buckets]
    assert all(r % ROW_ALIGN == 0 for r in rows) and rows == sorted(rows)
    if spec.trees[0].buckets:  # hints are the ladder
        assert t.basis == "hints" and rows == list(spec.trees[0].buckets)
    else:
        assert t.basis == "bounds" and rows[-1] == min(-(-t.worst.rows // 64) * 64, ctx.max_rows)
    for p in t.buckets:
        assert 0 <= p.padding < 1 and p.layout is not None


def test_profile_ladder_holds_the_stated_padding(example, ctx):
    templates = run(example("classifier"), TO_TEMPLATE, ctx).ir
    worst = worst_sizes(templates.trees[0])
    rng = random.Random(0)
    profile = [Sizes(rng.randint(300, 3000), 8, 2, 6, 5) for _ in range(200)]
    program = run(templates, ["bucket_topologies"], replace(ctx, profile={"ticket": profile})).ir
    (t,) = program.trees
    assert t.basis == "profile" and 2 <= len(t.buckets) <= 12
    for p in profile:
        b = t.bucket_for(p)
        assert b is not None and (b.rows - p.rows) / b.rows <= 0.25
    assert max(pl.padding for pl in t.buckets) <= 0.25
    over = replace(profile[0], rows=t.buckets[-1].bucket.rows + 1)
    assert over.rows <= worst.rows and t.bucket_for(over) is None  # beyond the ladder: the eager path


def test_every_instance_within_bounds_fits_or_is_flagged(example, ctx, instances):
    for name in ("planner", "tool_router", "systemone"):
        spec = example(name)
        program = run(spec, list(TREE_PIPELINE), ctx).ir
        (t,) = program.trees
        for inst in instances[name]:
            bound = bind_template(spec.trees[0], t.template, [inst], ctx.fmt)
            meta = bound.stream.meta
            need = Sizes(bound.rows_used, len(meta.segments), len(meta.levels), len(meta.reads),
                         max(len(r.labels) for r in meta.reads))
            assert need.rows <= t.worst.rows and need.segments <= t.worst.segments
            b = t.bucket_for(need)
            assert b is not None or need.rows > t.buckets[-1].bucket.rows
            if b is not None:  # rows alone decide: the other dimensions never push an instance out
                assert b == t.bucket_for(Sizes(need.rows, 1, 1, 1, 2))


def test_layout_keeps_levels_contiguous(small_spec, ctx):
    program = run(small_spec, list(TREE_PIPELINE), ctx).ir
    (t,) = program.trees
    levels = [level for _, level in segments_preorder(t.template.root)]
    for p in t.buckets:
        assert [levels[i] for i in p.layout.order] == sorted(levels)
        assert len(p.layout.level_rows) == max(levels) + 1
        assert all(n <= p.bucket.rows for n in p.layout.level_rows)


def test_broken_layout_is_rejected_naming_the_pass(small_spec, ctx, monkeypatch):
    from flidec.passes import layout as mod
    from flidec.passes import manager

    def broken(program, c):  # the last segment first: not level by level
        out = mod.layout(program, c)
        t = out.trees[0]
        p = t.buckets[0]
        bad = replace(p, layout=replace(p.layout, order=p.layout.order[::-1]))
        return replace(out, trees=(replace(t, buckets=(bad, *t.buckets[1:])),))

    monkeypatch.setitem(manager.PASSES, "layout", replace(manager.PASSES["layout"], run=broken))
    with pytest.raises(PassError, match=r"^in pass layout \(after verify, fold_prompt_text, dedup_prefixes, "
                                        r"bucket_topologies\): the program IR verifier rejects its output:\n"
                                        r"  tree small: bucket r128's layout does not keep each level contiguous"):
        run(small_spec, list(TREE_PIPELINE), ctx)


def test_bad_spec_is_rejected_before_the_first_pass(small_spec, ctx):
    bad = replace(small_spec, model="llama")
    with pytest.raises(PassError, match=r"^in pass verify \(the first pass\): the tree IR verifier rejects its "
                                        r"input:\n  small.flide:1:1: error: unknown model family `llama`"):
        run(bad, list(TREE_PIPELINE), ctx)
