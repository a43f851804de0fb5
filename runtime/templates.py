"""Binding from a compiled segment template: instances -> the template's segments -> one packed Stream.

Consumes a tree (for its ask nodes and instance validation), its segment template (ir/template.py, as
fold_prompt_text and dedup_prefixes left it) and a BindFormat; produces the same runtime.binder.Bound the
plain binder does. Constant pieces come from the template as they are; slots are filled from the instance
through the format (root/text/ask pieces, trimmed by the constant ids the template holds around them) and
refused when over their compiled bound. A segment that binds to no tokens is dropped and its children hang
off its parent (E3: the cut of a path never changes its bits). Packing and read order are the plain
binder's (runtime/binder.py), level by level, which is the layout passes/layout.py records. With
verify=True every read's path ids are checked against the plain binder's (which checks the whole prompt).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from flidec.ir.errors import InstanceError
from flidec.ir.instance import takes_key, validate_instance
from flidec.ir.template import Child, Repeat, SegmentTemplate, Slot, TreeTemplate, segments_preorder
from flidec.ir.tree import Ask, Fork, Node, Tree
from flidec.runtime.binder import AskPieceLike, BindFormat, Bound, Plan, Shape, Walker, bound_from_plans


def ask_paths(tree: Tree) -> dict[str, Ask]:
    """Every ask by its template path: fork names then the ask's name, dot-separated."""
    out: dict[str, Ask] = {}

    def walk(body: tuple[Node, ...], prefix: str) -> None:
        for node in body:
            if isinstance(node, Ask):
                out[prefix + node.name] = node
            elif isinstance(node, Fork):
                walk(node.body, f"{prefix}{node.name}.")

    walk(tree.body, "")
    return out


class _TemplateWalker:
    def __init__(self, tree: Tree, template: TreeTemplate, fmt: BindFormat):
        self.tree, self.template, self.fmt = tree, template, fmt
        self.asks = ask_paths(tree)

    def plan(self, instance: Mapping) -> tuple[Plan, Shape]:
        self.pieces: dict[str, AskPieceLike] = {}  # per instance: ask path -> its piece (slot and read)
        plan, shape = Plan(), {}
        self.segment(plan, self.template.root, -1, instance, shape, "", {})
        return plan, shape

    def segment(self, plan: Plan, s: SegmentTemplate, parent: int, obj: Mapping,
                shape: dict, prefix: str, questions: dict) -> None:
        ids: list[int] = []
        for p in s.pieces:
            ids += p.ids if not isinstance(p, Slot) else self.fill(p, obj, prefix, questions)
        cur = parent
        if ids:
            cur = plan.segment(ids, parent)
        for r in s.reads:
            name = r.ask.rsplit(".", 1)[-1]
            piece, path = self.piece(r.ask, obj, prefix, questions)
            plan.reads.append((cur, piece, path))
            if r.ask in questions:
                shape.setdefault(name, {})[questions[r.ask][2]] = len(plan.reads) - 1
            else:
                shape[name] = len(plan.reads) - 1
        self.children(plan, s.children, cur, obj, shape, prefix, questions)

    def children(self, plan: Plan, cs: tuple[Child, ...], parent: int, obj: Mapping,
                 shape: dict, prefix: str, questions: dict) -> None:
        for c in cs:
            if isinstance(c, SegmentTemplate):
                self.segment(plan, c, parent, obj, shape, prefix, questions)
            elif c.kind == "fork":
                shape[c.key] = []
                for i, branch in enumerate(_get(obj, c.key, list, prefix + c.key)):
                    bpath = f"{prefix}{c.key}[{i}]"
                    if not isinstance(branch, Mapping):
                        raise InstanceError([f"{bpath}: a branch must be an object"])
                    shape[c.key].append({})
                    self.children(plan, c.body, parent, branch, shape[c.key][-1], bpath + ".", questions)
            else:
                shape[c.key] = {}
                ask_path = self.ask_path(c, prefix)
                for qid, q in _get(obj, c.key, Mapping, prefix + c.key).items():
                    qpath = f"{prefix}{c.key}[{json.dumps(qid, ensure_ascii=False)}]"
                    self.children(plan, c.body, parent, obj, shape, prefix,
                                  {**questions, ask_path: (q, qpath, qid)})

    def ask_path(self, rep: Repeat, prefix: str) -> str:
        """The template path of a keyed set's ask: the read (below the repeat) that names its key."""
        for s, _ in segments_preorder(SegmentTemplate((), (), rep.body)):
            for r in s.reads:
                if r.ask.rsplit(".", 1)[-1] == rep.key and self.asks[r.ask].repeat is not None:
                    return r.ask
        raise AssertionError(f"repeat {rep.key} has no read of its ask")

    def fill(self, slot: Slot, obj: Mapping, prefix: str, questions: dict) -> tuple[int, ...]:
        if slot.kind == "state":
            ids, path = self.fmt.root_piece(obj[slot.key])[slot.head:], slot.key
        elif slot.kind == "text":
            path = prefix + slot.key
            ids = self.fmt.text_piece(_get(obj, slot.key, str, path), False)  # type: ignore[arg-type]
        else:
            piece, path = self.piece(slot.key, obj, prefix, questions)
            ids = piece.ids[slot.head:len(piece.ids) - slot.tail]
        if len(ids) > slot.max_tokens:
            raise InstanceError([f"{path}: {len(ids)} tokens, over the compiled bound of {slot.max_tokens}"])
        return tuple(ids)

    def piece(self, ask_path: str, obj: Mapping, prefix: str, questions: dict) -> tuple[AskPieceLike, str]:
        ask = self.asks[ask_path]
        if ask_path in questions:
            question, path, _ = questions[ask_path]
        else:
            path = prefix + ask.name
            question = _get(obj, ask.name, Mapping, path) if takes_key(ask) else None
        if question is not None and not isinstance(question, Mapping):
            raise InstanceError([f"{path}: a question must be an object"])
        if path not in self.pieces:
            self.pieces[path] = self.fmt.ask_piece(ask, question, path)
        return self.pieces[path], path


