"""Instances: the JSON of one request for a tree, its JSON Schema, and its validation.

Consumes a Tree (verified) and an instance (parsed JSON); produces the instance's JSON Schema (draft
2020-12) or raises InstanceError listing every problem with its path (`action[3].outcome[0].text: 300
tokens over its bound 256`). Keys are node names: the state's (a string, or any object/array, rendered as
JSON), each named bound text's (a string), each fork's (a list of branch objects: "text" for the branch's
leading text plus its body's keys), each ask's that has anything bound (a question object in System One's
shape, ../shared/API.md) and each repeated ask's (an object {question id: question object}). Token
bounds are checked only when a token counter is given; an object or array counts as its compact JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from flidec.ir.errors import InstanceError
from flidec.ir.tree import Ask, AskType, Bound, Fork, Node, Text, Tree

CountTokens = Callable[[str], int]
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_VALUE = ["string", "object", "array"]  # what System One accepts as instructions, descriptions, levels


def takes_key(node: Node) -> bool:
    """Whether `node` has a key in its scope's instance object."""
    if isinstance(node, Text):
        return isinstance(node.value, Bound) and node.name is not None
    if isinstance(node, Fork):
        return True
    return node.repeat is not None or _question_bound(node)


def _question_bound(ask: Ask) -> bool:
    return len(ask.types) > 1 or isinstance(ask.instructions, Bound) or isinstance(ask.criteria, Bound)


# ---- schema ---------------------------------------------------------------------------------------------


def instance_schema(tree: Tree) -> dict[str, Any]:
    """The JSON Schema of `tree`'s instances. Token bounds are stated in descriptions (not checkable)."""
    props: dict[str, Any] = {tree.state.name: {"type": _VALUE, "description": _tokens_words(tree.state.bound)
                                               + "; an object or array is rendered as JSON"}}
    schema = _object_schema(props, tree.body, closed=tree.wire != "systemone")
    return {"$schema": SCHEMA_DIALECT, "title": f"an instance of tree {tree.name}", **schema}


def _object_schema(props: dict[str, Any], body: tuple[Node, ...], closed: bool) -> dict[str, Any]:
    for node in body:
        if takes_key(node):
            props[node.name] = _node_schema(node)  # type: ignore[index]
    out: dict[str, Any] = {"type": "object", "properties": props, "required": list(props)}
    if closed:
        out["additionalProperties"] = False
    return out


def _node_schema(node: Node) -> dict[str, Any]:
    if isinstance(node, Text):
        return {"type": "string", "description": _tokens_words(node.value)}  # type: ignore[arg-type]
    if isinstance(node, Fork):
        props = {"text": {"type": "string", "description": _tokens_words(node.text)}} if node.text else {}
        return {"type": "array", "minItems": node.fanout.lo, "maxItems": node.fanout.hi,
                "items": _object_schema(props, node.body, closed=True)}
    question = _question_schema(node)
    if node.repeat is None:
        return question
    return {"type": "object", "minProperties": node.repeat.lo, "maxProperties": node.repeat.hi,
            "propertyNames": {"minLength": 1}, "additionalProperties": question}


def _question_schema(ask: Ask) -> dict[str, Any]:
    kinds = [t.kind for t in ask.types]
    props: dict[str, Any] = {"type": {"enum": kinds}}
    required = ["type"] if len(kinds) > 1 else []
    if isinstance(ask.instructions, Bound):
        props["instructions"] = {"type": _VALUE + ["null"], "description": _tokens_words(ask.instructions)}
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if isinstance(ask.criteria, Bound):
        if len(ask.types) == 1:
            props["criteria"] = _criteria_schema(ask.types[0])
            if kinds[0] != "noul":
                required.append("criteria")
        else:
            props["criteria"] = {}
            out["allOf"] = [
                {"if": {"properties": {"type": {"const": t.kind}}, "required": ["type"]},
                 "then": {"properties": {"criteria": _criteria_schema(t)},
                          **({"required": ["criteria"]} if t.kind != "noul" else {})}}
                for t in ask.types
            ]
    out["required"] = required
    return out


def _criteria_schema(t: AskType) -> dict[str, Any]:
    lo, hi = t.options.lo, t.options.hi
    if t.kind == "noul":
        return {"type": ["object", "null"], "properties": {"true": {"type": _VALUE}, "false": {"type": _VALUE}},
                "additionalProperties": False}
    if t.kind == "choice":
        return {"type": "object", "minProperties": lo, "maxProperties": hi, "propertyNames": {"minLength": 1},
                "additionalProperties": {"type": _VALUE + ["null"]},
                "description": "option name -> description or null, in order"}
    return {"type": "array", "minItems": lo, "maxItems": hi, "items": {"type": _VALUE},
            "description": "level descriptions, low to high"}


