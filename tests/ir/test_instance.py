"""Instances: valid ones pass (and match the JSON Schema), every error kind names its exact path."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from flidec.frontend import parse_spec
from flidec.ir.errors import InstanceError
from flidec.ir.instance import (
    MAX_NESTING,
    MAX_TOKEN_BYTES,
    instance_schema,
    loads_instance,
    validate_instance,
    value_problems,
)

EXAMPLES = Path(__file__).parents[2] / "examples"


def example_tree(name: str):
    return parse_spec((EXAMPLES / f"{name}.flide").read_text()).trees[0]


def words(text: str) -> int:
    """A stand-in tokenizer: one token per whitespace-separated word."""
    return len(text.split())


PLANNER_OK = {
    "history": "user: book a flight\nassistant: searching",
    "next_tool": {"instructions": "Which tool?", "criteria": {"search": "web search", "book": None}},
    "action": [
        {"text": "search flights", "outcome": [{"text": "found 3"}, {"text": "found none"}]},
        {"text": "ask the user", "outcome": [{"text": "user answers"}]},
    ],
}
SYSTEMONE_OK = {
    "model": "jev-latest",
    "state": {"ticket": 17, "body": "printer on fire"},
    "questions": {
        "q 1": {"type": "noul", "instructions": "Is it urgent?", "criteria": {"true": "fire"}},
        "키": {"type": "choice", "criteria": {"IT": "hardware", "HR": None, "🎉": {"any": "json"}}},
        "s": {"type": "score", "instructions": ["a", "list"], "criteria": ["low", "mid", {"x": 1}]},
        "bare": {"type": "noul"},
    },
}
VALID = {
    "planner": PLANNER_OK,
    "systemone": SYSTEMONE_OK,
    "tool_router": {"conversation": "hi", "request": "add 2 and 2",
                    "call": [{"text": "calculator(2+2)",
                              "policy": {"instructions": "Which policy applies?",
                                         "criteria": {"ok": None, "deny": "blocked"}}}]},
    "lookahead": {"context": "start", "step1": [{"text": "a", "step2": [{"text": "b", "step3": [
        {"text": "c", "step4": [{"text": "d", "step5": [
            {"text": "e", "step6": [{"text": "f"}, {"text": "g"}]}]}]}]}]}]},
    "classifier": {"ticket": "my invoice is wrong",
                   "checks": {"refund": {"instructions": "Does it ask for a refund?"}}},
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_instances_pass_and_match_the_schema(name):
    tree = example_tree(name)
    validate_instance(tree, VALID[name], words)
    jsonschema.Draft202012Validator.check_schema(instance_schema(tree))
    jsonschema.validate(VALID[name], instance_schema(tree), cls=jsonschema.Draft202012Validator)


def problems(name: str, instance, count=words) -> list[str]:
    with pytest.raises(InstanceError) as e:
        validate_instance(example_tree(name), instance, count)
    return list(e.value.problems)


def test_token_bound_path_through_nested_forks():
    inst = {**PLANNER_OK, "action": [PLANNER_OK["action"][0]] * 4}
    inst["action"] = [*inst["action"][:3], {"text": "x", "outcome": [{"text": "y"}, {"text": "w " * 300}]}]
    assert problems("planner", inst) == ["action[3].outcome[1].text: 300 tokens over its bound 256"]


def test_token_bounds_unchecked_without_a_counter():
    inst = {**PLANNER_OK, "history": "w " * 20000}
    validate_instance(example_tree("planner"), inst)
    assert problems("planner", inst) == ["history: 20000 tokens over its bound 16384"]


def test_token_minimum():
    assert problems("tool_router", {**VALID["tool_router"], "request": ""}) == [
        "request: 0 tokens under its minimum 1"]


def test_every_problem_is_listed():
    inst = {"history": 5, "next_tool": {"criteria": {"a": None}}, "action": [], "extra": 1}
    assert problems("planner", inst) == [
        "history: expected a string, object or array, got number",
        "next_tool.criteria: a choice needs 2 to 32 options, got 1",
        "action: 0 branches, expected 1 to 16",
        "extra: unknown field; expected history, next_tool, action",
    ]


def test_missing_keys():
    assert problems("planner", {"action": [{"outcome": [{}]}]}) == [
        "history: missing; expected a string, object or array",
        "next_tool: missing; expected a question object",
        "action[0].text: missing; expected a string",
        "action[0].outcome[0].text: missing; expected a string",
    ]


def test_wrong_shapes():
    inst = {"history": "h", "next_tool": [], "action": {"text": "x"}}
    assert problems("planner", inst) == [
        "next_tool: expected a question object, got array",
        "action: expected a list of branches, got object",
    ]
    assert problems("planner", {**PLANNER_OK, "action": ["x"]}) == [
        "action[0]: expected a branch object, got string"]
    assert problems("planner", []) == ["instance: expected an object, got array"]


def test_unknown_field_in_a_branch():
    inst = {**PLANNER_OK, "action": [{"text": "a", "outcome": [{"text": "b"}], "safe": {}}]}
    assert problems("planner", inst) == ["action[0].safe: unknown field; expected text, outcome"]


def test_systemone_ignores_unknown_top_level_fields_only():
    validate_instance(example_tree("systemone"), {**SYSTEMONE_OK, "x_trace": 1, "stream": False})
    inst = {"state": "s", "questions": {"q 1": {"type": "noul", "weight": 2}}}
    assert problems("systemone", inst) == [
        'questions["q 1"].weight: unknown field; this question takes type, instructions, criteria']


def q(question) -> dict:
    return {"state": "s", "questions": {"q 1": question}}


def test_choice_option_count():
    assert problems("systemone", q({"type": "choice", "criteria": {"only": None}})) == [
        'questions["q 1"].criteria: a choice needs 2 to 255 options, got 1']


def test_choice_criteria_must_be_a_map():
    assert problems("systemone", q({"type": "choice", "criteria": ["a", "b"]})) == [
        'questions["q 1"].criteria: expected an object {option name: description or null}, got array']


def test_choice_criteria_missing():
    assert problems("systemone", q({"type": "choice"})) == [
        'questions["q 1"].criteria: missing; a choice lists its options as {name: description or null}']


def test_empty_option_name_and_bad_description():
    assert problems("systemone", q({"type": "choice", "criteria": {"": None, "b": 3}})) == [
        'questions["q 1"].criteria[""]: an option name is empty',
        'questions["q 1"].criteria["b"]: expected a description (string, object or array) or null, '
        'got number',
    ]


def test_score_map_form_rejected():
    assert problems("systemone", q({"type": "score", "criteria": {"0": "low", "1": "high"}})) == [
        'questions["q 1"].criteria: score levels are a list, low to high; the map form {"0": ...} '
        'is not accepted']


def test_score_level_count_and_level_type():
    assert problems("systemone", q({"type": "score", "criteria": ["a"] * 11})) == [
        'questions["q 1"].criteria: a score needs 2 to 10 levels, got 11']
    assert problems("systemone", q({"type": "score", "criteria": ["a", None]})) == [
        'questions["q 1"].criteria[1]: expected a string, object or array, got null']


def test_noul_criteria_forms():
    for ok in (None, {}, {"true": "t"}, {"false": ["f"]}, {"true": "t", "false": "f"}):
        validate_instance(example_tree("systemone"), q({"type": "noul", "criteria": ok}))
    assert problems("systemone", q({"type": "noul", "criteria": {"yes": "y"}})) == [
        'questions["q 1"].criteria.yes: unknown field; noul criteria describe "true" and "false"']
    assert problems("systemone", q({"type": "noul", "criteria": "yes"})) == [
        'questions["q 1"].criteria: expected null or an object {"true": ..., "false": ...}, got string']


def test_question_type():
    assert problems("systemone", q({"criteria": None})) == [
        'questions["q 1"].type: missing; expected "noul" or "choice" or "score"']
    assert problems("systemone", q({"type": "rank"})) == [
        'questions["q 1"].type: unknown type "rank"; expected "noul" or "choice" or "score"']
    assert problems("systemone", q({"type": 1})) == ['questions["q 1"].type: expected a string, got number']


def test_single_type_ask_takes_an_optional_matching_type():
    tree = example_tree("planner")
    validate_instance(tree, {**PLANNER_OK, "next_tool": {"type": "choice", **PLANNER_OK["next_tool"]}})
    assert problems("planner", {**PLANNER_OK, "next_tool": {"type": "noul"}}) == [
        'next_tool.type: unknown type "noul"; expected "choice"']


def test_instructions_type_and_bound():
    assert problems("systemone", q({"type": "noul", "instructions": 5})) == [
        'questions["q 1"].instructions: expected a string, object or array, got number']
    assert problems("systemone", q({"type": "noul", "instructions": "w " * 1025})) == [
        'questions["q 1"].instructions: 1025 tokens over its bound 1024']


def test_criteria_tokens_count_names_and_descriptions():
    crit = {f"o{i}": "w " * 100 for i in range(41)}  # 41 names + 4100 words
    assert problems("systemone", q({"type": "choice", "criteria": crit})) == [
        'questions["q 1"].criteria: 4141 tokens over its bound 4096']


def test_repeat_count_and_ids():
    assert problems("systemone", {"state": "s", "questions": {}}) == [
        "questions: 0 questions, expected 1 to 64"]
    assert problems("systemone", {"state": "s", "questions": {"": {"type": "noul"}}}) == [
        'questions[""]: a question id is a non-empty string']
    assert problems("systemone", {"state": "s", "questions": []}) == [
        "questions: expected an object {question id: question}, got array"]


def test_fields_not_bound_are_unknown():
    inst = {**VALID["classifier"], "checks": {"c": {"instructions": "?", "criteria": {"true": "t"}}}}
    assert problems("classifier", inst) == [
        'checks["c"].criteria: unknown field; this question takes type, instructions']


def test_fanout_exact_words():
    tree = parse_spec('model qwen3_5\nformat next_token(style="vllm")\ntree t {\n state s: text[..9]\n'
                      ' fork f[2] { ask a: noul "?" }\n}').trees[0]
    with pytest.raises(InstanceError) as e:
        validate_instance(tree, {"s": "x", "f": [{}]})
    assert e.value.problems == ("f: 1 branches, expected exactly 2",)


def test_schema_rejects_what_validation_rejects():
    schema = instance_schema(example_tree("systemone"))
    for bad in (q({"type": "score", "criteria": {"0": "a", "1": "b"}}),
                q({"type": "choice", "criteria": {"a": None}}), q({"type": "rank"}),
                q({"type": "noul", "weight": 1}), {"state": 3, "questions": {"a": {"type": "noul"}}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema, cls=jsonschema.Draft202012Validator)
    planner = instance_schema(example_tree("planner"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**PLANNER_OK, "extra": 1}, planner, cls=jsonschema.Draft202012Validator)


def test_docs_instances_are_valid():
    """Each example's instance in docs/LANGUAGE.md validates against that example."""
    import json
    import re

    doc = (EXAMPLES.parent / "docs" / "LANGUAGE.md").read_text()
    found = re.findall(r"\*\*(\w+)\*\*[^\n]*:\n```json\n(.*?)```", doc, re.DOTALL)
    assert sorted(name for name, _ in found) == sorted(VALID)
    for name, text in found:
        validate_instance(example_tree(name), json.loads(text), words)


