"""What each construct parses to: exact IR values for small specs."""

from __future__ import annotations

import pytest

from flidec.frontend import parse_spec
from flidec.ir.defaults import DEFAULT_CRITERIA, DEFAULT_INSTRUCTIONS
from flidec.ir.errors import SpecError
from flidec.ir.tree import (
    Ask,
    AskType,
    Bound,
    ChoiceOptions,
    Fork,
    Format,
    Loc,
    NoulCriteria,
    Range,
    ScoreLevels,
    State,
    Text,
)

HEAD = 'model qwen3_5\nformat next_token(style="vllm")\n'


def body(*lines: str):
    spec = parse_spec(HEAD + "tree t {\n  state s: text[..100]\n" + "\n".join(lines) + "\n}\n", "t.flide")
    return spec.trees[0].body


def one(line: str):
    (node,) = body(line)
    return node


NOUL = AskType("noul", Range(2, 2))


def test_header_and_tree_options():
    spec = parse_spec(HEAD + 'tree t (buckets=[1, 2,], wire="systemone") {\n'
                      ' state s: text[4..100] resumable\n}')
    assert spec.model == "qwen3_5"
    assert spec.format == Format("next_token", (("style", "vllm"),))
    t = spec.trees[0]
    assert (t.buckets, t.wire, t.state) == ((1, 2), "systemone", State("s", Bound(100, 4), True))


def test_format_option_values():
    spec = parse_spec("model qwen3_5\nformat f(a=1, b=true, c=false, d=\"x\")\n")
    assert spec.format.options == (("a", 1), ("b", True), ("c", False), ("d", "x"))
    assert spec.trees == ()


def test_ask_with_nothing_written_is_fully_bound_with_defaults():
    assert one("ask a: choice[2..32]") == Ask("a", (AskType("choice", Range(2, 32)),), DEFAULT_INSTRUCTIONS,
                                              DEFAULT_CRITERIA)
    assert (DEFAULT_INSTRUCTIONS.max_tokens, DEFAULT_CRITERIA.max_tokens) == (1024, 4096)


def test_constant_instructions_leave_criteria_absent():
    assert one('ask a: score[5] "How much?"') == Ask("a", (AskType("score", Range(5, 5)),), "How much?", None)


def test_bound_parts_and_none():
    assert one("ask a: noul bound[..7]") == Ask("a", (NOUL,), Bound(7), None)
    assert one("ask a: choice[2..4] none bound[3..9]").criteria == Bound(9, 3)
    assert one("ask a: choice[2..4] none bound[3..9]").instructions is None
    assert one('ask a: choice[2..4] "Which?" bound[..9]') == Ask(
        "a", (AskType("choice", Range(2, 4)),), "Which?", Bound(9))
    assert one("ask a: noul none") == Ask("a", (NOUL,), None, None)


def test_noul_criteria():
    assert one('ask a: noul "?" { yes: "y", no: "n" }').criteria == NoulCriteria("y", "n")
    assert one('ask a: noul { no: "n" }') == Ask("a", (NOUL,), None, NoulCriteria(None, "n"))
    assert one('ask a: noul "?" {}').criteria == NoulCriteria()


def test_choice_options_names_and_descriptions():
    ask = one('ask a: choice "?" { plain, "two words": "desc", ünï_código, "🎉" }')
    assert ask.types == (AskType("choice", Range(4, 4)),)
    assert ask.criteria == ChoiceOptions((("plain", None), ("two words", "desc"), ("ünï_código", None),
                                          ("🎉", None)))


def test_score_levels_and_counts():
    ask = one('ask a: score[2..5] "?" { "low", high }')
    assert (ask.types, ask.criteria) == ((AskType("score", Range(2, 5)),), ScoreLevels(("low", "high")))


def test_multi_type_repeated_ask():
    ask = one("ask questions[1..64]: noul | choice[2..255] | score[2..10]")
    assert ask.repeat == Range(1, 64)
    assert [t.kind for t in ask.types] == ["noul", "choice", "score"]


def test_text_nodes():
    assert body('text "a\\n\\t\\"\\\\b"', "text intro \"hi\"", "text goal[..512]", "text g2[3..4]") == (
        Text(None, 'a\n\t"\\b'), Text("intro", "hi"), Text("goal", Bound(512)), Text("g2", Bound(4, 3)))


