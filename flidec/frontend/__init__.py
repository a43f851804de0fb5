"""The .flide frontend: source text -> verified tree IR (lark grammar, error translation, layout for fmt).

`load_spec(path)` is what every command that compiles or runs a spec calls; `parse_spec` parses without
verifying (fmt formats specs that do not verify yet). lark is imported here and nowhere in flidec.ir, so
the runtime never needs it.
"""

from __future__ import annotations

from pathlib import Path

from flidec.frontend.parser import parse_spec, read_spec
from flidec.ir.errors import SpecError
from flidec.ir.tree import Spec
from flidec.ir.verify import verify


def load_spec(path: str | Path) -> tuple[Spec, str]:
    """Read, parse and verify a spec file; raise SpecError (with the source, for carets) on any problem."""
    spec, source = read_spec(path)
    diagnostics = verify(spec)
    if diagnostics:
        raise SpecError(diagnostics, source)
    return spec, source


__all__ = ["load_spec", "parse_spec", "read_spec"]
