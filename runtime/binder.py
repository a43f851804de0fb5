"""The binder and packer: instances of a tree -> token pieces -> one packed Stream, and reads -> answers.

Consumes a tree (flidec.ir.tree), instances in its JSON form and a format implementing BindFormat
(flidec.runtime.next_token does; runtime/ never imports formats); produces a BoundStream: the Stream (built
with runtime.meta.build_meta) and, per read, the instance and answer path it belongs to. Segments: an
instance's root holds its state (and the texts before its first ask or fork); each run of texts after a branch
point, each fork branch and each ask's question block is a child segment; empty pieces get no segment.
Segments are laid out level by level across all instances (each level's rows contiguous); an instance that
fails to bind is reported in BoundStream.errors and takes no rows. With verify=True every ask's path ids are
checked against its whole prompt tokenized in one go (E3 depends on that equality).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Protocol

import numpy as np
import torch

from flidec.ir.errors import InstanceError
from flidec.ir.instance import takes_key, validate_instance
from flidec.ir.tree import Ask, Fork, Node, Text, Tree
from flidec.runtime.meta import Read, Segment, Stream, build_meta

Shape = object  # an answer skeleton: dict / list / read index (int) at the leaves


class AskPieceLike(Protocol):
    ids: tuple[int, ...]  # the question block's ids, through the chat template's generation prompt
    labels: tuple[int, ...]  # label token ids, in option order


Part = tuple[int, ...] | str  # ids known already (constant text), or bound text still to tokenize


@dataclass(frozen=True, slots=True)
class Draft:
    """A piece before tokenizing: its parts in order. A walker gathers the texts of all its drafts, has the
    format tokenize them in one batch (`BindFormat.encode_texts`), then reads each draft's ids."""

    parts: tuple[Part, ...]

    def texts(self) -> Iterator[str]:
        return (p for p in self.parts if isinstance(p, str))

    def ids(self, encoded: Mapping[str, tuple[int, ...]]) -> tuple[int, ...]:
        if len(self.parts) == 1 and isinstance(self.parts[0], str):
            return encoded[self.parts[0]]  # a bound text alone (a branch text): its ids as they are, no copy
        out: list[int] = []
        for p in self.parts:
            out += encoded[p] if isinstance(p, str) else p  # (list += is a C copy: ~5x an element-wise chain)
        return tuple(out)


class AskDraftLike(Protocol):
    """An ask's piece before tokenizing: its block as a draft; `piece` finishes it from the batch's ids."""

    draft: Draft

    def piece(self, encoded: Mapping[str, tuple[int, ...]]) -> AskPieceLike: ...


class BindFormat(Protocol):
    """What the binder needs from a format (paths name the node for errors, e.g. `action[3].judge`). The
    `*_draft` forms and `encode_texts` let a walker tokenize all of an instance's bound text in one batch;
    `root_piece`, `text_piece` and `ask_piece` are the same pieces, each tokenized on its own."""

    def count_tokens(self, text: str) -> int: ...

    def encode_texts(self, texts: Iterable[str]) -> Mapping[str, tuple[int, ...]]: ...

    def root_draft(self, state: object) -> Draft: ...

    def text_draft(self, text: str, constant: bool) -> Draft: ...

    def ask_draft(self, ask: Ask, question: Mapping[str, object] | None, path: str) -> AskDraftLike: ...

    def root_piece(self, state: object) -> tuple[int, ...]: ...

    def text_piece(self, text: str, constant: bool) -> tuple[int, ...]: ...

    def ask_piece(self, ask: Ask, question: Mapping[str, object] | None, path: str) -> AskPieceLike: ...

    def prompt_ids(self, state: object, texts: Sequence[str], ask: Ask, question: Mapping[str, object] | None,
                   path: str) -> tuple[int, ...]: ...

    def answer(self, piece: AskPieceLike, logits: Sequence[float]) -> dict: ...


@dataclass(frozen=True, slots=True)
class Site:
    """Where a read's answer goes: the instance (its index in the bound list) and the ask's path."""

    instance: int
    path: str
    piece: AskPieceLike


