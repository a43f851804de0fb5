"""The tree IR <-> plain JSON values (dicts, lists, str, int, bool, None), locations included.

Consumes/produces what an artifact stores as its tree IR and what `--dump-ir` can write as JSON. The form
is explicit rather than clever: every node is an object with a "kind"; a Loc is [file, line, col,
end_line, end_col]; instructions are a string, {"bound": ...} or null; criteria are null, {"bound": ...},
{"noul": {"true", "false"}}, {"choice": [[name, description], ...]} or {"score": [...]}. A malformed value
raises SpecError naming its JSON path. `spec_from_json(spec_to_json(s)) == s`, locations too.
"""

from __future__ import annotations

from typing import Any

from flidec.ir.errors import Diagnostic, SpecError
from flidec.ir.tree import (
    Ask,
    AskType,
    Bound,
    ChoiceOptions,
    Criteria,
    Fork,
    Format,
    Loc,
    Node,
    NoulCriteria,
    Range,
    ScoreLevels,
    Spec,
    State,
    Text,
    Tree,
)

VERSION = 1


def spec_to_json(spec: Spec) -> dict[str, Any]:
    return {
        "flide_tree_ir": VERSION,
        "model": spec.model,
        "format": {"name": spec.format.name, "options": [[k, v] for k, v in spec.format.options],
                   "loc": _loc(spec.format.loc)},
        "trees": [_tree(t) for t in spec.trees],
        "loc": _loc(spec.loc),
    }


def spec_from_json(d: Any) -> Spec:
    r = _Reader()
    try:
        return r.spec(d)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise SpecError([Diagnostic(Loc(), f"malformed tree IR JSON at {r.where()}: {type(e).__name__}: {e}",
                                    "write it with flidec.ir.serde.spec_to_json")]) from None


# ---- to JSON ----------------------------------------------------------------------------------------------


def _loc(loc: Loc) -> list[Any]:
    return [loc.file, loc.line, loc.col, loc.end_line, loc.end_col]


def _range(r: Range) -> dict[str, Any]:
    return {"lo": r.lo, "hi": r.hi, "loc": _loc(r.loc)}


def _bound(b: Bound | None) -> dict[str, Any] | None:
    if b is None:
        return None
    return {"max_tokens": b.max_tokens, "min_tokens": b.min_tokens, "loc": _loc(b.loc)}


def _tree(t: Tree) -> dict[str, Any]:
    s = t.state
    return {
        "name": t.name,
        "state": {"name": s.name, "bound": _bound(s.bound), "resumable": s.resumable, "loc": _loc(s.loc)},
        "body": [_node(n) for n in t.body],
        "wire": t.wire,
        "buckets": list(t.buckets),
        "loc": _loc(t.loc),
    }


def _node(n: Node) -> dict[str, Any]:
    if isinstance(n, Text):
        value = {"bound": _bound(n.value)} if isinstance(n.value, Bound) else n.value
        return {"kind": "text", "name": n.name, "value": value, "loc": _loc(n.loc)}
    if isinstance(n, Fork):
        return {"kind": "fork", "name": n.name, "fanout": _range(n.fanout), "text": _bound(n.text),
                "body": [_node(c) for c in n.body], "loc": _loc(n.loc)}
    return {
        "kind": "ask",
        "name": n.name,
        "types": [{"kind": t.kind, "options": _range(t.options), "loc": _loc(t.loc)} for t in n.types],
        "instructions": (
            {"bound": _bound(n.instructions)} if isinstance(n.instructions, Bound) else n.instructions
        ),
        "criteria": _criteria(n.criteria),
        "repeat": _range(n.repeat) if n.repeat is not None else None,
        "loc": _loc(n.loc),
    }


def _criteria(c: Criteria | Bound | None) -> dict[str, Any] | None:
    if c is None:
        return None
    if isinstance(c, Bound):
        return {"bound": _bound(c)}
    if isinstance(c, NoulCriteria):
        return {"noul": {"true": c.true, "false": c.false}, "loc": _loc(c.loc)}
    if isinstance(c, ChoiceOptions):
        return {"choice": [[name, desc] for name, desc in c.options], "loc": _loc(c.loc)}
    return {"score": list(c.levels), "loc": _loc(c.loc)}


# ---- from JSON --------------------------------------------------------------------------------------------


