"""fold_prompt_text: golden template text, exact constants (they are the format's own pieces), slot bounds
that cover what instances bind, and a bound instance's stream from the template equal to the plain
binder's."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from flidec.ir.printer import print_spec
from flidec.ir.program_printer import parse_templates, print_templates
from flidec.ir.template import Const, SegmentTemplate, Slot, Templates, worst_sizes
from flidec.passes.manager import PassError, run
from flidec.runtime.binder import bind
from flidec.runtime.templates import bind_template

EXAMPLES = ["classifier", "lookahead", "planner", "systemone", "tool_router"]


def test_small_spec_golden(small_spec, ctx, golden):
    before = run(small_spec, ["verify"], ctx).ir
    golden("small.flide", print_spec(before))
    out = run(small_spec, ["verify", "fold_prompt_text"], ctx).ir
    golden("small.fold_prompt_text.ir", print_templates(out))


@pytest.mark.parametrize("name", EXAMPLES)
def test_round_trip(name, example, ctx):
    out = run(example(name), ["verify", "fold_prompt_text"], ctx).ir
    assert parse_templates(print_templates(out)) == out


def test_constants_are_the_formats_pieces(small_spec, ctx):
    fmt = ctx.fmt
    t = run(small_spec, ["verify", "fold_prompt_text"], ctx).ir.trees[0]
    root = t.root
    assert root.pieces[0] == Const(fmt.root_head)
    # the constant text "Read it." continues the root segment, pre-tokenized with its separator
    assert root.pieces[2] == Const(fmt.text_piece("Read it.", True))
    tree = small_spec.trees[0]
    ok = root.children[0]
    assert ok.pieces == (Const(fmt.ask_piece(tree.body[1], None, "ok").ids),)
    assert ok.reads[0].labels == fmt.ask_piece(tree.body[1], None, "ok").labels
    why = root.children[2].body[0].children[1]  # step[*] branch text -> ask why: bound instructions
    assert isinstance(why.pieces[0], Slot) and why.pieces[0].kind == "question"
    assert why.reads[0].labels == ok.reads[0].labels  # a noul's labels are fixed even when its text is bound


@pytest.mark.parametrize("name", EXAMPLES)
def test_binding_from_the_template_equals_the_plain_binder(name, example, ctx, instances):
    spec = example(name)
    tree = spec.trees[0]
    t = run(spec, ["verify", "fold_prompt_text"], ctx).ir.trees[0]
    got = bind_template(tree, t, instances[name], ctx.fmt)
    want = bind(tree, instances[name], ctx.fmt)
    assert not got.errors and not want.errors
    assert torch.equal(got.stream.tokens, want.stream.tokens)
    assert got.stream.meta.segments == want.stream.meta.segments
    assert got.stream.meta.reads == want.stream.meta.reads
    assert got.shapes == want.shapes and got.input_tokens == want.input_tokens
    assert [s.path for s in got.sites] == [s.path for s in want.sites]
    assert got.rows_used <= worst_sizes(t).rows * len(instances[name])


def test_slot_over_its_bound_is_refused(small_spec, ctx):
    t = run(small_spec, ["verify", "fold_prompt_text"], ctx).ir.trees[0]
    tight = replace(t, root=replace(t.root, pieces=(t.root.pieces[0], replace(t.root.pieces[1], max_tokens=3),
                                                    *t.root.pieces[2:])))
    inst = {"doc": "a fairly long document text", "step": [{"text": "go", "why": {"instructions": "why?"}}]}
    bound = bind_template(small_spec.trees[0], tight, [inst], ctx.fmt)
    assert "doc: " in str(bound.errors[0]) and "over the compiled bound of 3" in str(bound.errors[0])


def test_broken_output_is_rejected_naming_the_pass(small_spec, ctx, monkeypatch):
    from flidec.passes import fold_prompt_text as mod
    from flidec.passes import manager

    def broken(spec, c):  # a root without its state slot
        out = mod.fold_prompt_text(spec, c)
        t = out.trees[0]
        return Templates((replace(t, root=SegmentTemplate((Const((1,)),), (), t.root.children)),))

    monkeypatch.setitem(manager.PASSES, "fold_prompt_text",
                        replace(manager.PASSES["fold_prompt_text"], run=broken))
    with pytest.raises(PassError, match=r"^in pass fold_prompt_text \(after verify\): the template IR "
                                        r"verifier rejects its output:\n  tree small: the root segment has "
                                        r"no state slot"):
        run(small_spec, ["verify", "fold_prompt_text"], ctx)
