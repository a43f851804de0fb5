"""flidec's own error types and diagnostics.

Every failure a user can cause (a bad spec, a bad instance, a bad artifact or model directory) is raised as
a FlideError subclass with a message that says what to fix; nothing else is meant to escape the CLI. Spec
diagnostics render GCC/rustc style: `path:line:col: error: message`, the source line, a caret, notes.
"""

from __future__ import annotations

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


def _excerpt(source: str, loc: Loc) -> list[str]:
    src_lines = source.splitlines()
    if loc.line > len(src_lines):
        return []
    text = src_lines[loc.line - 1].expandtabs(1)
    width = 1
    if loc.end_line == loc.line and loc.end_col > loc.col:
        width = loc.end_col - loc.col
    gutter = f"{loc.line:>4} | "
    return [gutter + text, " " * (len(gutter) + loc.col - 1) + "^" + "~" * (width - 1)]


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
