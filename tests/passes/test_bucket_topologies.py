"""bucket_topologies and layout: golden program text, round trip, hints honoured, the stated padding held
over a profile, every instance within the bounds in some bucket or flagged eager, bucket segments bounded by
the template's least rows per segment (tight; no bound from segments of slots only), level-contiguous
layouts, and broken output rejected naming the pass."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from flidec.ir.program import ROW_ALIGN
from flidec.ir.program_printer import parse_program, print_program
from flidec.ir.template import (
    Const,
    ReadTemplate,
    Repeat,
    SegmentTemplate,
    Sizes,
    Slot,
    Templates,
    TreeTemplate,
    segments_preorder,
    worst_path_rows,
    worst_sizes,
)
from flidec.passes.manager import PassError, run
from flidec.passes.pipeline import TREE_PIPELINE
from flidec.runtime.split import combine
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
    path = -(-worst_path_rows(t.template) // 64) * 64
    assert rows[-1] >= path  # the longest path of one read within the bounds fits the largest bucket
    if spec.trees[0].buckets:  # hints are the ladder, and one bucket more where they stop short of a path
        hints = list(spec.trees[0].buckets)
        assert t.basis == "hints" and rows == hints + ([path] if path > hints[-1] else [])
    else:
        assert t.basis == "bounds"
        assert rows[-1] == max(min(-(-t.worst.rows // 64) * 64, ctx.max_rows), path)
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


def _questions(const: int, lo: int = 1) -> Templates:
    """A root of 2 constant ids and a state slot, then lo..64 question segments: a question slot and `const`
    constant ids (0: the slot alone)."""
    tail = (Const(tuple(range(1, const + 1))),) if const else ()
    question = SegmentTemplate((Slot("question", "q", 50, tail=const), *tail), (ReadTemplate("q", (), 2),))
    root = SegmentTemplate((Const((7, 8)), Slot("state", "doc", 100, head=2)),
                           children=(Repeat("questions", "q", lo, 64, (question,)),))
    return Templates((TreeTemplate("qs", root),))


def test_hints_below_the_longest_path_get_a_bucket_for_it(ctx):
    # root 2 + 100, one question 50 + 9: a read's path is at most 161 rows, the whole tree far more
    templates = _questions(9)
    assert worst_path_rows(templates.trees[0]) == 161
    hinted = Templates((replace(templates.trees[0], buckets=(64, 128)),))
    (t,) = run(hinted, ["bucket_topologies"], ctx).ir.trees
    assert [p.bucket.rows for p in t.buckets] == [64, 128, 192] and t.basis == "hints"
    covering = Templates((replace(templates.trees[0], buckets=(64, 256)),))
    (t,) = run(covering, ["bucket_topologies"], ctx).ir.trees
    assert [p.bucket.rows for p in t.buckets] == [64, 256]  # the hints already hold every path


def test_bucket_segments_are_the_most_an_instance_of_its_rows_can_have(ctx):
    (t,) = run(_questions(9), ["bucket_topologies"], ctx).ir.trees
    assert t.worst.segments == 65
    for p in t.buckets:
        r, n = p.bucket.rows, p.bucket.segments
        assert n == min(65, 1 + (r - 2) // 9)
        # tight: the root and n - 1 questions with every slot empty fit r rows; one question more does not
        assert 2 + (n - 1) * 9 <= r and (n == 65 or 2 + n * 9 > r)
    r192 = next(p.bucket for p in t.buckets if p.bucket.name == "r192")
    assert r192.segments == 1 + (192 - 2) // 9 == 22
    assert t.bucket_for(Sizes(2 + 21 * 9, 22, 2, 21, 2)) == r192  # the tight instance lands by its rows
    assert t.bucket_for(Sizes(2 + 21 * 9, 23, 2, 21, 2)).rows == 256  # one segment more: the next bucket


def test_packed_roots_take_a_larger_bucket_when_their_segments_do_not_fit(ctx):
    (t,) = run(_questions(9, lo=0), ["bucket_topologies"], ctx).ir.trees
    root_alone = Sizes(2, 1, 1, 0, 0)
    assert t.bucket_for(root_alone).name == "r64"
    nine = root_alone
    for _ in range(8):
        nine = combine(nine, root_alone)
    assert (nine.rows, nine.segments) == (18, 9)
    assert t.buckets[0].bucket.segments == 7 and t.bucket_for(nine).name == "r128"


def test_segments_of_slots_only_bound_nothing_beyond_a_row_each(ctx):
    (t,) = run(_questions(0), ["bucket_topologies"], ctx).ir.trees
    assert t.worst.segments == 65
    assert [p.bucket.segments for p in t.buckets] == [min(65, p.bucket.rows) for p in t.buckets]


def test_small_systemone_instances_land_where_their_rows_say(example, ctx):
    spec = example("systemone")
    (t,) = run(spec, list(TREE_PIPELINE), ctx).ir.trees
    assert t.buckets[0].bucket.segments < t.worst.segments  # the bound is tighter than the worst case
    for k in (1, 2, 7, 8, 21, 64):
        inst = {"state": "", "questions": {f"q{i}": {"type": "noul", "instructions": "?"} for i in range(k)}}
        meta = bind_template(spec.trees[0], t.template, [inst], ctx.fmt).stream.meta
        need = Sizes(meta.num_rows, len(meta.segments), len(meta.levels), len(meta.reads), 2)
        assert need.segments == k + 1
        assert t.bucket_for(need) == t.bucket_for(Sizes(need.rows, 1, 1, 1, 2)) is not None


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
                                        r"  tree small: bucket r128's layout does not keep each level "
                                        r"contiguous"):
        run(small_spec, list(TREE_PIPELINE), ctx)


def test_bad_spec_is_rejected_before_the_first_pass(small_spec, ctx):
    bad = replace(small_spec, model="llama")
    with pytest.raises(PassError, match=r"^in pass verify \(the first pass\): the tree IR verifier rejects "
                                        r"its input:\n  small.flide:1:1: error: unknown model family "
                                        r"`llama`"):
        run(bad, list(TREE_PIPELINE), ctx)
