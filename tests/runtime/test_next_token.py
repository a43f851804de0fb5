"""The next_token format: rendered prompts (golden text), token pieces that add up to the whole prompt's
tokenization for any text, label ids, constant-piece caching, and instance errors that name the path."""

from __future__ import annotations

import json
from itertools import pairwise
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flidec.formats import make_format
from flidec.ir.errors import InstanceError, ModelError, SpecError
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
    State,
    Tree,
)
from flidec.models.tokenizer import ChatPieces
from flidec.runtime import next_token
from flidec.runtime.next_token import NextTokenFormat

NOUL = AskType("noul", Range(2, 2))
CHOICE = AskType("choice", Range(2, 255))
SCORE = AskType("score", Range(2, 10))
B = Bound(200)
ANY = Ask("q", (NOUL, CHOICE, SCORE), instructions=B, criteria=B)  # a System One question
SPECIAL_START = 248044  # Qwen3.5's first special token id


def test_choice_prompt_text(fmt: NextTokenFormat) -> None:
    ask = Ask("pick", (CHOICE,), instructions="Which fruit?",
              criteria=ChoiceOptions((("apple", "red one"), ("pear", None))))
    text = fmt.prompt_text("the state", ["first", "second"], ask, None, "pick")
    assert text == ("the state\n\nfirst\n\nsecond\n\nQuestion: Which fruit?\nA: apple - red one\nB: pear\n"
                    "Answer with the letter of one option only.")


def test_noul_and_score_prompt_texts(fmt: NextTokenFormat) -> None:
    bare = Ask("ok", (NOUL,))
    assert fmt.prompt_text("s", [], bare, None, "ok") == "s\n\nyes\nno\nAnswer with yes or no only."
    described = Ask("ok", (NOUL,), instructions="Done?", criteria=NoulCriteria(true="it is done"))
    assert fmt.prompt_text("s", [], described, None, "ok") == (
        "s\n\nQuestion: Done?\nyes: it is done\nno\nAnswer with yes or no only.")
    score = Ask("how", (SCORE,), criteria=ScoreLevels(("bad", "good")))
    assert fmt.prompt_text({"k": ["é", 1]}, [], score, None, "how") == (
        '{"k": ["é", 1]}\n\n0: bad\n1: good\nAnswer with the number of one level only.')


def test_asks_without_criteria_show_bare_labels_and_answer_by_label(fmt: NextTokenFormat) -> None:
    gain = Ask("gain", (AskType("score", Range(5, 5)),), instructions="How much?")
    assert fmt.prompt_text("s", [], gain, None, "gain") == (
        "s\n\nQuestion: How much?\n0\n1\n2\n3\n4\nAnswer with the number of one level only.")
    piece = fmt.ask_piece(gain, None, "gain")
    answer = fmt.answer(piece, [0.0, 0.0, 0.0, 0.0, 5.0])
    assert answer["legend"] == {str(i): str(i) for i in range(5)} and answer["score"] > 3.9
    pick = Ask("pick", (AskType("choice", Range(3, 3)),), instructions="Which?")
    assert fmt.prompt_text("s", [], pick, None, "pick") == (
        "s\n\nQuestion: Which?\nA\nB\nC\nAnswer with the letter of one option only.")
    piece = fmt.ask_piece(pick, None, "pick")
    assert fmt.answer(piece, [0.0, 3.0, 0.0])["choice"] == "B"


def test_bound_question_objects_render_as_json(fmt: NextTokenFormat) -> None:
    q = {"type": "choice", "instructions": {"task": "rank"}, "criteria": {"x": ["d", 1], "y": None}}
    assert fmt.prompt_text("", [], ANY, q, "q") == (
        '\n\nQuestion: {"task": "rank"}\nA: x - ["d", 1]\nB: y\nAnswer with the letter of one option only.')
    noul = {"type": "noul", "criteria": {"false": "not at all"}}
    assert fmt.prompt_text("s", [], ANY, noul, "q") == "s\n\nyes\nno: not at all\nAnswer with yes or no only."


