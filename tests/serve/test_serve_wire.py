"""The server's wire pieces without a server: problem paths to `detail[].loc`, which runtime problems are 413
(the phrases held to the runtime's own messages), error records to statuses, the Decisions request's
checks and rendering, and the Decision assembled from System One responses."""

from __future__ import annotations

from pathlib import Path

import pytest

from flidec.runtime.http import errors
from flidec.runtime.http.auth import Keys
from flidec.runtime.http.decisions import Asked, DecisionsRequest, decision_response, decisions_request
from flidec.runtime.http.errors import ApiError, ValidationFailed

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("problem", "loc", "msg"), [
    ('questions["a b"].criteria[2]: expected a string', ["questions", "a b", "criteria", 2],
     "expected a string"),
    ('questions["🎯"].type: unknown type "x"', ["questions", "🎯", "type"], 'unknown type "x"'),
    ('questions["say \\"hi\\": now"].type: missing', ["questions", 'say "hi": now', "type"], "missing"),
    ("state: missing; expected a string", ["state"], "missing; expected a string"),
    ("action[0].outcome[1].text: 300 tokens", ["action", 0, "outcome", 1, "text"], "300 tokens"),
    ("instance: expected an object, got array", [], "expected an object, got array"),
    ("not JSON (Expecting value at column 1)", [], "not JSON (Expecting value at column 1)"),
])
def test_problem_paths_become_locations(problem, loc, msg) -> None:
    assert errors.split_path(problem) == (loc, msg)
    (d,) = errors.from_problems([problem]).detail  # type: ignore[attr-defined]
    assert d["loc"] == ["body", *loc] and d["msg"] == msg


def test_the_413_phrases_are_the_runtime_s_own_messages() -> None:
    sources = "".join((ROOT / p).read_text(encoding="utf-8") for p in
                      ("ir/instance.py", "runtime/templates.py", "runtime/split.py"))
    for marker in errors.OVER_BOUND:
        assert marker in sources, marker
    assert errors.from_problems(["state: 9 bytes, more than its bound of 1 tokens can hold"]).status == 413
    assert errors.from_problems(["state: 40000 tokens, over the compiled bound of 32768"]).status == 413
    assert errors.from_problems(['questions["q"].criteria: 4097 tokens over its bound 4096']).status == 413
    assert errors.from_problems(["state: 3 tokens under its minimum 4"]).status == 422


def test_error_records_map_to_statuses() -> None:
    def status(kind: str) -> int:
        return errors.from_record({"error": {"type": kind, "problems": ["x"]}}).status

    assert (status("InstanceError"), status("DeadlineExceeded"), status("RuntimeError")) == (422, 503, 500)
    assert errors.is_record({"error": {"type": "InstanceError", "problems": []}})
    assert not errors.is_record({"error": {"type": "noul", "noul": 0.5}})  # a tree whose ask is named error
    assert errors.retry_headers(0.0002) == {"Retry-After": "1", "retry-after-ms": "1"}
    assert errors.retry_headers(2.5) == {"Retry-After": "3", "retry-after-ms": "2500"}


def test_keys_refuse_empty_and_padded_keys_and_empty_files(tmp_path) -> None:
    from flidec.ir.errors import FlideError

    with pytest.raises(FlideError):
        Keys([" k"])
    (tmp_path / "f").write_text("# only a comment\n")
    with pytest.raises(FlideError, match="holds no key"):
        Keys.load(files=[tmp_path / "f"])
    assert not Keys().required and Keys(["a"]).required
    with pytest.raises(ApiError) as e:
        Keys(["a"]).check("Basic YTph")
    assert e.value.status == 401 and e.value.headers["WWW-Authenticate"].startswith("Bearer")


def _decide(program, body: dict):
    from flidec.runtime.http.systemone import wire_tree

    return decisions_request(wire_tree(t.tree for t in program.trees.values()), body, ["flidec-tiny"])