class _Reader:
    """Builds IR values from JSON, keeping the path it is at so that an error can name it."""

    def __init__(self) -> None:
        self.path: list[str] = []

    def where(self) -> str:
        return "".join(self.path) or "the top"

    def spec(self, d: dict[str, Any]) -> Spec:
        if d.get("flide_tree_ir") != VERSION:
            raise ValueError(f"flide_tree_ir is {d.get('flide_tree_ir')!r}, this flidec reads {VERSION}")
        f = d["format"]
        fmt = Format(_str(f["name"]), tuple((_str(k), _scalar(v)) for k, v in f["options"]),
                     _read_loc(f["loc"]))
        trees = []
        for i, t in enumerate(d["trees"]):
            self.path.append(f".trees[{i}]")
            trees.append(self.tree(t))
            self.path.pop()
        return Spec(_str(d["model"]), fmt, tuple(trees), _read_loc(d["loc"]))

    def tree(self, d: dict[str, Any]) -> Tree:
        s = d["state"]
        state = State(_str(s["name"]), _read_bound(s["bound"]), _bool(s["resumable"]), _read_loc(s["loc"]))
        wire = d["wire"]
        return Tree(_str(d["name"]), state, self.body(d["body"]), None if wire is None else _str(wire),
                    tuple(_int(b) for b in d["buckets"]), _read_loc(d["loc"]))

    def body(self, items: list[Any]) -> tuple[Node, ...]:
        out = []
        for i, n in enumerate(items):
            self.path.append(f".body[{i}]")
            out.append(self.node(n))
            self.path.pop()
        return tuple(out)

    def node(self, d: dict[str, Any]) -> Node:
        kind, loc = d["kind"], _read_loc(d["loc"])
        if kind == "text":
            v = d["value"]
            value = _str(v) if isinstance(v, str) else _read_bound(v["bound"])
            return Text(None if d["name"] is None else _str(d["name"]), value, loc)
        if kind == "fork":
            text = None if d["text"] is None else _read_bound(d["text"])
            return Fork(_str(d["name"]), _read_range(d["fanout"]), text, self.body(d["body"]), loc)
        if kind != "ask":
            raise ValueError(f"unknown node kind {kind!r}")
        types = tuple(AskType(_kind(t["kind"]), _read_range(t["options"]), _read_loc(t["loc"]))
                      for t in d["types"])
        instr = d["instructions"]
        instructions = instr if instr is None or isinstance(instr, str) else _read_bound(instr["bound"])
        repeat = None if d["repeat"] is None else _read_range(d["repeat"])
        return Ask(_str(d["name"]), types, instructions, _read_criteria(d["criteria"]), repeat, loc)


def _read_criteria(d: dict[str, Any] | None) -> Criteria | Bound | None:
    if d is None:
        return None
    if "bound" in d:
        return _read_bound(d["bound"])
    loc = _read_loc(d["loc"])
    if "noul" in d:
        n = d["noul"]
        return NoulCriteria(_opt_str(n["true"]), _opt_str(n["false"]), loc)
    if "choice" in d:
        return ChoiceOptions(tuple((_str(name), _opt_str(desc)) for name, desc in d["choice"]), loc)
    return ScoreLevels(tuple(_str(x) for x in d["score"]), loc)


def _read_loc(v: list[Any]) -> Loc:
    file, line, col, end_line, end_col = v
    return Loc(_str(file), _int(line), _int(col), _int(end_line), _int(end_col))


def _read_range(d: dict[str, Any]) -> Range:
    return Range(_int(d["lo"]), _int(d["hi"]), _read_loc(d["loc"]))


def _read_bound(d: dict[str, Any]) -> Bound:
    return Bound(_int(d["max_tokens"]), _int(d["min_tokens"]), _read_loc(d["loc"]))


def _kind(v: Any) -> Any:
    if v not in ("noul", "choice", "score"):
        raise ValueError(f"unknown ask type {v!r}")
    return v


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


def _opt_str(v: Any) -> str | None:
    return None if v is None else _str(v)


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected an integer, got {type(v).__name__}")
    return v


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"expected true or false, got {type(v).__name__}")
    return v


def _scalar(v: Any) -> str | int | bool:
    if not isinstance(v, (str, int, bool)):
        raise TypeError(f"expected a string, number or boolean, got {type(v).__name__}")
    return v