def _get(obj: Mapping, key: str, kind: type, path: str) -> object:
    if key not in obj:
        raise InstanceError([f"{path}: missing"])
    if not isinstance(obj[key], kind):
        what = {str: "a string", list: "an array"}.get(kind, "an object")
        raise InstanceError([f"{path}: must be {what}"])
    return obj[key]


def bind_template(tree: Tree, template: TreeTemplate, instances: Sequence[object], fmt: BindFormat, *,
                  rows: int | None = None, validate: bool = True, verify: bool = True) -> Bound:
    """Pack every instance into one stream from `template`; an instance that fails is in Bound.errors."""
    walker = _TemplateWalker(tree, template, fmt)
    plain = Walker(tree, fmt, verify=True) if verify else None

    def plan_one(inst: object) -> tuple[Plan, Shape]:
        if validate:
            validate_instance(tree, inst, fmt.count_tokens)
        if not isinstance(inst, Mapping) or tree.state.name not in inst:
            raise InstanceError([f"{tree.state.name}: missing"])
        plan, shape = walker.plan(inst)
        if plain is not None:
            _check_paths(plan, plain.plan(inst)[0])
        return plan, shape

    return bound_from_plans(tree, fmt, instances, plan_one, rows)


def _check_paths(plan: Plan, reference: Plan) -> None:
    want = {path: reference.path_ids(seg) for seg, _, path in reference.reads}
    got = {path: plan.path_ids(seg) for seg, _, path in plan.reads}
    for path, ids in want.items():
        if got.get(path) != ids:
            raise InstanceError([f"{path}: the template's tokens differ from the format's prompt "
                                 + "(a stale or foreign template)"])
    if set(got) != set(want):
        raise InstanceError([f"the template reads {sorted(set(got) - set(want))} the tree does not ask"])
