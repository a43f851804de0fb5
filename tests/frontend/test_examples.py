"""Golden round trips for every example: the example is canonical as written (comments kept), its bare
print is the golden file, and both parse back to the same IR."""

from __future__ import annotations

from pathlib import Path

import pytest

from flidec.frontend import load_spec, parse_spec
from flidec.frontend.layout import layout_of
from flidec.ir.printer import print_spec

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.flide"))
GOLDEN = Path(__file__).parent / "golden"


def test_the_six_examples_exist():
    assert [p.stem for p in EXAMPLES] == ["classifier", "demo", "lookahead", "planner", "systemone",
                                          "tool_router"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_prints_golden_and_round_trips(path):
    source = path.read_text()
    spec, _ = load_spec(path)
    printed = print_spec(spec)
    assert printed == (GOLDEN / path.name).read_text()
    assert parse_spec(printed) == spec
    assert print_spec(spec, layout_of(source, spec)) == source  # canonical as written, comments and all


def test_lookahead_is_six_levels_of_one_ask():
    spec, _ = load_spec(ROOT / "examples" / "lookahead.flide")
    node, depth = spec.trees[0], 0
    while True:
        forks = [n for n in node.body if type(n).__name__ == "Fork"]
        asks = [n for n in node.body if type(n).__name__ == "Ask"]
        assert len(asks) == 1
        if not forks:
            break
        (node,) = forks
        assert (node.fanout.lo, node.fanout.hi) == (1, 2)
        depth += 1
    assert depth == 6