@dataclass(frozen=True)
class BoundStream:
    """Instances bound into one stream: what the executor runs and what runtime.answers reads back."""

    stream: Stream
    sites: tuple[Site, ...]  # one per read, in stream.meta.reads order
    shapes: tuple[Shape | None, ...]  # per instance: its answer skeleton, None where it failed to bind
    errors: Mapping[int, InstanceError]  # instance index -> why it was not bound
    fmt: BindFormat
    wire: str | None
    rows_used: int  # rows holding segments; the rest (up to the stream's length) is padding
    input_tokens: tuple[int, ...]  # per instance: the sum of its asks' whole prompt lengths (0 if it failed)
    roots: tuple[int, ...] = ()  # per instance: the stream segment of its plan's root, -1 if it failed
    read_tokens: tuple[int, ...] = ()  # per read: its whole prompt's length


class Held(Protocol):
    """The first positions of a root that a saved state holds (runtime/saved/point.py's SavedPoint)."""

    length: int  # positions held, a whole number of GDN chunks
    tokens: torch.Tensor  # [length] int64: their token ids


@dataclass
class Plan:
    """One instance's segments before packing (parents before children, local indices). `state_end`: how
    many of the root's ids come through the end of the state's text (0: not known). `held`: the saved
    state holding the root's first positions, or None; packed, it is a stored root (StreamMeta.stored) and
    the root's other ids its child. `save`: the saved point to make (StreamMeta.captures)."""

    ids: list[list[int]] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    reads: list[tuple[int, AskPieceLike, str]] = field(default_factory=list)  # (segment, piece, path)
    state_end: int = 0
    held: Held | None = None
    save: int = 0  # positions of the saved point its stream makes from its root's path (0: none)
    save_key: str = ""  # that point's key (runtime/saved/keys.py)

    def segment(self, ids: Sequence[int], parent: int, *, adopt: bool = False) -> int:
        """A new segment of `ids` under `parent` (-1: a root); `adopt`: `ids` is a fresh list the plan keeps
        as it is (no copy)."""
        self.ids.append(ids if adopt and isinstance(ids, list) else list(ids))
        self.parents.append(parent)
        return len(self.ids) - 1

    def path_ids(self, seg: int) -> list[int]:
        chain = []
        while seg >= 0:
            chain.append(seg)
            seg = self.parents[seg]
        return [t for s in reversed(chain) for t in self.ids[s]]


def merge_chains(plan: Plan) -> Plan:
    """`plan` with every only child merged into its parent where the parent has no read of its own (reads sit
    at a segment's last token), so a chain of segments becomes one: a one-question instance's root and
    question block become one segment, its read's plain single-sequence pass. Every read keeps its path's
    ids and positions and loses only fork points, which by E3 never change its bits; the stream has fewer
    segments and levels, so no GDN state walk, recomputed straddling chunk or query tile for the child.
    Reads stay in plan order. Returns `plan` itself when nothing merges."""
    children = [0] * len(plan.ids)
    for p in plan.parents:
        if p >= 0:
            children[p] += 1
    read = {seg for seg, _, _ in plan.reads}
    merged = [p >= 0 and children[p] == 1 and p not in read for p in plan.parents]
    if not any(merged):
        return plan
    out = Plan()
    at: list[int] = []  # per segment of `plan`: its segment in `out`
    for j, p in enumerate(plan.parents):  # parents come before their children
        if merged[j]:
            out.ids[at[p]] += plan.ids[j]  # it begins at its parent's end: its ids follow the parent's
            at.append(at[p])
        else:
            at.append(out.segment(plan.ids[j], at[p] if p >= 0 else -1))
    out.reads = [(at[seg], piece, path) for seg, piece, path in plan.reads]
    out.state_end, out.held, out.save = plan.state_end, plan.held, plan.save
    return out


