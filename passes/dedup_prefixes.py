"""dedup_prefixes: template IR -> template IR, sibling segments' common constant prefixes shared.

Consumes ir/template.Templates; produces the same trees as a radix tree of segments: where two or more
sibling segments (children of one segment, in one repeat scope) start with the same constant token ids,
those ids move into a new parent segment that they all hang off, so shared text below the root is stored
and computed once per instance instead of once per sibling. It cuts only inside constant ids, never a slot,
so every instance has the same tokens on every path; how a path is cut into segments never changes its
bits (E3), so no answer changes. A sibling that is all prefix leaves its reads on the new parent.
"""

from __future__ import annotations

from dataclasses import replace

from flidec.ir.template import Child, Const, Repeat, SegmentTemplate, Templates
from flidec.passes.context import CompileContext
from flidec.passes.manager import register


@register("dedup_prefixes", level_in="template", level_out="template")
def dedup_prefixes(ts: Templates, ctx: CompileContext) -> Templates:
    return Templates(tuple(replace(t, root=_segment(t.root)) for t in ts.trees))


def _segment(s: SegmentTemplate) -> SegmentTemplate:
    return replace(s, children=_children(s.children))


def _children(cs: tuple[Child, ...]) -> tuple[Child, ...]:
    cs = tuple(replace(c, body=_children(c.body)) if isinstance(c, Repeat) else _segment(c) for c in cs)
    return _merge(cs)


def _lead(c: Child) -> tuple[int, ...]:
    """The constant ids a child segment starts with; () for a repeat or a segment that starts with a slot."""
    if isinstance(c, SegmentTemplate) and c.pieces and isinstance(c.pieces[0], Const):
        return c.pieces[0].ids
    return ()


def _merge(cs: tuple[Child, ...]) -> tuple[Child, ...]:
    """Group sibling segments by their first constant token; each group of two or more gets a shared
    parent holding the group's longest common prefix, and its members are merged again below it."""
    groups: dict[int, list[int]] = {}
    for k, c in enumerate(cs):
        lead = _lead(c)
        if lead:
            groups.setdefault(lead[0], []).append(k)
    out: list[Child] = []
    placed: set[int] = set()
    for k, c in enumerate(cs):
        if k in placed:
            continue
        lead = _lead(c)
        members = groups[lead[0]] if lead else [k]
        if len(members) < 2:
            out.append(c)
            continue
        placed.update(members)
        out.append(_shared([cs[m] for m in members]))  # type: ignore[misc]
    return tuple(out)


def _shared(members: list[SegmentTemplate]) -> SegmentTemplate:
    leads = [_lead(m) for m in members]
    n = 0
    while all(n < len(x) for x in leads) and len({x[n] for x in leads}) == 1:
        n += 1
    prefix = leads[0][:n]
    reads = []
    children: list[Child] = []
    for m, lead in zip(members, leads, strict=True):
        rest = lead[n:]
        pieces = ((Const(rest),) if rest else ()) + m.pieces[1:]
        if pieces:
            children.append(SegmentTemplate(pieces, m.reads, m.children))
        else:  # all prefix: its reads land on the shared segment's last token, its children hang off it
            reads += m.reads
            children += m.children
    return SegmentTemplate((Const(prefix),), tuple(reads), _merge(tuple(children)))