def test_continuing_texts_lose_leading_whitespace_and_empty_ones_are_left_out(fmt: NextTokenFormat) -> None:
    ask = Ask("ok", (NOUL,))
    text = fmt.prompt_text("  s ", ["  a ", "", " \n\t", "\nb"], ask, None, "ok")
    assert text == "  s \n\na \n\nb\n\nyes\nno\nAnswer with yes or no only."
    assert fmt.text_piece(" \n ", constant=False) == ()


def test_user_text_never_becomes_special_tokens(fmt: NextTokenFormat) -> None:
    root = fmt.root_piece("<|im_end|><think>")
    piece = fmt.ask_piece(ANY, {"type": "noul", "instructions": "<|im_start|>"}, "q")
    assert root[0] >= SPECIAL_START and all(t < SPECIAL_START for t in root[1:])  # <|im_start|> user\n ...
    # the footer <|im_end|> \n <|im_start|> assistant \n <think> \n\n </think> \n\n: 9 ids, 4 special
    assert all(t < SPECIAL_START for t in piece.ids[:-9]) and piece.ids[-9] >= SPECIAL_START
    assert sum(t >= SPECIAL_START for t in piece.ids) == 4


def test_label_ids(fmt: NextTokenFormat, qwen_tokenizer) -> None:
    gen = qwen_tokenizer.encode("\n\n")
    thirty = {"type": "choice", "criteria": {f"o{i}": None for i in range(30)}}
    piece = fmt.ask_piece(ANY, thirty, "q")
    assert piece.label_texts[25:28] == ("Z", "AA", "AB")
    assert [gen + [t] for t in piece.labels] == [qwen_tokenizer.encode("\n\n" + t) for t in piece.label_texts]
    text = fmt.prompt_text("s", [], ANY, thirty, "q")
    assert "\nZ: o25\nAA: o26\nAB: o27\n" in text
    assert fmt.ask_piece(ANY, {"type": "noul"}, "q").labels == tuple(
        qwen_tokenizer.encode("\n\n" + t)[-1] for t in ("yes", "no"))


# Texts that stress the cuts: leading/trailing whitespace and newlines, JSON, combining marks, CJK, emoji.
ATOMS = st.sampled_from(["\n", "\n\n", " ", "\t", "\r\n", "\u00a0", "\u3000", "a", "Z", "1", "{", '"', ":",
                         "e\u0301", "\u0301", "한", "\u1100\u1161", "🙂", "'s", "<|", "|>", "ok", "Question",
                         " a", "b ", "\u00bd", "\u2028", "\u001c", "ß", "'S"])
TEXT = st.one_of(st.text(max_size=12), st.lists(ATOMS, max_size=8).map("".join))
JSON = st.recursive(st.none() | st.booleans() | st.integers() | TEXT,
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(TEXT, c, max_size=3), max_leaves=6)
QUESTION = st.one_of(
    st.fixed_dictionaries({"type": st.just("noul")}, optional={
        "instructions": TEXT | JSON,
        "criteria": st.fixed_dictionaries({}, optional={"true": TEXT, "false": JSON})}),
    st.fixed_dictionaries({"type": st.just("choice"),
                           "criteria": st.dictionaries(TEXT, TEXT | JSON, min_size=2, max_size=4)},
                          optional={"instructions": TEXT}),
    st.fixed_dictionaries({"type": st.just("score"), "criteria": st.lists(TEXT | JSON.filter(
        lambda v: v is not None), min_size=2, max_size=4)}))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=TEXT | JSON.filter(lambda v: isinstance(v, (dict, list))), texts=st.lists(TEXT, max_size=3),
       question=QUESTION)
def test_pieces_add_up_to_the_whole_prompt(fmt: NextTokenFormat, qwen_tokenizer, state, texts,
                                           question) -> None:
    """...and the whole prompt's ids are those of the rendered chat string tokenized at once."""
    pieces = list(fmt.root_piece(state))
    for t in texts:
        pieces += fmt.text_piece(t, constant=False)
    pieces += fmt.ask_piece(ANY, question, "q").ids
    whole = fmt.prompt_ids(state, texts, ANY, question, "q")
    assert tuple(pieces) == whole
    text = fmt.prompt_text(state, texts, ANY, question, "q")
    if not any(special in text for special in qwen_tokenizer.special_tokens):
        # user text spelling a special token stays plain text in flidec, by design (tokenizer.py's docstring),
        # where a whole-string template tokenization would make it the control token
        assert list(whole) == qwen_tokenizer.encode_template(qwen_tokenizer.chat.render(text))


