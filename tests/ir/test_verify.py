"""One test per verifier error: its exact message and hint, and the Loc it points at."""

from __future__ import annotations

from dataclasses import replace

import pytest

from flidec.frontend import parse_spec
from flidec.ir.errors import SpecError
from flidec.ir.tree import Ask, AskType, Bound, ChoiceOptions, Loc, NoulCriteria, Range, ScoreLevels, Text
from flidec.ir.verify import MAX_FORK_DEPTH, check, level_tokens, verify

HEAD = 'model qwen3_5\nformat next_token(style="vllm")\n'


def errors(body: str, head: str = HEAD) -> list[tuple[int, int, str, str | None]]:
    diags = verify(parse_spec(head + body, "t.flide"))
    return sorted((d.loc.line, d.loc.col, d.message, d.hint) for d in diags)


def tree(*lines: str, opts: str = "") -> str:
    return f"tree t{opts} {{\n  state s: text[..100]\n" + "".join(f"  {x}\n" for x in lines) + "}\n"


def test_examples_verify():
    from pathlib import Path

    for path in sorted(Path(__file__).parents[2].joinpath("examples").glob("*.flide")):
        assert verify(parse_spec(path.read_text(), str(path))) == [], path


def test_unknown_model():
    assert errors(tree('ask a: noul "?"'), 'model llama\nformat next_token(style="vllm")\n') == [
        (1, 1, "unknown model family `llama`", "the known model families: qwen3_5")]


def test_unknown_format():
    assert errors(tree('ask a: noul "?"'), "model qwen3_5\nformat chat\n") == [
        (2, 1, "unknown format `chat`", 'the known formats: next_token(style="vllm") and decision')]


def test_format_needs_style_and_known_options():
    got = errors(tree('ask a: noul "?"'), "model qwen3_5\nformat next_token(labels=2)\n")
    assert got == [
        (2, 1, "format next_token has no option `labels`",
         'its one option is style: next_token(style="vllm")'),
        (2, 1, "format next_token needs its style", 'write next_token(style="vllm")'),
    ]


def test_unknown_style():
    assert errors(tree('ask a: noul "?"'), 'model qwen3_5\nformat next_token(style="sglang")\n') == [
        (2, 1, 'unknown next_token style "sglang"', 'the known styles: "vllm"')]


def test_no_tree():
    assert errors("") == [(1, 1, "the spec declares no tree",
                           'add one: tree NAME { state history: text[..4096]  ask done: noul "Done?" }')]


def test_duplicate_tree():
    spec = parse_spec(HEAD + tree('ask a: noul "?"') + tree('ask a: noul "?"'), "t.flide")
    (d,) = verify(spec)
    assert (d.loc.line, d.message, d.hint) == (7, "tree `t` is declared twice", "rename one of them")
    assert d.notes == ((spec.trees[0].loc, "first declared here"),)


def test_duplicate_name_in_tree_points_at_both():
    spec = parse_spec(HEAD + tree('ask s: noul "?"', 'text a[..5]', 'ask a: noul "?"'), "t.flide")
    got = sorted((d.loc.line, d.message, d.notes[0][0].line) for d in verify(spec))
    assert got == [(5, "`s` is declared twice in tree `t`", 4), (7, "`a` is declared twice in tree `t`", 6)]
    assert verify(spec)[0].hint == "rename one of them: names are the instance's JSON keys"


def test_duplicate_name_in_fork_and_reserved_text():
    got = errors(tree("fork f[1..2] {", '  ask a: noul "?"', '  ask a: noul "?"', '  text text[..5]', "}"))
    assert got == [
        (7, 5, "`a` is declared twice in fork `f`", "rename one of them: names are the instance's JSON keys"),
        (8, 5, "`text` is reserved in fork `f`: it names each branch's leading text", "rename the node"),
    ]


def test_same_name_in_different_scopes_is_fine():
    assert errors(tree('ask a: noul "?"', "fork f[1..2] {", '  ask a: noul "?"', "}")) == []


def test_empty_token_bound():
    assert errors(tree("text a[9..5]", 'ask q: noul "?"')) == [
        (5, 9, "the token bound [9..5] is empty: 9 > 5", "write [5..9]")]


