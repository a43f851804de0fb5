"""Property tests: any input either parses or raises FlideError, quickly (mutated examples: a few hundred in
CI, a few thousand under `-m slow`); generated specs round-trip
through the printer and through JSON; formatting keeps the IR and is idempotent."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flidec.frontend import parse_spec
from flidec.frontend.layout import layout_of
from flidec.ir.errors import FlideError
from flidec.ir.instance import instance_schema
from flidec.ir.printer import print_spec
from flidec.ir.serde import spec_from_json, spec_to_json
from flidec.ir.tree import (
    Ask,
    AskType,
    Bound,
    ChoiceOptions,
    Fork,
    Format,
    NoulCriteria,
    Range,
    ScoreLevels,
    Spec,
    State,
    Text,
    Tree,
)
from flidec.ir.verify import verify

EXAMPLES = [p.read_text() for p in sorted((Path(__file__).parents[2] / "examples").glob("*.flide"))]
FAST = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def parse_or_flide_error(source: str) -> None:
    """The property: parsing, verifying and formatting raise nothing but FlideError."""
    try:
        spec = parse_spec(source)
    except FlideError:
        return
    verify(spec)
    formatted = print_spec(spec, layout_of(source, spec))
    again = parse_spec(formatted)
    assert again == spec
    assert print_spec(again, layout_of(formatted, again)) == formatted
    for tree in spec.trees:
        instance_schema(tree)


@FAST
@given(st.text(max_size=300))
def test_random_text(source):
    parse_or_flide_error(source)


PIECES = ["{", "}", "[", "]", "..", ":", "|", ",", '"', "\\", "//", "/*", "*/", "\n", " ",
          "ask ", "fork ", "text ", "state ", "tree ", "noul", "choice", "score", "bound", "none",
          "resumable", "0", "99999999999", "é", "\\u{"]


def mutate(source: str, data) -> str:
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(source)))
        j = data.draw(st.integers(i, min(len(source), i + 12)))
        insert = data.draw(st.sampled_from(["", *PIECES]) | st.text(max_size=3))
        source = source[:i] + insert + source[j:]
    return source


@FAST
@given(st.sampled_from(EXAMPLES), st.data())
def test_mutated_examples(source, data):
    parse_or_flide_error(mutate(source, data))


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(EXAMPLES), st.data())
def test_mutated_examples_many(source, data):
    parse_or_flide_error(mutate(source, data))


# ---- generated specs ------------------------------------------------------------------------------------

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True) | st.text(
    st.characters(categories=["Ll", "Lu", "Lo"]), min_size=1, max_size=4)
strings = st.text(max_size=12)
counts = st.integers(0, 300)


@st.composite
def ranges(draw, lo=counts):
    a = draw(lo)
    return Range(a, draw(st.integers(a, a + 300)))


@st.composite
def bounds(draw):
    hi = draw(st.integers(0, 10**6))
    return Bound(hi, draw(st.sampled_from([0, hi, hi // 2])))


@st.composite
def asks(draw):
    kinds = draw(st.lists(st.sampled_from(["noul", "choice", "score"]), min_size=1, max_size=3, unique=True))
    types = []
    for k in kinds:
        types.append(AskType(k, Range(2, 2) if k == "noul" and draw(st.booleans()) else draw(ranges())))
    criteria_options = [st.none(), bounds()]
    if len(types) == 1:
        kind = kinds[0]
        if kind == "noul":
            criteria_options.append(st.builds(NoulCriteria, st.none() | strings, st.none() | strings))
        elif kind == "choice":
            criteria_options.append(st.builds(ChoiceOptions, st.lists(st.tuples(strings, st.none() | strings),
                                                                      max_size=4).map(tuple)))
        else:
            criteria_options.append(st.builds(ScoreLevels, st.lists(strings, max_size=4).map(tuple)))
    return Ask(draw(names), tuple(types), draw(st.none() | strings | bounds()),
               draw(st.one_of(criteria_options)), draw(st.none() | ranges(st.integers(1, 5))))


texts = st.builds(Text, st.none() | names, strings) | st.builds(Text, names, bounds())


def bodies(depth: int):
    nodes = texts | asks()
    if depth > 0:
        nodes = nodes | st.builds(Fork, names, ranges(), st.none() | bounds(), bodies(depth - 1))
    return st.lists(nodes, max_size=3).map(tuple)


values = st.none() | strings | st.integers(0, 10**9) | st.booleans()
specs = st.builds(
    Spec,
    names,
    st.builds(Format, names,
              st.dictionaries(names, strings | st.integers(0, 10**9) | st.booleans(), max_size=2)
              .map(lambda d: tuple(d.items()))),
    st.lists(st.builds(Tree, names, st.builds(State, names, bounds(), st.booleans()), bodies(2),
                       st.none() | strings, st.lists(st.integers(0, 10**6), max_size=3).map(tuple)),
             max_size=2).map(tuple),
)


@FAST
@given(specs)
def test_generated_specs_round_trip(spec):
    printed = print_spec(spec)
    assert parse_spec(printed) == spec
    assert print_spec(parse_spec(printed)) == printed
    assert spec_from_json(spec_to_json(spec)) == spec
    verify(spec)
