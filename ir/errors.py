"""flidec's own error types and diagnostics.

Every failure a user can cause (a bad spec, a bad instance, a bad artifact or model directory) is raised as
a FlideError subclass with a message that says what to fix; nothing else is meant to escape the CLI. Spec
diagnostics render GCC/rustc style: `path:line:col: error: message`, the source line, a caret, notes.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from flidec.ir.tree import Loc


class FlideError(Exception):
    """Base of every error flidec reports to a user."""


@dataclass(frozen=True, slots=True)
class Diagnostic:
    loc: Loc
    message: str
    hint: str | None = None
    notes: tuple[tuple[Loc, str], ...] = ()

    def render(self, source: str | None = None) -> str:
        where = str(self.loc) if self.loc.line > 0 else self.loc.file  # no line: a whole file, or no file
        lines = [f"{where}: error: {self.message}"]
        if source is not None and self.loc.line > 0:
            lines += _excerpt(source, self.loc)
        for loc, note in self.notes:
            lines.append(f"{loc}: note: {note}")
        if self.hint:
            lines.append(f"  = hint: {self.hint}")
        return "\n".join(lines)


EXCERPT_WIDTH = 120  # columns of a source line a diagnostic shows: a window around the caret


def _excerpt(source: str, loc: Loc) -> list[str]:
    line = _source_line(source, loc.line)
    if line is None:
        return []
    text = line.expandtabs(1)
    col = loc.col - 1  # where the caret goes, from 0
    width = 1
    if loc.end_line == loc.line and loc.end_col > loc.col:
        width = loc.end_col - loc.col
    if len(text) > EXCERPT_WIDTH:  # a long line: the window from a third before the caret, "..." at the cuts
        start = max(0, min(col - EXCERPT_WIDTH // 3, len(text) - EXCERPT_WIDTH))
        shown = text[start:start + EXCERPT_WIDTH]
        lead = "..." if start > 0 else ""
        text = lead + shown + ("..." if start + EXCERPT_WIDTH < len(text) else "")
        col = col - start + len(lead)
        width = max(1, min(width, len(lead) + len(shown) - col))
    gutter = f"{loc.line:>4} | "
    return [gutter + text, " " * (len(gutter) + col) + "^" + "~" * (width - 1)]


def _source_line(source: str, number: int) -> str | None:
    """Line `number` (from 1) of `source`; lines end at "\\n" only, as the lexer counts them."""
    starts = _line_starts(source)
    if not 1 <= number <= len(starts):
        return None
    end = starts[number] - 1 if number < len(starts) else len(source)
    return source[starts[number - 1]:end].rstrip("\r")


@functools.lru_cache(maxsize=4)
def _line_starts(source: str) -> list[int]:
    """Where each line starts: computed once per source however many diagnostics it has."""
    return [0] + [m.end() for m in re.finditer("\n", source)]


class SpecError(FlideError):
    """One or more problems in a spec; `diagnostics` holds all of them, in source order."""

    def __init__(self, diagnostics: list[Diagnostic] | tuple[Diagnostic, ...], source: str | None = None):
        self.diagnostics = tuple(sorted(diagnostics, key=lambda d: (d.loc.line, d.loc.col)))
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(d.render(self.source) for d in self.diagnostics)


class InstanceError(FlideError):
    """A bad instance; each problem names its path, e.g. `action[3].outcome[0].text: ...`."""

    def __init__(self, problems: list[str] | tuple[str, ...]):
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


class ModelError(FlideError):
    """A model directory, hub id, config or tokenizer flidec cannot use."""


class ArtifactError(FlideError):
    """An artifact refused on load: corrupted, or built for another target or version."""