def test_zero_token_bound():
    assert errors(tree("text a[..0]", 'ask q: noul "?"')) == [
        (5, 9, "a token bound is at least 1 token, got [..0]", "write [..N] with N >= 1")]


def test_empty_fanout_and_zero_fanout():
    assert errors(tree('fork f[3..2] { ask q: noul "?" }', 'fork g[0..2] { ask q: noul "?" }')) == [
        (5, 9, "the range [3..2] is empty: 3 > 2", "write [2..3]"),
        (6, 9, "a fork's fan-out is at least 1, got [0..2]", "write [1..2]"),
    ]


def test_zero_repeat():
    assert errors(tree("ask q[0..3]: noul")) == [
        (5, 8, "a repeat count is at least 1, got [0..3]", "write [1..3]")]


def test_choice_options_beyond_labels():
    assert errors(tree("ask q: choice[2..300]", "ask r: choice[1]")) == [
        (5, 16, "a choice has 2 to 255 options under format next_token, got [2..300]",
         "keep the count within [2..255]"),
        (6, 16, "a choice has 2 to 255 options under format next_token, got [1]",
         "keep the count within [2..255]"),
    ]


def test_score_levels_beyond_labels():
    assert errors(tree("ask q: score[2..11]")) == [
        (5, 15, "a score has 2 to 10 levels under format next_token, got [2..11]",
         "keep the count within [2..10]")]


def test_noul_has_two_options():
    assert errors(tree("ask q: noul[3]")) == [
        (5, 14, "a noul has exactly 2 options, yes and no", "write noul with no count")]


def test_duplicate_type():
    assert errors(tree("ask q[1..2]: noul | noul")) == [
        (5, 23, "type `noul` is listed twice", "list each type once")]


def test_listed_count_outside_range():
    got = errors(tree('ask q: choice[3..4] "?" { a, b }', 'ask r: score[3] "?" { "lo", "mid", "hi", "max" }'))
    assert got == [
        (5, 27, "choice[3..4] lists 2 options", "list 3 to 4 options, or change the count to [2]"),
        (6, 23, "score[3] lists 4 levels", "list exactly 3 levels, or change the count to [4]"),
    ]


def test_duplicate_option():
    assert errors(tree('ask q: choice "?" { a, "a": "again" }')) == [
        (5, 21, 'option "a" is listed twice', "list each option once")]


def test_unlisted_unbound_criteria_need_exact_count():
    assert errors(tree('ask q: choice[2..4] "Which?"')) == [
        (5, 10, ("choice[2..4] has no options to count: its criteria are neither listed nor bound, so its "
                 "count must be exact"),
         ("list the options in { }, bind them with bound[..N] after the instructions, or fix the count: "
          "choice[4]"))]


def test_fork_without_ask():
    assert errors(tree('ask q: noul "?"', 'fork f[1..2]: text[..5] { text "x" fork g[1] {} }')) == [
        (6, 3, "fork `f` asks nothing: there is no ask anywhere in its body",
         "add an ask to its body, or remove the fork: a branch with no question is never read"),
        (6, 38, "fork `g` asks nothing: there is no ask anywhere in its body",
         "add an ask to its body, or remove the fork: a branch with no question is never read"),
    ]


def test_tree_without_ask():
    assert errors(tree('text "hello"')) == [
        (3, 1, "tree `t` asks nothing", 'add an ask, e.g. ask done: noul "Is the task finished?"')]


def test_depth_limit():
    depth = MAX_FORK_DEPTH + 1
    body = "".join(f"fork f{i}[1] {{ " for i in range(depth)) + 'ask q: noul "?"' + " }" * depth
    got = errors(tree(body))
    assert [(m, h) for _, _, m, h in got] == [
        (f"fork `f{depth - 1}` is {depth} levels deep; the limit is 16",
         "flatten the tree: fewer nested forks")]


def test_size_limit():
    got = errors(tree('fork f[1..64]: text[..8192] { fork g[1..16]: text[..512] { ask q: noul "?" } }'))
    assert got == [(3, 1, "tree `t` can reach 1090660 tokens in one stream; the limit is 1048576 (2**20)",
                    "lower the largest token bounds or fan-outs; `flidec inspect` shows the count per level")]


