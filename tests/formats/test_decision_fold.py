"""fold_prompt_text under a decision format: the golden template (slots bounded by the spec's token bounds
plus the format's framing, reads with their most head rows), its round trip, and the walker's refusal of a
path over the largest bucket the template sized."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flidec.formats import resolve_format
from flidec.frontend.parser import parse_spec
from flidec.ir.errors import InstanceError
from flidec.ir.program_printer import parse_templates, print_templates
from flidec.ir.template import worst_path_rows
from flidec.models.tokenizer import load_tokenizer
from flidec.passes.context import CompileContext
from flidec.passes.manager import run
from flidec.passes.pipeline import TREE_PIPELINE  # noqa: F401 (registers the passes)

GOLDEN = Path(__file__).resolve().parent / "golden"
SPEC = """model qwen3_5
format decision

tree small {
  state doc: text[..100]
  text "Read it."
  ask ok: noul "Is it fine?"
  ask kind: choice "Which kind?" { a, b }
  fork step[1..2]: text[..20] {
    ask pick: choice[2..8] bound[..30] bound[..60]
  }
}
"""


@pytest.fixture(scope="module")
def folded(decision_checkpoint):
    spec = parse_spec(SPEC, "small.flide")
    ckpt = decision_checkpoint("forms")
    chosen = resolve_format(spec.format, ckpt, load_tokenizer(ckpt))
    return spec, chosen.fmt, run(spec, ["verify", "fold_prompt_text"], CompileContext(chosen.fmt)).ir


def test_golden_and_round_trip(folded):
    _, _, templates = folded
    text = print_templates(templates)
    path = GOLDEN / "small.decision.fold_prompt_text.ir"
    if os.environ.get("FLIDEC_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"the IR differs from {path} (FLIDEC_UPDATE_GOLDEN=1 rewrites it)"
    assert parse_templates(text) == templates


def test_bounds_cover_an_instance_at_the_spec_bounds_and_refuse_past_them(folded):
    spec, reading, templates = folded
    tree, template = spec.trees[0], templates.trees[0]
    worst = worst_path_rows(template)
    instance = {
        "doc": "word " * 95,
        "step": [
            {
                "text": "go " * 19,
                "pick": {
                    "instructions": "Which one? " * 7,
                    "criteria": {f"option {i}": None for i in range(8)},
                },
            }
        ],
    }
    plan, _ = reading.walker(tree, verify=True, max_path=worst).plan(instance)
    assert max(len(plan.path_ids(seg)) for seg, _, _ in plan.reads) <= worst
    with pytest.raises(InstanceError, match="over the 40 this artifact takes"):
        reading.walker(tree, max_path=40).plan(instance)
