"""Keep a spec's comments and blank lines through `flidec fmt`: source + its parsed Spec -> a printer Layout.

The tree IR holds no comments, so the formatter finds them again in the source and hangs each on a node
by position: a comment after code on a line trails the last node that starts on that line; a comment on its
own line leads the next node of its body (or, with none left, stays before the body's closing brace); a
comment inside an ask's criteria block or a tree's header moves before that node. Blank lines between the
nodes of a body survive as one blank line. Relies on every node's Loc spanning its whole declaration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flidec.ir.printer import Layout
from flidec.ir.tree import Fork, Loc, Spec, Tree

# Strings first, so that `//` inside a string is not taken for a comment.
_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*[\s\S]*?\*/')


@dataclass(frozen=True)
class _Anchor:
    loc: Loc
    children: tuple[Loc, ...] | None  # the body of a spec, tree or fork; None for a leaf node


def layout_of(source: str, spec: Spec) -> Layout:
    anchors = _anchors(spec)
    leading: dict[Loc, list[str]] = {}
    trailing: dict[Loc, str] = {}
    closing: dict[Loc, list[str]] = {}
    end: list[str] = []
    first_comment_line: dict[Loc, int] = {}
    lines = source.split("\n")
    line_starts = [0]
    for ln in lines:
        line_starts.append(line_starts[-1] + len(ln) + 1)
    for m in _TOKENS.finditer(source):
        text = m.group()
        if text.startswith('"'):
            continue
        line = next(i for i in range(len(line_starts) - 1, -1, -1) if line_starts[i] <= m.start()) + 1
        col = m.start() - line_starts[line - 1] + 1
        pos = (line, col)
        before = lines[line - 1][: col - 1]
        if before.strip() and not before.strip().startswith(("//", "/*")):
            owner = _last_starting_on(anchors, line, col)
            if owner is not None:
                trailing[owner] = f"{trailing[owner]} {text}" if owner in trailing else text
                continue
        if pos < (spec.loc.line, spec.loc.col):
            leading.setdefault(spec.loc, []).append(text)
            continue
        holder = _innermost(anchors, pos)
        if holder is None:
            end.append(text)
        elif holder.children is None:
            leading.setdefault(holder.loc, []).append(text)
        else:
            nxt = next((c for c in holder.children if (c.line, c.col) > pos), None)
            if nxt is not None:
                leading.setdefault(nxt, []).append(text)
                first_comment_line.setdefault(nxt, line)
            elif holder.loc == spec.loc:
                end.append(text)
            else:
                closing.setdefault(holder.loc, []).append(text)
    blank = set()
    for a in anchors:
        for i, child in enumerate(a.children or ()):
            top = min(child.line, first_comment_line.get(child, child.line))
            if i > 0 and top >= 2 and not lines[top - 2].strip():
                blank.add(child)
    return Layout(
        leading={k: tuple(v) for k, v in leading.items()},
        trailing=trailing,
        closing={k: tuple(v) for k, v in closing.items()},
        blank_before=frozenset(blank),
        end=tuple(end),
    )


def _anchors(spec: Spec) -> list[_Anchor]:
    out = [_Anchor(spec.loc, (spec.format.loc, *(t.loc for t in spec.trees))), _Anchor(spec.format.loc, None)]

    def body(owner: Tree | Fork) -> None:
        head = (owner.state.loc,) if isinstance(owner, Tree) else ()
        out.append(_Anchor(owner.loc, head + tuple(n.loc for n in owner.body)))
        if isinstance(owner, Tree):
            out.append(_Anchor(owner.state.loc, None))
        for n in owner.body:
            if isinstance(n, Fork):
                body(n)
            else:
                out.append(_Anchor(n.loc, None))

    for tree in spec.trees:
        body(tree)
    return out


def _contains(loc: Loc, pos: tuple[int, int]) -> bool:
    return (loc.line, loc.col) <= pos < (loc.end_line, loc.end_col)


def _innermost(anchors: list[_Anchor], pos: tuple[int, int]) -> _Anchor | None:
    inside = [a for a in anchors if _contains(a.loc, pos)]
    return max(inside, key=lambda a: (a.loc.line, a.loc.col), default=None)


def _last_starting_on(anchors: list[_Anchor], line: int, col: int) -> Loc | None:
    starts = [a.loc for a in anchors if a.loc.line == line and a.loc.col < col]
    return max(starts, key=lambda loc: loc.col, default=None)