def test_level_tokens_counts_bytes_and_framing():
    spec = parse_spec(HEAD + tree('text "héllo"', 'fork f[1..3]: text[..10] { ask q: noul "ab" }'))
    # level 0: state 100 + 6 bytes; level 1: 3 x (10 + 32 framing + 2 bytes + 2 options x 4)
    assert level_tokens(spec.trees[0]) == [106, 3 * (10 + 32 + 2 + 8)]


def test_unknown_wire():
    assert errors(tree('ask q: noul "?"', opts=' (wire="openai")')) == [
        (3, 1, 'unknown wire "openai"', "the known wire: systemone")]


def test_systemone_shape():
    got = errors(tree('ask q: noul "?"', opts=' (wire="systemone")'))
    shape = "write it as: state state: text[..N]  ask questions[1..N]: noul | choice[2..255] | score[2..10]"
    prefix = 'a wire="systemone" tree is shaped like a System One request: '
    assert got == [
        (3, 1, prefix + "its ask is a keyed set: questions[1..N]", shape),
        (3, 1, prefix + "its ask is named `questions`, not `q`", shape),
        (3, 1, prefix + "its ask's instructions and criteria come from the instance", shape),
        (3, 1, prefix + "its state is named `state`, not `s`", shape),
    ]


def test_buckets_increase():
    assert errors(tree('ask q: noul "?"', opts=" (buckets=[8192, 4096, 4096])")) == [
        (3, 1, "buckets must increase: 4096 follows 4096", "list each bucket once, smallest first"),
        (3, 1, "buckets must increase: 4096 follows 8192", "list each bucket once, smallest first"),
    ]


# ---- errors only IR built outside the parser can have ----------------------------------------------------

BASE = parse_spec(HEAD + tree('ask q: noul "?"'))


def with_body(*nodes) -> list[str]:
    spec = replace(BASE, trees=(replace(BASE.trees[0], body=nodes),))
    return sorted(d.message for d in verify(spec))


def noul(**kw) -> Ask:
    return Ask("q", (AskType("noul", Range(2, 2)),), **kw)


def test_not_a_name():
    assert with_body(noul(), Text("two words", Bound(5))) == ['"two words" is not a name']


def test_bound_text_needs_a_name():
    assert with_body(noul(), Text(None, Bound(5))) == [
        "a bound text needs a name: the instance gives its text under that name"]


def test_bound_minimum_negative():
    assert with_body(noul(), Text("x", Bound(5, -1))) == ["a token bound's minimum is negative: [-1..5]"]


def test_ask_without_type():
    assert with_body(Ask("q", ())) == ["ask `q` has no type"]


def test_constant_criteria_on_multi_type_ask():
    ask = Ask("q", (AskType("noul", Range(2, 2)), AskType("choice", Range(2, 3))),
              criteria=ChoiceOptions((("a", None),)))
    assert with_body(ask) == ["constant criteria need an ask of a single type"]


def test_criteria_of_the_wrong_type():
    assert with_body(noul(criteria=ScoreLevels(("a", "b")))) == [
        "a noul ask's constant criteria are { yes: ..., no: ... }"]


def test_empty_option_name():
    ask = Ask("q", (AskType("choice", Range(2, 2)),), criteria=ChoiceOptions((("", None), ("b", None))))
    assert with_body(ask) == ["an option name is empty"]


def test_noul_criteria_are_fine_half_described():
    assert with_body(noul(criteria=NoulCriteria(true="yes means yes"))) == []


def test_check_raises_with_every_diagnostic_sorted():
    spec = parse_spec(HEAD + tree("ask a: choice[1]", "ask b: score[11]"), "t.flide")
    with pytest.raises(SpecError) as e:
        check(spec)
    assert [d.loc.line for d in e.value.diagnostics] == [5, 6]
    assert str(e.value).startswith("t.flide:5:16: error: a choice has 2 to 255 options")


def test_check_returns_a_good_spec():
    assert check(BASE) is BASE


def test_loc_excluded_from_equality():
    assert Range(1, 2, Loc("a", 1, 1)) == Range(1, 2, Loc("b", 9, 9))