def _tokens_words(b: Bound | None) -> str:
    if b is None:
        return ""
    if b.min_tokens:
        return f"{b.min_tokens} to {b.max_tokens} tokens"
    return f"at most {b.max_tokens} tokens"


# ---- validation -----------------------------------------------------------------------------------------


def validate_instance(tree: Tree, instance: Any, count_tokens: CountTokens | None = None) -> None:
    """Raise InstanceError listing every problem of `instance`; return None when it fits `tree`."""
    problems = list(_Validator(count_tokens).tree(tree, instance))
    if problems:
        raise InstanceError(problems)


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _count_words(lo: int, hi: int) -> str:
    return f"exactly {lo}" if lo == hi else f"{lo} to {hi}"


def _field(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _id(path: str, key: str) -> str:
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _is_value(v: Any) -> bool:
    return isinstance(v, (str, dict, list))


def render_value(v: Any) -> str:
    """How a state, instruction or description that is a JSON object or array becomes prompt text (System
    One renders such values as JSON); token bounds are checked on exactly this text."""
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


class _Validator:
    def __init__(self, count_tokens: CountTokens | None):
        self.count_tokens = count_tokens

    def tokens(self, path: str, texts: list[Any], bound: Bound) -> Iterator[str]:
        if self.count_tokens is None:
            return
        n = sum(self.count_tokens(render_value(t)) for t in texts)
        if n > bound.max_tokens:
            yield f"{path}: {n} tokens over its bound {bound.max_tokens}"
        elif n < bound.min_tokens:
            yield f"{path}: {n} tokens under its minimum {bound.min_tokens}"

    def tree(self, tree: Tree, instance: Any) -> Iterator[str]:
        if not isinstance(instance, dict):
            yield f"instance: expected an object, got {_json_type(instance)}"
            return
        state = tree.state

        def check_state(path: str, v: Any) -> Iterator[str]:
            if not _is_value(v):
                yield f"{path}: expected a string, object or array, got {_json_type(v)}"
            else:
                yield from self.tokens(path, [v], state.bound)

        yield from self.scope("", instance, [(state.name, "a string, object or array", check_state)], tree.body,
                              closed=tree.wire != "systemone")

    def scope(self, path: str, obj: dict[str, Any], extra: list[tuple[str, str, Any]], body: tuple[Node, ...],
              closed: bool) -> Iterator[str]:
        entries = list(extra) + [(n.name, _expectation(n), self.checker(n)) for n in body if takes_key(n)]
        known = {name for name, _, _ in entries}
        for name, what, check in entries:
            p = _field(path, name)
            if name not in obj:
                yield f"{p}: missing; expected {what}"
            else:
                yield from check(p, obj[name])
        if closed:
            for key in obj:
                if key not in known:
                    fields = ", ".join(name for name, _, _ in entries) or "no fields"
                    yield f"{_field(path, key)}: unknown field; expected {fields}"

    def checker(self, node: Node) -> Callable[[str, Any], Iterator[str]]:
        if isinstance(node, Text):
            bound = node.value
            assert isinstance(bound, Bound)
            return lambda p, v: self.text(p, v, bound)
        if isinstance(node, Fork):
            return lambda p, v: self.fork(p, v, node)
        if node.repeat is not None:
            return lambda p, v: self.repeated(p, v, node)
        return lambda p, v: self.question(p, v, node)

    def text(self, path: str, v: Any, bound: Bound) -> Iterator[str]:
        if not isinstance(v, str):
            yield f"{path}: expected a string, got {_json_type(v)}"
        else:
            yield from self.tokens(path, [v], bound)

    def fork(self, path: str, v: Any, fork: Fork) -> Iterator[str]:
        if not isinstance(v, list):
            yield f"{path}: expected a list of branches, got {_json_type(v)}"
            return
        lo, hi = fork.fanout.lo, fork.fanout.hi
        if not lo <= len(v) <= hi:
            yield f"{path}: {len(v)} branches, expected {_count_words(lo, hi)}"
        extra = []
        if fork.text is not None:
            text_bound = fork.text
            extra.append(("text", "a string", lambda p, x: self.text(p, x, text_bound)))
        for i, branch in enumerate(v):
            p = f"{path}[{i}]"
            if not isinstance(branch, dict):
                yield f"{p}: expected a branch object, got {_json_type(branch)}"
            else:
                yield from self.scope(p, branch, extra, fork.body, closed=True)

    def repeated(self, path: str, v: Any, ask: Ask) -> Iterator[str]:
        if not isinstance(v, dict):
            yield f"{path}: expected an object {{question id: question}}, got {_json_type(v)}"
            return
        assert ask.repeat is not None
        lo, hi = ask.repeat.lo, ask.repeat.hi
        if not lo <= len(v) <= hi:
            yield f"{path}: {len(v)} questions, expected {_count_words(lo, hi)}"
        for key, q in v.items():
            if key == "":
                yield f"{_id(path, key)}: a question id is a non-empty string"
            yield from self.question(_id(path, key), q, ask)

    def question(self, path: str, q: Any, ask: Ask) -> Iterator[str]:
        if not isinstance(q, dict):
            yield f"{path}: expected a question object, got {_json_type(q)}"
            return
        kinds = [t.kind for t in ask.types]
        allowed = ["type"]
        if isinstance(ask.instructions, Bound):
            allowed.append("instructions")
        if isinstance(ask.criteria, Bound):
            allowed.append("criteria")
        for key in q:
            if key not in allowed:
                yield f"{_field(path, key)}: unknown field; this question takes {', '.join(allowed)}"
        t: AskType | None = ask.types[0] if len(ask.types) == 1 else None
        if "type" in q:
            kind = q["type"]
            if not isinstance(kind, str):
                yield f"{path}.type: expected a string, got {_json_type(kind)}"
                t = None
            elif kind not in kinds:
                words = " or ".join(json.dumps(k) for k in kinds)
                yield f"{path}.type: unknown type {json.dumps(kind, ensure_ascii=False)}; expected {words}"
                t = None
            else:
                t = ask.types[kinds.index(kind)]
        elif len(kinds) > 1:
            yield f"{path}.type: missing; expected {' or '.join(json.dumps(k) for k in kinds)}"
        instr = ask.instructions
        if isinstance(instr, Bound) and q.get("instructions") is not None:
            v = q["instructions"]
            if not _is_value(v):
                yield f"{path}.instructions: expected a string, object or array, got {_json_type(v)}"
            else:
                yield from self.tokens(f"{path}.instructions", [v], instr)
        if isinstance(ask.criteria, Bound) and t is not None:
            yield from self.criteria(f"{path}.criteria", q.get("criteria"), "criteria" in q, t, ask.criteria)

    def criteria(self, path: str, c: Any, present: bool, t: AskType, bound: Bound) -> Iterator[str]:
        lo, hi = t.options.lo, t.options.hi
        texts: list[Any] = []
        if t.kind == "noul":
            if c is None:
                return
            if not isinstance(c, dict):
                yield f'{path}: expected null or an object {{"true": ..., "false": ...}}, got {_json_type(c)}'
                return
            for key, desc in c.items():
                if key not in ("true", "false"):
                    yield f'{_field(path, key)}: unknown field; noul criteria describe "true" and "false"'
                elif not _is_value(desc):
                    yield f"{_field(path, key)}: expected a string, object or array, got {_json_type(desc)}"
                else:
                    texts.append(desc)
        elif t.kind == "choice":
            if not present or c is None:
                yield f"{path}: missing; a choice lists its options as {{name: description or null}}"
                return
            if not isinstance(c, dict):
                yield (f"{path}: expected an object {{option name: description or null}}, "
                       f"got {_json_type(c)}")
                return
            if not lo <= len(c) <= hi:
                yield f"{path}: a choice needs {_count_words(lo, hi)} options, got {len(c)}"
            for name, desc in c.items():
                if name == "":
                    yield f"{_id(path, name)}: an option name is empty"
                if desc is not None and not _is_value(desc):
                    yield f"{_id(path, name)}: expected a description (string, object or array) or null, " \
                          f"got {_json_type(desc)}"
                texts.append(name)
                if desc is not None:
                    texts.append(desc)
        else:
            if not present or c is None:
                yield f"{path}: missing; a score lists its levels, low to high"
                return
            if isinstance(c, dict):
                yield f'{path}: score levels are a list, low to high; the map form {{"0": ...}} is not accepted'
                return
            if not isinstance(c, list):
                yield f"{path}: expected a list of levels, got {_json_type(c)}"
                return
            if not lo <= len(c) <= hi:
                yield f"{path}: a score needs {_count_words(lo, hi)} levels, got {len(c)}"
            for i, level in enumerate(c):
                if not _is_value(level):
                    yield f"{path}[{i}]: expected a string, object or array, got {_json_type(level)}"
                else:
                    texts.append(level)
        yield from self.tokens(path, texts, bound)


def _expectation(node: Node) -> str:
    if isinstance(node, Text):
        return "a string"
    if isinstance(node, Fork):
        return f"a list of {_count_words(node.fanout.lo, node.fanout.hi)} branches"
    if node.repeat is not None:
        return f"an object of {_count_words(node.repeat.lo, node.repeat.hi)} questions"
    return "a question object"