PROSE = "".join(f"Line {i}: it's the {i}th line, über naïve 🙂.\n" + ("\n  indented\n" if i % 7 == 0 else "")
                for i in range(600))


@settings(max_examples=150, deadline=None)
@given(st.lists(ATOMS, max_size=60).map("".join), st.integers(1, 12))
def test_runs_are_cut_after_a_newline_before_text_or_before_a_space_between_letters(text, run_chars) -> None:
    with mock.patch.object(next_token, "RUN_CHARS", run_chars):
        runs = next_token.text_runs(text)
    assert "".join(runs) == text
    for run, after in pairwise(runs):
        assert len(run) >= run_chars
        after_newline = run.endswith("\n") and not after[0].isspace()
        between_letters = run[-1].isalpha() and after[0] == " " and after[1:2].isalpha()
        assert after_newline or between_letters, (run, after)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(ATOMS, max_size=60).map("".join) | TEXT, max_size=5), st.integers(1, 12))
def test_texts_tokenized_as_runs_have_their_whole_ids(fmt: NextTokenFormat, qwen_tokenizer, texts,
                                                     run_chars) -> None:
    with mock.patch.object(next_token, "RUN_CHARS", run_chars):  # short runs: every cut is exercised
        got = fmt.encode_texts(texts)
    assert got == {t: tuple(qwen_tokenizer.encode(t)) for t in texts}


def test_a_long_text_is_cut_into_runs_with_its_whole_ids(fmt: NextTokenFormat, qwen_tokenizer) -> None:
    texts = [PROSE, "no newline at all " * 400, "", "Question: which?\n", "1, 2, 3: " * 400]
    # at newlines, at spaces
    assert len(next_token.text_runs(PROSE)) > 10 and len(next_token.text_runs(texts[1])) > 10
    assert len(next_token.text_runs(texts[-1])) == 1  # no space between two letters
    assert fmt.encode_texts(texts) == {t: tuple(qwen_tokenizer.encode(t)) for t in texts}
    root = fmt.root_draft(PROSE)  # as the template walker tokenizes it, against the whole prompt in one go
    ids = root.ids(fmt.encode_texts(root.texts()))
    assert fmt.prompt_ids(PROSE, [], ANY, {"type": "noul"}, "q")[: len(ids)] == ids == fmt.root_piece(PROSE)


class _Counting:
    """A ChatTokenizer that counts its literal encodes."""

    def __init__(self, inner) -> None:
        self.inner, self.special_tokens, self.chat, self.calls = inner, inner.special_tokens, inner.chat, 0
        self.cuts_exact = inner.cuts_exact

    def encode(self, text: str) -> list[int]:
        self.calls += 1
        return self.inner.encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def encode_template(self, text: str) -> list[int]:
        return self.inner.encode_template(text)


def test_constant_pieces_are_tokenized_once(qwen_tokenizer) -> None:
    counting = _Counting(qwen_tokenizer)
    fmt = NextTokenFormat(counting)
    ask = Ask("pick", (CHOICE,), instructions="Which?", criteria=ChoiceOptions((("a", None), ("b", "bee"))))
    first = fmt.ask_piece(ask, None, "pick")
    fmt.text_piece("Candidate:", constant=True)
    before = counting.calls
    assert fmt.ask_piece(ask, None, "pick") == first
    fmt.text_piece("Candidate:", constant=True)
    assert counting.calls == before
    half_bound = Ask("pick", (CHOICE,), instructions=B, criteria=ask.criteria)
    fmt.ask_piece(half_bound, {"instructions": "Hm?"}, "pick")
    assert counting.calls == before + 1  # only the bound question line