class Walker:
    def __init__(self, tree: Tree, fmt: BindFormat, verify: bool):
        self.tree, self.fmt, self.verify = tree, fmt, verify

    def plan(self, instance: object) -> tuple[Plan, Shape]:
        name = self.tree.state.name
        if not isinstance(instance, Mapping):
            raise InstanceError(["the instance must be a JSON object"])
        if name not in instance:
            raise InstanceError([f"{name}: missing"])
        state = instance[name]
        if not isinstance(state, (str, Mapping, list)):
            raise InstanceError([f"{name}: must be a string, an object or an array"])
        self.state, plan = state, Plan()
        root = plan.segment(self.fmt.root_piece(state), -1)
        return plan, self.body(plan, self.tree.body, instance, root, True, [], "")

    def body(self, plan: Plan, nodes: tuple[Node, ...], obj: Mapping, cur: int, is_open: bool,
             texts: list[str], prefix: str) -> dict:
        shape: dict = {}
        for node in nodes:
            if isinstance(node, Text):
                constant = isinstance(node.value, str)
                text = node.value if constant else _get(obj, node.name, str, prefix + str(node.name))
                cur, is_open = self.text(plan, text, constant, cur, is_open, texts)
            elif isinstance(node, Ask):
                is_open = False
                shape[node.name] = self.ask(plan, node, obj, cur, texts, prefix + node.name)
            else:
                is_open = False
                shape[node.name] = self.fork(plan, node, obj, cur, texts, prefix + node.name)
        return shape

    def text(self, plan: Plan, text: str, constant: bool, cur: int, is_open: bool,
             texts: list[str]) -> tuple[int, bool]:
        texts.append(text)
        ids = self.fmt.text_piece(text, constant)
        if not ids:
            return cur, is_open
        if is_open:  # nothing branched off here yet: the text extends the current segment
            plan.ids[cur] += ids
            return cur, True
        return plan.segment(ids, cur), True

    def fork(self, plan: Plan, fork: Fork, obj: Mapping, cur: int, texts: list[str], path: str) -> list:
        branches = _get(obj, fork.name, list, path)
        shapes = []
        for i, branch in enumerate(branches):
            bpath = f"{path}[{i}]"
            if not isinstance(branch, Mapping):
                raise InstanceError([f"{bpath}: a branch must be an object"])
            btexts, bcur, bopen = list(texts), cur, False
            if fork.text is not None:
                bcur, bopen = self.text(plan, _get(branch, "text", str, bpath + ".text"), False, bcur, bopen,
                                        btexts)
            shapes.append(self.body(plan, fork.body, branch, bcur, bopen, btexts, bpath + "."))
        return shapes

    def ask(self, plan: Plan, ask: Ask, obj: Mapping, cur: int, texts: list[str], path: str) -> Shape:
        if ask.repeat is not None:
            questions = _get(obj, ask.name, Mapping, path)
            return {qid: self.read(plan, ask, q, cur, texts, f"{path}[{json.dumps(qid, ensure_ascii=False)}]")
                    for qid, q in questions.items()}
        question = _get(obj, ask.name, Mapping, path) if takes_key(ask) else None
        return self.read(plan, ask, question, cur, texts, path)

    def read(self, plan: Plan, ask: Ask, question: object, cur: int, texts: list[str], path: str) -> int:
        if question is not None and not isinstance(question, Mapping):
            raise InstanceError([f"{path}: a question must be an object"])
        piece = self.fmt.ask_piece(ask, question, path)
        seg = plan.segment(piece.ids, cur)
        if self.verify:
            whole = self.fmt.prompt_ids(self.state, texts, ask, question, path)
            if tuple(plan.path_ids(seg)) != tuple(whole):
                raise InstanceError([f"{path}: its token pieces do not add up to its whole prompt's tokens "
                                     "(a text the tokenizer would merge across a piece boundary)"])
        plan.reads.append((seg, piece, path))
        return len(plan.reads) - 1


def _get(obj: Mapping, key: str | None, kind: type, path: str) -> object:
    if key not in obj:
        raise InstanceError([f"{path}: missing"])
    value = obj[key]
    if not isinstance(value, kind):
        what = {str: "a string", list: "an array"}.get(kind, "an object")
        raise InstanceError([f"{path}: must be {what}"])
    return value


def bind(tree: Tree, instances: Sequence[object], fmt: BindFormat, *, rows: int | None = None,
         validate: bool = True, verify: bool = True) -> BoundStream:
    """Pack every instance into one stream; an instance that fails is reported in BoundStream.errors.

    `rows`: pad the stream to this many rows (ValueError when the segments need more). `validate`: check
    each instance against the tree first (flidec.ir.instance, token bounds counted by the format)."""
    walker = Walker(tree, fmt, verify)

    def plan_one(inst: object) -> tuple[Plan, Shape]:
        if validate:
            validate_instance(tree, inst, fmt.count_tokens)
        return walker.plan(inst)

    return bound_from_plans(tree, fmt, instances, plan_one, rows)


