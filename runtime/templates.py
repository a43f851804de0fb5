"""Binding from a compiled segment template: instances -> the template's segments -> one packed Stream.

Consumes a tree (for its ask nodes and instance validation), its segment template (ir/template.py, as
fold_prompt_text and dedup_prefixes left it) and a BindFormat; produces the same runtime.binder.BoundStream
the plain binder does: constant pieces come from the template as they are, slots are filled from the
instance through the format. Packing and read order are the plain binder's (runtime/binder.py), level by
level, which is the layout passes/layout.py records. With verify=True every read's path ids are checked
against the plain binder's (which checks the whole prompt).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field

from flidec.ir.errors import InstanceError
from flidec.ir.instance import takes_key, validate_instance
from flidec.ir.template import Child, Repeat, SegmentTemplate, Slot, TreeTemplate, segments_preorder
from flidec.ir.tree import Ask, Fork, Node, Tree
from flidec.runtime.binder import (
    AskDraftLike,
    BindFormat,
    BoundStream,
    Draft,
    Plan,
    Shape,
    Walker,
    bound_from_plans,
)


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


@dataclass(frozen=True, slots=True)
class _Fill:
    """A slot of one instance before tokenizing: its draft's ids less `head` and `tail` constant ids."""

    draft: Draft
    head: int
    tail: int
    max_tokens: int
    path: str
    state: bool = False  # the state's slot: where the root's resumable text ends

    def ids(self, encoded: Mapping[str, tuple[int, ...]]) -> tuple[int, ...]:
        ids = self.draft.ids(encoded)
        if self.head or self.tail:
            ids = ids[self.head : len(ids) - self.tail]
        if len(ids) > self.max_tokens:
            bound = self.max_tokens
            raise InstanceError([f"{self.path}: {len(ids)} tokens, over the compiled bound of {bound}"])
        return ids


@dataclass
class _Sketch:
    """One instance's template segments before tokenizing, in walk order: each with its parent (an index
    here, -1 for the root) and its pieces; each read with its segment and ask path."""

    segments: list[tuple[int, list[tuple[int, ...] | _Fill]]] = field(default_factory=list)
    reads: list[tuple[int, str]] = field(default_factory=list)

    def texts(self) -> list[str]:
        fills = [p for _, pieces in self.segments for p in pieces if isinstance(p, _Fill)]
        return [t for f in fills for t in f.draft.texts()]


