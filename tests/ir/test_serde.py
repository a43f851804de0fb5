"""JSON (de)serialization of the tree IR: round trips keep every value and every Loc."""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest

from flidec.frontend import parse_spec
from flidec.ir.errors import SpecError
from flidec.ir.serde import spec_from_json, spec_to_json

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.flide"))


def locs(value) -> list:
    """Every Loc inside an IR value, in field order (equality ignores them, so compare them apart)."""
    out = []
    if is_dataclass(value):
        for f in fields(value):
            v = getattr(value, f.name)
            out += [v] if f.name == "loc" else locs(v)
    elif isinstance(value, tuple):
        for v in value:
            out += locs(v)
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_round_trip_keeps_values_and_locs(path):
    spec = parse_spec(path.read_text(), str(path))
    back = spec_from_json(json.loads(json.dumps(spec_to_json(spec))))
    assert back == spec
    assert locs(back) == locs(spec)
    assert all(loc.line > 0 for loc in locs(spec))


def test_json_form_is_explicit():
    spec = parse_spec('model qwen3_5\nformat next_token(style="vllm")\ntree t {\n  state s: text[..9]\n'
                      '  ask a: choice "Which?" { x, y: "why" }\n}\n', "t.flide")
    ask = spec_to_json(spec)["trees"][0]["body"][0]
    assert ask["instructions"] == "Which?"
    assert ask["criteria"] == {"choice": [["x", None], ["y", "why"]], "loc": ["t.flide", 5, 26, 5, 41]}
    assert ask["types"][0]["options"] == {"lo": 2, "hi": 2, "loc": ["t.flide", 5, 10, 5, 16]}


def test_malformed_json_names_its_path():
    d = spec_to_json(parse_spec((EXAMPLES[0]).read_text()))
    d["trees"][0]["body"][0]["kind"] = "loop"
    with pytest.raises(SpecError, match=r"malformed tree IR JSON at \.trees\[0\]\.body\[0\]: ValueError: "
                                        r"unknown node kind 'loop'"):
        spec_from_json(d)
    with pytest.raises(SpecError, match="flide_tree_ir is None"):
        spec_from_json({})
    with pytest.raises(SpecError, match="malformed"):
        spec_from_json([])