# ---- rows no tree accepts: parsing and values (issue 23) ------------------------------------------------

SYSTEMONE_ROW = b'{"state": "s", "questions": {"a": {"type": "noul"}}}'


@pytest.mark.parametrize(("line", "problem"), [
    (b'{"state": "\xff"}', "not UTF-8 (byte 0xff at byte 12); save the file as UTF-8"),
    (b'{"state": ' + b"9" * 5000 + b"}", "an integer of 5000 digits; integers are limited to 4000 digits: "
     "write it as a string"),
    (b"[" * 100_000 + b"]" * 100_000,
     "arrays and objects nested too deeply (the limit is 128 levels); flatten it"),
    (b'{"state": NaN}', "NaN is not JSON; write null or a string"),
    (b'{"state": Infinity}', "Infinity is not JSON; write null or a string"),
    (b'{"state": ', "not JSON (Expecting value at column 11)"),
])
def test_lines_that_are_not_json_name_why(line, problem):
    with pytest.raises(InstanceError) as e:
        loads_instance(line)
    assert e.value.problems == (problem,)


def test_a_4000_digit_integer_parses():
    assert loads_instance(b"[" + b"9" * 4000 + b"]") == [10**4000 - 1]


def test_duplicate_keys_are_named_by_path():
    row = (b'{"state": "s", "questions": {"a": {"type": "noul"}, "a": {"type": "choice", "criteria": '
           b'{"red": null, "red": "the colour", "blue": null}}}}')  # the second "a" is the one kept
    obj = loads_instance(row)
    assert value_problems(obj) == ["questions.a: duplicate key; write each key once",
                                   "questions.a.criteria.red: duplicate key; write each key once"]
    with pytest.raises(InstanceError) as e:
        validate_instance(example_tree("systemone"), obj, words)
    assert e.value.problems == tuple(value_problems(obj))


