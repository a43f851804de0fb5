"""Instances: the JSON of one request for a tree, its JSON Schema, and its validation.

Consumes a Tree (verified) and an instance (parsed JSON); produces the instance's JSON Schema (draft
2020-12) or raises InstanceError listing every problem with its path (`action[3].outcome[0].text: 300
tokens over its bound 256`). Keys are node names (`takes_key`). Token bounds are checked only when a token
counter is given; an object or array counts as its compact JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from flidec.ir.errors import InstanceError
from flidec.ir.tree import Ask, AskType, Bound, Fork, Node, Text, Tree

CountTokens = Callable[[str], int]
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# A token of Qwen3.5's vocabulary (every Qwen3.5 checkpoint shares it) is at most 128 bytes (128 spaces; the
# demo model's at most 14), so a text of N tokens has at most N * MAX_TOKEN_BYTES bytes: a text over that is
# refused by its length alone, before it is tokenized (tests/ir/test_instance.py checks the vocabulary).
MAX_TOKEN_BYTES = 128
MAX_NESTING = 128  # arrays and objects inside each other: far below what json and the validator recurse to
MAX_INT_DIGITS = 4000  # Python refuses to parse or print integers over 4,300 digits
MAX_INT_BITS = 13_288  # integers built in Python: at most 4,001 digits, so they always print
_VALUE = ["string", "object", "array"]  # what System One accepts as instructions, descriptions, levels


def takes_key(node: Node) -> bool:
    """Whether `node` has a key in its scope's instance object. Besides the state's (a string, or any
    object/array, rendered as JSON), keys are each named bound text's (a string), each fork's (a list of
    branch objects: "text" for the branch's leading text plus its body's keys), each ask's that has anything
    bound (a question object in System One's shape, ../shared/API.md) and each repeated ask's (an object
    {question id: question object})."""
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
        return {"type": ["object", "null"], "additionalProperties": False,
                "properties": {"true": {"type": _VALUE}, "false": {"type": _VALUE}}}
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


def validate_instance(tree: Tree, instance: Any, count_tokens: CountTokens | None = None, *,
                      values: bool = True) -> None:
    """Raise InstanceError listing every problem of `instance`; return None when it fits `tree`. Values that
    could not be tokenized or written (`value_problems`) are reported alone, before anything reads them, and
    every text is checked against its bound's most bytes before it is tokenized. `values=False` skips
    `value_problems` for an instance that already passed them (the runtime's later passes over it)."""
    problems = (values and value_problems(instance)) or list(_Validator(count_tokens).tree(tree, instance))
    if problems:
        raise InstanceError(problems)


class JsonObject(dict):
    """A JSON object as `loads_instance` parsed it: `duplicates` holds the keys written more than once."""

    duplicates: tuple[str, ...] = ()


def _object_of(pairs: list[tuple[str, Any]]) -> JsonObject:
    obj = JsonObject(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        dups = [k for k, _ in pairs if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
        obj.duplicates = tuple(dict.fromkeys(dups))
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON; write null or a string")


def _int_of(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(digits.lstrip('-'))} digits; integers are limited to "
                         f"{MAX_INT_DIGITS} digits: write it as a string")
    return int(digits)


def loads_instance(line: bytes | str) -> Any:
    """One JSON line parsed strictly: UTF-8, no NaN or Infinity, objects as JsonObject (duplicate keys kept
    for `value_problems` to name by path). InstanceError (one problem, no line number) when it is not JSON."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InstanceError([f"not UTF-8 (byte 0x{line[e.start]:02x} at byte {e.start + 1}); save the "
                                 "file as UTF-8"]) from None
    try:
        return json.loads(line, object_pairs_hook=_object_of, parse_constant=_no_constant, parse_int=_int_of)
    except json.JSONDecodeError as e:
        raise InstanceError([f"not JSON ({e.msg} at column {e.colno})"]) from None
    except RecursionError:
        raise InstanceError([f"arrays and objects nested too deeply (the limit is {MAX_NESTING} levels); "
                             "flatten it"]) from None
    except ValueError as e:  # a huge integer, NaN or Infinity (the hooks' messages)
        raise InstanceError([str(e)]) from None


def value_problems(instance: Any) -> list[str]:
    """What in `instance` no tree accepts, by path: lone surrogates in strings or keys (not Unicode text),
    duplicate keys, nesting over MAX_NESTING levels and integers over MAX_INT_BITS. Iterative, so any depth
    of nesting is walked safely; each problem says what to do. A value's path is spelled only for a problem
    (`_Where`): the walk runs on every request."""
    problems: list[str] = []
    todo: list[tuple[_Where | None, Any, int]] = [(None, instance, 0)]
    while todo:
        at, v, depth = todo.pop()
        if isinstance(v, str):
            if _has_surrogate(v):
                problems.append(f"{_where(at)}: {_surrogate_words(v)}")
        elif isinstance(v, bool) or v is None or isinstance(v, float):
            pass
        elif isinstance(v, int):
            if v.bit_length() > MAX_INT_BITS:
                problems.append(f"{_where(at)}: an integer of {v.bit_length()} bits; integers are limited to "
                                f"{MAX_INT_DIGITS} digits: write it as a string")
        elif isinstance(v, (dict, list)):
            if depth >= MAX_NESTING:
                where = _where(at)
                clipped = where if len(where) <= 80 else where[:80] + "..."
                problems.append(f"{clipped}: arrays and objects nested over {MAX_NESTING} levels deep; "
                                "flatten it")
                continue
            if isinstance(v, list):
                todo.extend((_Where(at, i, True), x, depth + 1) for i, x in reversed(list(enumerate(v))))
                continue
            for key in getattr(v, "duplicates", ()):
                problems.append(f"{_key_path(_path(at), key)}: duplicate key; write each key once")
            children = []
            for key, x in v.items():
                if isinstance(key, str) and _has_surrogate(key):
                    problems.append(f"{_key_path(_path(at), key)}: the key {_surrogate_words(key)}")
                children.append((_Where(at, key, False), x, depth + 1))
            todo.extend(reversed(children))
    return problems


class _Where(NamedTuple):
    """A value's place in an instance, spelled by `_path` when a problem names it: its container's place
    (None: the instance) and its key in it (an array's index when `index`)."""

    parent: _Where | None
    key: Any
    index: bool


def _path(at: _Where | None) -> str:
    """`at` as value_problems' paths spell it: `a.b[2]["odd key"]`; "" for the instance itself."""
    steps = []
    while at is not None:
        steps.append(at)
        at = at.parent
    path = ""
    for step in reversed(steps):
        path = f"{path}[{step.key}]" if step.index else _key_path(path, step.key)
    return path


def _where(at: _Where | None) -> str:
    return _path(at) or "instance"


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _surrogate_words(s: str) -> str:
    i = next(k for k, c in enumerate(s) if 0xD800 <= ord(c) <= 0xDFFF)
    return (f"holds a lone surrogate \\u{ord(s[i]):04x} at character {i + 1}, which is not Unicode text; "
            "fix the text's encoding (a pair of \\u escapes must form one character)")


def _key_path(path: str, key: Any) -> str:
    """`path.key` for a name-like key, `path["key"]` otherwise, lone surrogates written as escapes."""
    key = str(key)
    if key.isidentifier():
        return _field(path, key)
    return f"{path}[{json.dumps(key)}]"


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
        rendered = [render_value(t) for t in texts]
        size = sum(len(t.encode("utf-8")) for t in rendered)
        if size > bound.max_tokens * MAX_TOKEN_BYTES:  # over the bound whatever the tokens: not tokenized
            yield (f"{path}: {size} bytes, more than its bound of {bound.max_tokens} tokens can hold "
                   f"(at most {MAX_TOKEN_BYTES} bytes a token); shorten it")
            return
        if self.count_tokens is None:
            return
        n = sum(self.count_tokens(t) for t in rendered)
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

        yield from self.scope("", instance, [(state.name, "a string, object or array", check_state)],
                              tree.body, closed=tree.wire != "systemone")

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
                yield (f'{path}: score levels are a list, low to high; the map form {{"0": ...}} '
                       "is not accepted")
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