class TemplateWalker:
    """Walks an instance in two steps: first its segments as drafts (constant ids and slots still to
    tokenize), then, after one batch tokenizes every bound text of the instance (BindFormat.encode_texts),
    the plan itself. A segment that binds to no tokens is dropped and its children hang off its parent (E3:
    the cut of a path never changes its bits)."""

    def __init__(self, tree: Tree, template: TreeTemplate, fmt: BindFormat):
        self.tree, self.template, self.fmt = tree, template, fmt
        self.asks = ask_paths(tree)

    def plan(self, instance: Mapping) -> tuple[Plan, Shape]:
        """The instance's plan, after the spec's every token bound is checked as `flidec run SPEC` checks it
        (ir/instance.validate_instance, the same InstanceError), its texts counted in the instance's one
        tokenizer batch; the slots' compiled bounds are checked too. `instance` must have passed
        validate_instance's structural checks (without a token counter)."""
        self.drafts: dict[str, AskDraftLike] = {}  # per instance: ask path -> its draft (slot and read)
        sketch, shape = _Sketch(), {}
        self.segment(sketch, self.template.root, -1, instance, shape, "", {})
        counted = _counted_texts(self.tree, instance)
        texts = sketch.texts() + [t for d in self.drafts.values() for t in d.draft.texts()] + counted
        encoded = self.fmt.encode_texts(texts)  # one batch: the pieces' texts and the bounded ones
        validate_instance(self.tree, instance, lambda text: len(encoded[text]), values=False)
        pieces = {path: d.piece(encoded) for path, d in self.drafts.items()}
        plan = Plan()
        at: list[int] = []  # per sketch segment: its plan segment, or its parent's when it has no tokens
        for parent, template_pieces in sketch.segments:
            ids: list[int] = []
            for p in template_pieces:
                ids += p.ids(encoded) if isinstance(p, _Fill) else p
                if isinstance(p, _Fill) and p.state and parent < 0:
                    plan.state_end = len(ids)
            above = at[parent] if parent >= 0 else -1
            at.append(plan.segment(ids, above, adopt=True) if ids else above)
        plan.reads = [(at[seg], pieces[path], path) for seg, path in sketch.reads]
        return plan, shape

    def segment(self, sketch: _Sketch, s: SegmentTemplate, parent: int, obj: Mapping,
                shape: dict, prefix: str, questions: dict) -> None:
        sketch.segments.append((parent, [self.fill(p, obj, prefix, questions) if isinstance(p, Slot)
                                         else p.ids for p in s.pieces]))
        cur = len(sketch.segments) - 1
        for r in s.reads:
            name = r.ask.rsplit(".", 1)[-1]
            path = self.draft(r.ask, obj, prefix, questions)[1]
            sketch.reads.append((cur, path))
            if r.ask in questions:
                shape.setdefault(name, {})[questions[r.ask][2]] = len(sketch.reads) - 1
            else:
                shape[name] = len(sketch.reads) - 1
        self.children(sketch, s.children, cur, obj, shape, prefix, questions)

    def children(self, sketch: _Sketch, cs: tuple[Child, ...], parent: int, obj: Mapping,
                 shape: dict, prefix: str, questions: dict) -> None:
        for c in cs:
            if isinstance(c, SegmentTemplate):
                self.segment(sketch, c, parent, obj, shape, prefix, questions)
            elif c.kind == "fork":
                shape[c.key] = []
                for i, branch in enumerate(_get(obj, c.key, list, prefix + c.key)):
                    bpath = f"{prefix}{c.key}[{i}]"
                    if not isinstance(branch, Mapping):
                        raise InstanceError([f"{bpath}: a branch must be an object"])
                    shape[c.key].append({})
                    self.children(sketch, c.body, parent, branch, shape[c.key][-1], bpath + ".", questions)
            else:
                shape[c.key] = {}
                ask_path = self.ask_path(c, prefix)
                for qid, q in _get(obj, c.key, Mapping, prefix + c.key).items():
                    qpath = f"{prefix}{c.key}[{json.dumps(qid, ensure_ascii=False)}]"
                    self.children(sketch, c.body, parent, obj, shape, prefix,
                                  {**questions, ask_path: (q, qpath, qid)})

    def ask_path(self, rep: Repeat, prefix: str) -> str:
        """The template path of a keyed set's ask: the read (below the repeat) that names its key."""
        for s, _ in segments_preorder(SegmentTemplate((), (), rep.body)):
            for r in s.reads:
                if r.ask.rsplit(".", 1)[-1] == rep.key and self.asks[r.ask].repeat is not None:
                    return r.ask
        raise AssertionError(f"repeat {rep.key} has no read of its ask")

    def fill(self, slot: Slot, obj: Mapping, prefix: str, questions: dict) -> _Fill:
        """A slot filled from the instance through the format (a root, text or ask piece), to be trimmed by
        the constant ids the template holds around it and refused when over its compiled bound."""
        if slot.kind == "state":
            return _Fill(self.fmt.root_draft(obj[slot.key]), slot.head, 0, slot.max_tokens, slot.key, True)
        if slot.kind == "text":
            path = prefix + slot.key
            draft = self.fmt.text_draft(_get(obj, slot.key, str, path), False)  # type: ignore[arg-type]
            return _Fill(draft, 0, 0, slot.max_tokens, path)
        ask, path = self.draft(slot.key, obj, prefix, questions)
        return _Fill(ask.draft, slot.head, slot.tail, slot.max_tokens, path)

    def draft(self, ask_path: str, obj: Mapping, prefix: str, questions: dict) -> tuple[AskDraftLike, str]:
        ask = self.asks[ask_path]
        if ask_path in questions:
            question, path, _ = questions[ask_path]
        else:
            path = prefix + ask.name
            question = _get(obj, ask.name, Mapping, path) if takes_key(ask) else None
        if question is not None and not isinstance(question, Mapping):
            raise InstanceError([f"{path}: a question must be an object"])
        if path not in self.drafts:
            self.drafts[path] = self.fmt.ask_draft(ask, question, path)
        return self.drafts[path], path


def _counted_texts(tree: Tree, instance: object) -> list[str]:
    """The texts validate_instance counts for the instance's token bounds (each bound text, state,
    instruction, option name and description as rendered), gathered by a pass whose counter records them."""
    texts: list[str] = []

    def record(text: str) -> int:
        texts.append(text)
        return 0

    with suppress(InstanceError):  # zero tokens can be under a minimum: the real count decides, in `plan`
        validate_instance(tree, instance, record, values=False)
    return texts


def _get(obj: Mapping, key: str, kind: type, path: str) -> object:
    if key not in obj:
        raise InstanceError([f"{path}: missing"])
    if not isinstance(obj[key], kind):
        what = {str: "a string", list: "an array"}.get(kind, "an object")
        raise InstanceError([f"{path}: must be {what}"])
    return obj[key]


def bind_template(tree: Tree, template: TreeTemplate, instances: Sequence[object], fmt: BindFormat, *,
                  rows: int | None = None, validate: bool = True, verify: bool = True) -> BoundStream:
    """Pack every instance into one stream from `template`; one that fails is in BoundStream.errors."""
    walker = TemplateWalker(tree, template, fmt)
    plain = Walker(tree, fmt, verify=True) if verify else None

    def plan_one(inst: object) -> tuple[Plan, Shape]:
        if validate:
            validate_instance(tree, inst)  # the token bounds: in walker.plan, counted in one batch
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