@pytest.mark.parametrize(("row", "path"), [
    (b'{"state": "x\\ud800", "questions": {"a": {"type": "noul"}}}', "state"),
    (b'{"state": "x", "questions": {"a\\udc00": {"type": "noul"}}}', 'questions["a\\udc00"]'),
    (b'{"state": "x", "questions": {"a": {"type": "choice", "criteria": {"r\\ud83d": null, "b": null}}}}',
     'questions.a.criteria["r\\ud83d"]'),
    (b'{"state": ["ok", {"k": "\\udfff"}], "questions": {"a": {"type": "noul"}}}', "state[1].k"),
])
def test_lone_surrogates_are_refused_before_tokenizing(row, path):
    def tokenizer(text: str) -> int:
        text.encode("utf-8")  # what a real tokenizer does first: raises on a lone surrogate
        return 1

    with pytest.raises(InstanceError) as e:
        validate_instance(example_tree("systemone"), loads_instance(row), tokenizer)
    (problem,) = e.value.problems
    assert problem.startswith(f"{path}: ") and "lone surrogate" in problem
    assert "fix the text's encoding" in problem
    problem.encode("utf-8")  # the message itself can be written


def test_a_surrogate_pair_is_one_character_and_passes():
    obj = loads_instance(b'{"state": "\\ud83d\\ude00", "questions": {"a": {"type": "noul"}}}')
    assert obj["state"] == "\U0001f600"
    validate_instance(example_tree("systemone"), obj, words)