def test_unicode_escapes_and_identifiers():
    assert one('text 名前 "\\u{48}\\u{1F600}é"') == Text("名前", "H😀é")


def test_fork_with_and_without_text():
    fork = one('fork f[1..3]: text[..8] { fork g[2] { ask a: noul "?" } }')
    assert fork == Fork("f", Range(1, 3), Bound(8),
                        (Fork("g", Range(2, 2), None, (Ask("a", (NOUL,), "?"),)),))


def test_comments_anywhere():
    assert one('/* a */ ask /* b */ a // c\n : noul // d\n "q" /* e\n f */') == Ask("a", (NOUL,), "q")


def test_keywords_are_contextual():
    assert one('text text "x"') == Text("text", "x")
    assert one("ask bound: noul bound[..5]") == Ask("bound", (NOUL,), Bound(5), None)


def test_every_node_has_a_loc_spanning_its_declaration():
    fork = one('  fork f[1..3]: text[..8] {\n    ask a: noul "?"\n  }')
    assert fork.loc == Loc("t.flide", 5, 3, 7, 4)
    assert fork.fanout.loc == Loc("t.flide", 5, 9, 5, 15)
    assert fork.body[0].loc == Loc("t.flide", 6, 5, 6, 20)
    assert fork.body[0].types[0].loc == Loc("t.flide", 6, 12, 6, 16)


def semantic_errors(line: str) -> list[tuple[str, str | None]]:
    with pytest.raises(SpecError) as e:
        body(line)
    return [(d.message, d.hint) for d in e.value.diagnostics]


def test_unknown_ask_type_suggests():
    assert semantic_errors("ask a: chioce[2..3]") == [("unknown ask type `chioce`", "did you mean `choice`?")]
    assert semantic_errors("ask a: bool") == [("unknown ask type `bool`", "did you mean `noul`?")]
    assert semantic_errors("ask a: xyz") == [
        ("unknown ask type `xyz`", "the ask types are noul (yes/no), choice[N..M] and score[N..M]")]


def test_choice_without_count_or_options():
    assert semantic_errors('ask a: choice "Which?"') == [(
        "`choice` needs a count of its options or the options themselves",
        'write choice[2..8] to take the options from each instance, '
        'or list them: choice "Which tool?" { search, calc }')]


def test_bracket_misuse():
    assert semantic_errors("fork f[..3] { ask a: noul }") == [
        ("a fan-out needs its lower end", "write [1..3] (or [3] for exactly)")]
    assert semantic_errors("text a[5]") == [
        ("a token bound is written [..MAX] or [MIN..MAX]", "write [..5] for at most 5 tokens")]


def test_bad_escapes_all_reported():
    assert [m for m, _ in semantic_errors('text "\\q \\u{D800} \\u{110000}"')] == [
        "unknown escape \\q", "\\u{D800} is not a Unicode scalar value",
        "\\u{110000} is not a Unicode scalar value"]


def test_criteria_block_errors():
    assert semantic_errors('ask a: noul "?" { maybe: "m", yes, no: "n", no: "again" }') == [
        ("a noul's criteria describe `yes` and `no`, not `maybe`",
         'write { yes: "what yes means", no: "what no means" }'),
        ("`yes` needs a description", 'write yes: "what yes means"'),
        ("`no` is described twice", "keep one description"),
    ]
    assert semantic_errors('ask a: score "?" { "a": "b", "c" }') == [
        ("a score level is one string", 'list the levels low to high: { "low", "high" }')]
    assert semantic_errors('ask a[1..2]: noul | choice[2] "?" { x, y }') == [
        ("constant criteria need an ask of a single type",
         "bind them per instance with bound[..N], or split the ask into one ask per type")]


def test_option_errors():
    with pytest.raises(SpecError) as e:
        parse_spec("model qwen3_5\nformat f(x=[1], x=2)\n"
                   "tree t (color=1, wire=2, buckets=3) {\n state s: text[..1]\n}")
    assert [d.message for d in e.value.diagnostics] == [
        "format option `x` takes a string, a number or true/false, not a list",
        "option `x` is given twice",
        "unknown tree option `color`",
        "tree option `wire` takes a string: wire=\"systemone\"",
        "tree option `buckets` takes a list: buckets=[4096, 8192]",
    ]
