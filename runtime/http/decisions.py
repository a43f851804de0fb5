"""POST /v1/decisions: OpenAI's Decisions shape, answered by the artifact's wire="systemone" tree.

Consumes `{model, input, questions, prompt_cache_key?}`: `input` a string or a list of messages and tool
items (text and JSON parts; rendered one item a line), 1-400 `questions` of `predicate` {instructions},
`choice` {instructions, choices: [{value, description?}] 2-255} and `score` {instructions, levels: [{label,
description?}] 2-10}, each with an optional `name`. Produces System One instances (the questions in runs of
as many as the tree asks, `prompt_cache_key` as their `x_session`) and, from their responses, the Decision:
answers in question order, `usage` with `input_tokens_details.cached_tokens` (state tokens resumed from
saved states, counted in every question's prompt as input_tokens counts them). Problems raise ApiError
(422 `detail[]` at the Decisions path).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flidec.ir.tree import Tree
from flidec.runtime.http.errors import ApiError, ValidationFailed
from flidec.runtime.http.systemone import check_model, checked_instance

MAX_QUESTIONS = 400
QUESTION_FIELDS = {"predicate": {"instructions"}, "choice": {"instructions", "choices"},
                   "score": {"instructions", "levels"}}
ITEM_TEXT = {"function_call": "arguments", "custom_tool_call": "input"}  # tool calls: the field that is text
ITEM_OUTPUT = ("function_call_output", "custom_tool_call_output")
ROLES = ("user", "developer", "system", "assistant")


@dataclass(frozen=True, slots=True)
class Asked:
    """One question as asked: its type, name and, for choices, the typed values in order; for scores, the
    level labels."""

    kind: str
    name: str | None
    values: tuple[str | bool, ...] = ()
    labels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DecisionsRequest:
    instances: list[dict]  # System One instances, each a run of at most the tree's questions
    asked: list[Asked]  # every question, in order
    runs: list[int]  # questions per instance


class _Problems:
    def __init__(self) -> None:
        self.detail: list[dict] = []

    def add(self, loc: Sequence[str | int], msg: str, kind: str = "value_error") -> None:
        self.detail.append({"loc": ["body", *loc], "msg": msg, "type": kind})


def _type(v: Any) -> str:
    """A JSON value's type, as problems name it."""
    if v is None:
        return "null"
    for t, word in ((bool, "boolean"), ((int, float), "number"), (str, "string"), (list, "array"),
                    (dict, "object")):
        if isinstance(v, t):
            return word
    return type(v).__name__


def _parts_text(parts: Any, loc: list[str | int], p: _Problems, kinds: tuple[str, ...]) -> str:
    """A string, or a list of parts: input_text (its text), input_json (its data as JSON) and, where the
    item allows them, output_text / refusal; images are refused (this server reads text)."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list) or not parts:
        p.add(loc, f"expected a string or a non-empty list of parts, got {_type(parts)}", "type_error")
        return ""
    texts = []
    for i, part in enumerate(parts):
        where = [*loc, i]
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("input_image", "image"):
            p.add([*where, "type"], "image parts are not supported: this server reads text only")
        elif kind not in kinds:
            p.add([*where, "type"], f"expected a part of type {' or '.join(kinds)}, got {json.dumps(kind)}")
        elif kind == "input_json":
            data = part.get("data")
            if not isinstance(data, (dict, list)):
                p.add([*where, "data"], f"expected an object or array, got {_type(data)}", "type_error")
            else:
                texts.append(json.dumps(data, ensure_ascii=False))
        else:
            field = {"input_text": "text", "output_text": "text", "refusal": "refusal"}[kind]
            value = part.get(field)
            if not isinstance(value, str):
                p.add([*where, field], f"expected a string, got {_type(value)}", "type_error")
            else:
                texts.append(value)
    return "\n".join(texts)


def render_input(value: Any, p: _Problems) -> str:
    """The state text: a string as is; a list one item a line (`role: text`, tool calls and their
    outputs by call id); a lone user message its text alone, as the same string input would be."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        p.add(["input"], f"expected a string or a non-empty list of messages, got {_type(value)}",
              "type_error")
        return ""
    lines = []
    for i, item in enumerate(value):
        loc: list[str | int] = ["input", i]
        if not isinstance(item, Mapping):
            p.add(loc, f"expected a message object, got {_type(item)}", "type_error")
            continue
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                p.add([*loc, "role"], f"expected one of {', '.join(ROLES)}, got {json.dumps(role)}")
                continue
            kinds = ("output_text", "refusal") if role == "assistant" else \
                ("input_text", "input_json") if role == "user" else ("input_text",)
            text = _parts_text(item.get("content"), [*loc, "content"], p, kinds)
            lines.append(text if len(value) == 1 and role == "user" else f"{role}: {text}")
        elif kind in ITEM_TEXT:
            name, text = item.get("name"), item.get(ITEM_TEXT[kind])
            if not all(isinstance(v, str) for v in (name, text, item.get("call_id"))):
                p.add(loc, f"a {kind} needs string call_id, name and {ITEM_TEXT[kind]}", "type_error")
                continue
            lines.append(f"{kind} {item['call_id']} {name}: {text}")
        elif kind in ITEM_OUTPUT:
            if not isinstance(item.get("call_id"), str):
                p.add([*loc, "call_id"], "expected a string", "type_error")
                continue
            text = _parts_text(item.get("output"), [*loc, "output"], p, ("input_text",))
            lines.append(f"{kind} {item['call_id']}: {text}")
        else:
            p.add([*loc, "type"], f"unknown input item type {json.dumps(kind)}")
    return "\n".join(lines)


