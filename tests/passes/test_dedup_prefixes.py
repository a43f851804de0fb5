"""dedup_prefixes: golden before/after, round trip, shared prefixes are real (fewer rows, same path
tokens), the verifier names the pass on broken output, and no answer changes: label logits from the
deduplicated template equal (torch.equal) those from the plain one on the tiny checkpoint."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.fx

from flidec.ir.program_printer import parse_templates, print_templates
from flidec.ir.template import Const, ReadTemplate, Repeat, SegmentTemplate, Slot, Templates, TreeTemplate
from flidec.passes.manager import PassError, run
from flidec.runtime.reference.executor import ReferenceExecutor
from flidec.runtime.reference.qwen3_5 import Qwen35
from flidec.runtime.templates import bind_template

FOLD = ["verify", "fold_prompt_text"]
DEDUP = FOLD + ["dedup_prefixes"]


def test_small_spec_golden(small_spec, ctx, golden):
    golden("small.dedup_prefixes.ir", print_templates(run(small_spec, DEDUP, ctx).ir))


@pytest.mark.parametrize("name", ["classifier", "planner", "tool_router"])
def test_round_trip_and_paths_unchanged(name, example, ctx, instances):
    spec = example(name)
    plain, dedup = run(spec, FOLD, ctx).ir, run(spec, DEDUP, ctx).ir
    assert parse_templates(print_templates(dedup)) == dedup
    tree = spec.trees[0]
    a = bind_template(tree, plain.trees[0], instances[name], ctx.fmt)
    b = bind_template(tree, dedup.trees[0], instances[name], ctx.fmt)  # verify=True: paths equal the prompt's
    assert not a.errors and not b.errors
    assert sorted(s.path for s in a.sites) == sorted(s.path for s in b.sites)
    assert b.rows_used < a.rows_used  # "Question:" and longer prefixes are stored once


def test_prefix_moves_to_a_shared_parent(ctx):
    def seg(ids, ask):
        return SegmentTemplate((Const(ids),), (ReadTemplate(ask, (1, 2), 2),))

    root = SegmentTemplate((Const((9,)), Slot("state", "s", 10, head=1)), (), (
        seg((1, 2, 3), "a"), seg((1, 2, 4, 5), "b"), seg((1, 2, 4, 6), "c"), seg((7,), "d"), seg((1, 2), "e"),
        Repeat("fork", "f", 1, 2, (seg((1, 2, 3), "f.g"),))))
    out = run(Templates((TreeTemplate("t", root),)), ["dedup_prefixes"], ctx).ir.trees[0].root
    shared = out.children[0]
    assert shared.pieces == (Const((1, 2)),) and [r.ask for r in shared.reads] == ["e"]
    a, bc = shared.children
    assert a.pieces == (Const((3,)),) and bc.pieces == (Const((4,)),)
    assert [c.pieces for c in bc.children] == [(Const((5,)),), (Const((6,)),)]
    assert out.children[1] == seg((7,), "d")
    assert isinstance(out.children[2], Repeat)  # a repeat's body is another scope: never merged across


def test_broken_output_is_rejected_naming_the_pass(small_spec, ctx, monkeypatch):
    from flidec.passes import manager

    def broken(ts, c):  # a shared parent with an empty constant
        t = ts.trees[0]
        kids = (SegmentTemplate((Const(()),), (), t.root.children[:1]),) + t.root.children[1:]
        return Templates((replace(t, root=replace(t.root, children=kids)),))

    monkeypatch.setitem(manager.PASSES, "dedup_prefixes",
                        replace(manager.PASSES["dedup_prefixes"], run=broken))
    with pytest.raises(PassError, match=r"^in pass dedup_prefixes \(after verify, fold_prompt_text\): the "
                                        r"template IR verifier rejects its output:\n  tree small: segment "
                                        r"s1: an empty constant"):
        run(small_spec, DEDUP, ctx)


@pytest.fixture(scope="module")
def executor(tiny_checkpoint):
    return ReferenceExecutor(torch.fx.symbolic_trace(Qwen35.from_pretrained(tiny_checkpoint, torch.float32)))


SMALL_INSTANCES = [
    {"doc": "the river is quiet", "step": [{"text": "go on", "why": {"instructions": "Is it wise?"}},
                                           {"text": "stop", "why": {}}]},
    {"doc": "", "step": [{"text": "  ", "why": {"instructions": "?"}}]},
]


def test_dedup_never_changes_an_answer(small_spec, ctx, executor):
    spec, name, instances = small_spec, "small", {"small": SMALL_INSTANCES}
    tree = spec.trees[0]
    logits, rows = {}, {}
    for label, names in (("plain", FOLD), ("dedup", DEDUP)):
        t = run(spec, names, ctx).ir.trees[0]
        bound = bind_template(tree, t, instances[name], ctx.fmt)
        assert not bound.errors
        rows[label] = bound.rows_used
        out = executor.run_stream(bound.stream)
        logits[label] = {(s.instance, s.path): out[i, :len(s.piece.labels)]
                         for i, s in enumerate(bound.sites)}
    assert rows["dedup"] < rows["plain"]  # the shared "Question:" really is one segment now
    assert logits["plain"].keys() == logits["dedup"].keys()
    for key, value in logits["plain"].items():
        assert torch.equal(value, logits["dedup"][key]), key
        assert torch.isfinite(value).all()