def test_decisions_requests_become_system_one_instances(program) -> None:
    got = _decide(program, {"model": "jev-latest", "prompt_cache_key": "u1", "input": [
        {"role": "developer", "content": "Be strict."},
        {"role": "user", "content": [{"type": "input_text", "text": "Refund please"},
                                     {"type": "input_json", "data": {"order": 7}}]},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{\"id\": 7}"},
        {"type": "function_call_output", "call_id": "c1", "output": "paid"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]}],
        "questions": [{"type": "predicate", "instructions": [{"type": "input_text", "text": "Refund?"}]},
                      {"type": "choice", "instructions": "Team", "name": "team",
                       "choices": [{"value": False}, {"value": "billing", "description": "money"}]},
                      {"type": "score", "instructions": "Anger",
                       "levels": [{"label": "calm"}, {"label": "mad"}]}]})
    (inst,) = got.instances
    assert inst["state"] == ("developer: Be strict.\nuser: Refund please\n{\"order\": 7}\nfunction_call c1 "
                             "lookup: {\"id\": 7}\nfunction_call_output c1: paid\nassistant: Checking.")
    assert inst["x_session"] == "u1"
    assert inst["questions"] == {
        "0": {"type": "noul", "instructions": "Refund?"},
        "1": {"type": "choice", "instructions": "Team", "criteria": {"false": None, "billing": "money"}},
        "2": {"type": "score", "instructions": "Anger", "criteria": ["calm", "mad"]}}
    assert got.asked[1] == Asked("choice", "team", values=(False, "billing")) and got.runs == [3]
    alone = _decide(program, {"input": [{"role": "user", "content": "hi"}], "questions": [
        {"type": "predicate", "instructions": "x"}]})
    assert alone.instances[0]["state"] == "hi"  # a lone user message reads as the same string input


@pytest.mark.parametrize(("body", "loc"), [
    ({"questions": [{"type": "predicate", "instructions": "x"}]}, ["body", "input"]),
    ({"input": "x", "questions": []}, ["body", "questions"]),
    ({"input": "x", "questions": [{"type": "noul", "instructions": "x"}]}, ["body", "questions", 0, "type"]),
    ({"input": "x", "questions": [{"type": "predicate"}]}, ["body", "questions", 0, "instructions"]),
    ({"input": "x", "questions": [{"type": "predicate", "instructions": "x", "extra": 1}]},
     ["body", "questions", 0, "extra"]),
    ({"input": "x", "questions": [{"type": "choice", "instructions": "x", "choices": [{"value": "a"}]}]},
     ["body", "questions", 0, "choices"]),
    ({"input": "x", "questions": [{"type": "choice", "instructions": "x",
                                   "choices": [{"value": "a"}, {"value": 3}]}]},
     ["body", "questions", 0, "choices", 1]),
    ({"input": "x", "questions": [{"type": "score", "instructions": "x", "levels": [{"label": "a"}] * 11}]},
     ["body", "questions", 0, "levels"]),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}],
      "questions": [{"type": "predicate", "instructions": "x"}]}, ["body", "input", 0, "content", 0, "type"]),
    ({"input": [{"role": "robot", "content": "x"}],
      "questions": [{"type": "predicate", "instructions": "x"}]}, ["body", "input", 0, "role"]),
    ({"input": "x", "prompt_cache_key": 5, "questions": [{"type": "predicate", "instructions": "x"}]},
     ["body", "prompt_cache_key"]),
])
def test_bad_decisions_requests_name_their_path(program, body, loc) -> None:
    with pytest.raises(ValidationFailed) as e:
        _decide(program, body)
    assert loc in [d["loc"] for d in e.value.detail], e.value.detail


def test_the_decision_counts_cached_tokens_in_every_question_s_prompt() -> None:
    asked = [Asked("predicate", "a"), Asked("choice", None, values=(True, "x")),
             Asked("score", "s", labels=("lo", "hi"))]
    request = DecisionsRequest([{}, {}], asked, [2, 1])
    responses = [
        {"usage": {"input_tokens": 100}, "answers": {
            "0": {"type": "noul", "noul": 0.25},
            "1": {"type": "choice", "choice": "true", "confidence": 0.5,
                  "probabilities": {"true": 0.75, "x": 0.25}}}},
        {"usage": {"input_tokens": 60}, "answers": {
            "2": {"type": "score", "score": 0.5, "confidence": 0.0, "probabilities": {"0": 0.5, "1": 0.5}}}}]
    d = decision_response(request, responses, [30, 20], "m")
    assert d["usage"]["input_tokens"] == d["usage"]["total_tokens"] == 160
    assert d["usage"]["input_tokens_details"] == {"cached_tokens": 30 * 2 + 20, "cache_write_tokens": 0}
    assert d["answers"] == [
        {"type": "predicate", "name": "a", "probability": 0.25},
        {"type": "choice", "name": None, "choice": True, "confidence": 0.5,
         "probabilities": [{"value": True, "probability": 0.75}, {"value": "x", "probability": 0.25}]},
        {"type": "score", "name": "s", "score": 0.5, "confidence": 0.0,
         "probabilities": [{"value": 0, "label": "lo", "probability": 0.5},
                           {"value": 1, "label": "hi", "probability": 0.5}]}]