def _listed(q: Mapping, field: str, key: str, types: tuple[type, ...], lo: int, hi: int,
            loc: list[str | int], p: _Problems) -> list[tuple[int, Any, str | None]] | None:
    """A question's choices or levels: (index, `key`'s value, description) of each well-formed entry ({key:
    one of `types`, description?: string}; the others are recorded as problems), or None when `field` is not
    a list of `lo` to `hi` entries."""
    items = q.get(field)
    if not isinstance(items, list) or not lo <= len(items) <= hi:
        got = len(items) if isinstance(items, list) else _type(items)
        p.add([*loc, field], f"expected {lo} to {hi} {field}, got {got}")
        return None
    what = " or ".join({str: "string", bool: "boolean"}[t] for t in types)
    out = []
    for i, item in enumerate(items):
        value = item.get(key) if isinstance(item, Mapping) else None
        desc = item.get("description") if isinstance(item, Mapping) else None
        if not isinstance(value, types) or (desc is not None and not isinstance(desc, str)):
            p.add([*loc, field, i], f"expected {{{key}: {what}, description?: string}}", "type_error")
            continue
        out.append((i, value, desc))
    return out


def _question(q: Any, loc: list[str | int], p: _Problems) -> tuple[dict, Asked] | None:
    """One Decisions question as a System One question (choice values become option names: booleans as
    "true" / "false"), or None after recording its problems."""
    if not isinstance(q, Mapping):
        p.add(loc, f"expected a question object, got {_type(q)}", "type_error")
        return None
    kind = q.get("type")
    if kind not in QUESTION_FIELDS:
        p.add([*loc, "type"], f"expected \"predicate\", \"choice\" or \"score\", got {json.dumps(kind)}")
        return None
    before = len(p.detail)
    for key in q:
        if key not in {"type", "name", *QUESTION_FIELDS[kind]}:
            p.add([*loc, key], f"unknown field; a {kind} takes type, name, "
                  f"{', '.join(sorted(QUESTION_FIELDS[kind]))}", "extra_forbidden")
    name = q.get("name")
    if name is not None and not isinstance(name, str):
        p.add([*loc, "name"], f"expected a string, got {_type(name)}", "type_error")
    if "instructions" not in q:
        p.add([*loc, "instructions"], "missing", "missing")
    instructions = _parts_text(q.get("instructions", ""), [*loc, "instructions"], p,
                               ("input_text", "input_json"))
    out: dict[str, Any] = {"type": "noul" if kind == "predicate" else kind, "instructions": instructions}
    asked = Asked(kind, name if isinstance(name, str) else None)
    if kind == "choice":
        listed = _listed(q, "choices", "value", (str, bool), 2, 255, loc, p)
        if listed is None:
            return None
        criteria: dict[str, Any] = {}
        values = []
        for i, value, desc in listed:
            option = ("true" if value else "false") if isinstance(value, bool) else value
            if option in criteria:
                p.add([*loc, "choices", i, "value"], f"the value {json.dumps(value)} is given twice (a "
                      "boolean and a string of the same text name one option here)")
                continue
            criteria[option] = desc
            values.append(value)
        out["criteria"] = criteria
        asked = Asked(kind, asked.name, values=tuple(values))
    elif kind == "score":
        listed = _listed(q, "levels", "label", (str,), 2, 10, loc, p)
        if listed is None:
            return None
        out["criteria"] = [label if not desc else f"{label}: {desc}" for _, label, desc in listed]
        asked = Asked(kind, asked.name, labels=tuple(label for _, label, _ in listed))
    return (out, asked) if len(p.detail) == before else None