def test_values_built_in_python_are_checked_too():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    (problem,) = value_problems({"state": deep})
    assert problem.endswith(f"arrays and objects nested over {MAX_NESTING} levels deep; flatten it")
    assert value_problems({"state": 10**4100}) == [
        "state: an integer of 13620 bits; integers are limited to 4000 digits: write it as a string"]
    assert value_problems(SYSTEMONE_OK) == []


def test_paths_spell_python_keys_and_deep_indices():
    obj = {"state": [[0, {3: "\ud800"}]], "questions": {"a b": [1, 10**4100]}}
    assert [p.split(":")[0] for p in value_problems(obj)] == ['state[0][1]["3"]', 'questions["a b"][1]']


def test_values_false_skips_value_problems_only():
    tree = example_tree("systemone")
    bad = loads_instance(b'{"state": "x", "state": "y", "questions": {"a": {"type": "noul"}}}')
    with pytest.raises(InstanceError):
        validate_instance(tree, bad, words)
    validate_instance(tree, bad, values=False)  # what the runtime's later passes skip: checked before
    with pytest.raises(InstanceError) as e:
        validate_instance(tree, {"state": "x"}, values=False)
    assert any(p.startswith("questions") for p in e.value.problems)


def test_oversized_texts_are_refused_by_bytes_without_tokenizing():
    def never(text: str) -> int:
        raise AssertionError("tokenized")

    tree = example_tree("systemone")
    bound = tree.state.bound.max_tokens
    big = "x" * (bound * MAX_TOKEN_BYTES + 1)
    with pytest.raises(InstanceError) as e:
        validate_instance(tree, {"state": big, "questions": {"a": {"type": "noul"}}}, never)
    assert e.value.problems == (f"state: {len(big)} bytes, more than its bound of {bound} tokens can hold "
                                f"(at most {MAX_TOKEN_BYTES} bytes a token); shorten it",)
    with pytest.raises(InstanceError):  # the runtime validates without a counter: the byte rule still holds
        validate_instance(tree, {"state": big, "questions": {"a": {"type": "noul"}}})
    validate_instance(tree, {"state": big[1:], "questions": {"a": {"type": "noul"}}})


def test_max_token_bytes_covers_the_qwen35_vocabulary(qwen_tokenizer):
    from flidec.testing.tokenizer import bytes_to_unicode

    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    longest = 0
    for token_id in range(qwen_tokenizer.vocab_size):
        token = qwen_tokenizer.id_to_token(token_id)
        if token is None:
            continue
        size = len(token) if all(c in byte_of for c in token) else len(token.encode("utf-8"))
        longest = max(longest, size)
    assert longest == MAX_TOKEN_BYTES