def bound_from_plans(tree: Tree, fmt: BindFormat, instances: Sequence[object],
                     plan_one: Callable[[object], tuple[Plan, Shape]], rows: int | None = None
                     ) -> BoundStream:
    """Plan each instance with `plan_one` (its InstanceError goes to BoundStream.errors, the others go on)
    and pack the plans into one stream: the one place a BoundStream is made, whichever walker planned the
    segments."""
    plans: list[tuple[int, Plan]] = []
    shapes: list[Shape | None] = []
    errors: dict[int, InstanceError] = {}
    for i, inst in enumerate(instances):
        try:
            plan, shape = plan_one(inst)
        except InstanceError as e:
            errors[i] = e
            shapes.append(None)
            continue
        plans.append((i, plan))
        shapes.append(shape)
    stream, sites, lengths, plan_roots = _pack(plans, rows)
    input_tokens = [0] * len(instances)
    for site, n in zip(sites, lengths, strict=True):  # _pack appends one length per site
        input_tokens[site.instance] += n
    used = sum(s.length for s in stream.meta.segments)
    roots = [-1] * len(instances)
    for (i, _), r in zip(plans, plan_roots, strict=True):
        roots[i] = r
    return BoundStream(stream, sites, tuple(shapes), errors, fmt, tree.wire, used, tuple(input_tokens),
                       tuple(roots), tuple(lengths))


def _pack(plans: list[tuple[int, Plan]], rows: int | None
          ) -> tuple[Stream, tuple[Site, ...], list[int], list[int]]:
    """Lay the planned segments out level by level, in instance order within a level; a plan's held
    positions (Plan.held) become a stored root whose rows follow every computed row. Also returns each
    plan's root segment."""
    HELD = -1  # the local index of a plan's stored root: before its segment 0 in the sort
    entries = []  # (level, instance order, local index)
    levels: dict[tuple[int, int], int] = {}
    for k, (_, plan) in enumerate(plans):
        if plan.held is not None:
            levels[k, HELD] = 0
            entries.append((0, k, HELD))
        for j, parent in enumerate(plan.parents):
            above = parent if parent >= 0 else (HELD if plan.held is not None else None)
            levels[k, j] = 0 if above is None else levels[k, above] + 1
            entries.append((levels[k, j], k, j))
    entries.sort()
    index = {(k, j): n for n, (_, k, j) in enumerate(entries)}

    def ids_of(k: int, j: int) -> Sequence[int]:
        plan = plans[k][1]
        if j == HELD:
            return plan.held.tokens.tolist()  # type: ignore[union-attr]
        return plan.ids[j][plan.held.length:] if j == 0 and plan.held is not None else plan.ids[j]

    pieces = [ids_of(k, j) for _, k, j in entries]
    live = sum(len(p) for (_, _, j), p in zip(entries, pieces, strict=True) if j != HELD)
    segments: list[Segment] = []
    used, stored_at = 0, live  # computed rows from 0, stored rows after them
    for (level, k, j), ids in zip(entries, pieces, strict=True):
        if j == HELD:
            segments.append(Segment(start=stored_at, length=len(ids), pos0=0, parent=-1, level=0))
            stored_at += len(ids)
            continue
        plan = plans[k][1]
        parent = plan.parents[j]
        above = parent if parent >= 0 else (HELD if plan.held is not None else None)
        pidx = -1 if above is None else index[k, above]
        pos0 = segments[pidx].end if pidx >= 0 else 0
        segments.append(Segment(start=used, length=len(ids), pos0=pos0, parent=pidx, level=level))
        used += len(ids)
    total = stored_at
    num_rows = total if rows is None else rows
    if num_rows < total:
        raise ValueError(f"the instances need {total} rows, more than the {rows} asked for")
    order = [n for n, (_, _, j) in enumerate(entries) if j != HELD] + \
        [n for n, (_, _, j) in enumerate(entries) if j == HELD]
    tokens = np.zeros(num_rows, dtype=np.int64)  # handed to torch without a copy
    tokens[:total] = np.fromiter(chain.from_iterable(pieces[n] for n in order), dtype=np.int64,
                                 count=total)  # ~2x array.extend
    reads, sites, lengths = [], [], []
    for k, (i, plan) in enumerate(plans):
        for seg, piece, path in plan.reads:
            s = segments[index[k, seg]]
            reads.append(Read(row=s.start + s.length - 1, labels=tuple(piece.labels)))
            sites.append(Site(i, path, piece))
            lengths.append(s.end)
    stored = tuple(n for n, (_, _, j) in enumerate(entries) if j == HELD)
    roots = [index[k, 0] for k in range(len(plans))]
    captures = tuple((roots[k], plan.save) for k, (_, plan) in enumerate(plans) if plan.save)
    meta = build_meta(tuple(segments), tuple(reads), num_rows, stored, captures)
    return Stream(torch.from_numpy(tokens), meta), tuple(sites), lengths, roots