def decisions_request(tree: Tree | None, body: Any, served: Iterable[str]) -> DecisionsRequest:
    if tree is None:
        raise ApiError(404, "not_found_error", "this artifact has no wire=\"systemone\" tree to answer "
                       "Decisions with: POST its instances to /v1/trees/{tree}")
    if not isinstance(body, Mapping):
        raise ValidationFailed([{"loc": ["body"], "msg": "expected a JSON object {model, input, questions}",
                                 "type": "type_error"}])
    check_model(body, served)
    p = _Problems()
    if "input" not in body:
        p.add(["input"], "missing", "missing")
    state = render_input(body.get("input", ""), p)
    questions = body.get("questions")
    if not isinstance(questions, list) or not 1 <= len(questions) <= MAX_QUESTIONS:
        got = len(questions) if isinstance(questions, list) else _type(questions)
        p.add(["questions"], f"expected a list of 1 to {MAX_QUESTIONS} questions, got {got}")
        questions = []
    converted = [_question(q, ["questions", i], p) for i, q in enumerate(questions)]
    key = body.get("prompt_cache_key")
    if key is not None and (not isinstance(key, str) or not key):
        p.add(["prompt_cache_key"], "expected a non-empty string", "type_error")
    if p.detail:
        raise ValidationFailed(p.detail)
    per = _questions_per_instance(tree)
    instances, runs = [], []
    for start in range(0, len(converted), per):
        run = converted[start:start + per]
        inst: dict[str, Any] = {"state": state, "questions": {str(start + k): q for k, (q, _) in
                                                              enumerate(run)}}  # type: ignore[misc]
        if key:
            inst["x_session"] = key
        try:
            checked_instance(tree, inst)
        except ValidationFailed as e:
            raise ValidationFailed([_decisions_loc(d) for d in e.detail]) from None
        instances.append(inst)
        runs.append(len(run))
    return DecisionsRequest(instances, [a for _, a in converted], runs)  # type: ignore[misc]


def _questions_per_instance(tree: Tree) -> int:
    """The most questions one instance of the tree asks (its repeated ask's upper bound)."""
    for node in tree.body:
        repeat = getattr(node, "repeat", None)
        if repeat is not None:
            return int(repeat.hi)
    return 1


def _decisions_loc(d: dict) -> dict:
    """A System One instance's problem location as the Decisions request's."""
    loc = list(d["loc"][1:])
    if loc[:1] == ["state"]:
        loc[0] = "input"
    elif loc[:1] == ["questions"] and len(loc) > 1 and str(loc[1]).isdigit():
        loc[1] = int(loc[1])
        if loc[2:3] == ["criteria"]:
            loc[2] = "choices"
    return {**d, "loc": ["body", *loc]}


def decision_response(request: DecisionsRequest, responses: Sequence[Mapping], reused: Sequence[int],
                      model: str) -> dict:
    """The Decision from the instances' System One responses (in order) and their resumed state tokens."""
    answers: list[dict] = []
    input_tokens = cached = 0
    index = 0
    for response, run, held in zip(responses, request.runs, reused, strict=True):
        input_tokens += int(response["usage"]["input_tokens"])
        cached += held * run
        for _ in range(run):
            answers.append(_answer(request.asked[index], response["answers"][str(index)]))
            index += 1
    cached = min(cached, input_tokens)
    usage = {"input_tokens": input_tokens,
             "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
             "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": input_tokens}
    return {"answers": answers, "model": model, "usage": usage}


def _answer(asked: Asked, a: Mapping) -> dict:
    if asked.kind == "predicate":
        return {"type": "predicate", "name": asked.name, "probability": a["noul"]}
    if asked.kind == "choice":
        by_option = {("true" if v else "false") if isinstance(v, bool) else v: v for v in asked.values}
        probs = a["probabilities"]
        return {"type": "choice", "name": asked.name, "choice": by_option[a["choice"]],
                "confidence": a["confidence"],
                "probabilities": [{"value": v, "probability": probs[o]} for o, v in by_option.items()]}
    probs = a["probabilities"]
    return {"type": "score", "name": asked.name, "score": a["score"], "confidence": a["confidence"],
            "probabilities": [{"value": i, "label": label, "probability": probs[str(i)]}
                              for i, label in enumerate(asked.labels)]}