@pytest.mark.parametrize("question, message", [
    ({"criteria": {"a": None, "b": None}}, r"act\[2\]\.q\.type: must be one of"),
    ({"type": "vote"}, r"act\[2\]\.q\.type: must be one of"),
    ({"type": "choice", "criteria": ["a", "b"]}, r"act\[2\]\.q\.criteria: a choice's criteria is an object"),
    ({"type": "choice", "criteria": {"a": None}}, r"act\[2\]\.q\.criteria: 1 options, allowed 2 to 255"),
    ({"type": "score", "criteria": {"0": "lo", "1": "hi"}}, r"act\[2\]\.q\.criteria: a score's criteria is"),
    ({"type": "score", "criteria": [f"l{i}" for i in range(11)]}, r"act\[2\]\.q\.criteria: 11 options"),
    ({"type": "noul", "criteria": {"maybe": "x"}}, r"act\[2\]\.q\.criteria: a noul's criteria"),
    ({"type": "choice", "criteria": {str(i): None for i in range(300)}}, r"300 options, allowed 2 to 255"),
])
def test_bad_questions_name_their_path(fmt: NextTokenFormat, question, message) -> None:
    with pytest.raises(InstanceError, match=message):
        fmt.ask_piece(ANY, question, "act[2].q")


def test_labels_that_are_not_single_tokens_name_the_path(qwen_tokenizer) -> None:
    class NoYes(_Counting):
        def encode(self, text: str) -> list[int]:
            return [t for ch in text for t in self.inner.encode(ch)]  # every character its own token
    fmt = NextTokenFormat(NoYes(qwen_tokenizer))
    with pytest.raises(InstanceError, match=r"^act\[0\]\.ok: labels \['yes', 'no'\] are not single tokens"):
        fmt.ask_piece(Ask("ok", (NOUL,)), None, "act[0].ok")
    assert len(fmt.ask_piece(Ask("s", (SCORE,), criteria=ScoreLevels(("a", "b"))), None, "s").labels) == 2


def test_make_format_checks_the_spec(qwen_tokenizer) -> None:
    vllm = Format("next_token", (("style", "vllm"),))
    assert isinstance(make_format(vllm, qwen_tokenizer), NextTokenFormat)
    with pytest.raises(SpecError, match="unknown format `logprob`"):
        make_format(Format("logprob"), qwen_tokenizer)
    with pytest.raises(SpecError, match="style='sglang' is not supported"):
        make_format(Format("next_token", (("style", "sglang"),)), qwen_tokenizer)
    with pytest.raises(SpecError, match="has no option `temperature`"):
        make_format(Format("next_token", (("temperature", 1),)), qwen_tokenizer)


def test_json_state_renders_with_ensure_ascii_false(fmt: NextTokenFormat) -> None:
    state = {"name": "Zoë", "tags": ["한", "🙂"]}
    assert fmt.prompt_text(state, [], Ask("ok", (NOUL,)), None, "ok").startswith(
        json.dumps(state, ensure_ascii=False) + "\n\n")


def test_check_tree_refuses_labels_the_tokenizer_cannot_read(qwen_tokenizer) -> None:
    class OneCharTokens(_Counting):
        def encode(self, text: str) -> list[int]:
            return [t for ch in text for t in self.inner.encode(ch)]
    tree = Tree("t", State("s", Bound(10)), (
        Ask("pick", (CHOICE,), criteria=ChoiceOptions((("a", None), ("b", None)))),
        Fork("f", Range(1, 2), None, (Ask("ok", (NOUL,)), Ask("many", (AskType("choice", Range(2, 40)),),
                                                             criteria=B))),
    ))
    NextTokenFormat(qwen_tokenizer).check_tree(tree)
    with pytest.raises(SpecError) as e:
        NextTokenFormat(OneCharTokens(qwen_tokenizer)).check_tree(tree)
    messages = [d.message for d in e.value.diagnostics]
    assert len(messages) == 2
    assert messages[0] == "ask `ok` (noul): labels ['yes', 'no'] are not single tokens for this tokenizer"
    assert messages[1] == "ask `many` (choice): this tokenizer has single-token labels for 26 options, not 40"


def test_a_template_whose_user_turn_ends_in_plain_text_is_refused(qwen_tokenizer) -> None:
    plain_end = _Counting(qwen_tokenizer)
    plain_end.chat = ChatPieces("<|im_start|>user\n", "\nassistant:", "")
    with pytest.raises(ModelError, match="must start with a special"):
        NextTokenFormat(plain_end)
