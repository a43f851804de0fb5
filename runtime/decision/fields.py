"""Typed reads of a decoded JSON description, each failure one error naming the field's path.

Shared by the compiler's reading of a checkpoint's decision_config.json (flidec/formats/template_v1.py:
FormatError) and the runtime's reading of an artifact's format.json (format.py: ArtifactError), so both
name a bad field the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, NoReturn

from flidec.ir.errors import FlideError


class Fields:
    """Reads of `where`'s fields; a bad one raises `error` naming `where`, the field's path and the fault."""

    def __init__(self, where: str, error: type[FlideError]):
        self.where, self.error = where, error

    def fail(self, path: str, message: str) -> NoReturn:
        raise self.error(f"{self.where}: `{path or '(top)'}` {message}")

    def keys(self, v: Any, path: str, allowed: set[str], required: set[str] = frozenset()) -> dict:
        """An object whose fields are among `allowed` and include `required`."""
        d = self.dict(v, path)
        unknown = sorted(set(d) - allowed)
        if unknown:
            self.fail(
                f"{path}.{unknown[0]}" if path else unknown[0],
                f"is not a field flidec reads here (known: {', '.join(sorted(allowed))})",
            )
        missing = sorted(required - set(d))
        if missing:
            self.fail(f"{path}.{missing[0]}" if path else missing[0], "is required")
        return d

    def exact(self, v: Any, path: str, fields: set[str]) -> dict:
        """An object with exactly these fields."""
        return self.keys(v, path, fields, fields)

    def dict(self, v: Any, path: str) -> dict:
        if not isinstance(v, dict):
            self.fail(path, f"must be an object, got {_shown(v)}")
        return v

    def list(self, v: Any, path: str, n: int | None = None) -> list:
        if not isinstance(v, list) or (n is not None and len(v) != n):
            self.fail(path, f"must be an array{f' of {n}' if n is not None else ''}, got {_shown(v)}")
        return v

    def str(self, v: Any, path: str) -> str:
        if not isinstance(v, str):
            self.fail(path, f"must be a string, got {_shown(v)}")
        return v

    def int(self, v: Any, path: str, least: int = 0) -> int:
        if not isinstance(v, int) or isinstance(v, bool) or v < least:
            self.fail(path, f"must be an integer of at least {least}, got {_shown(v)}")
        return v

    def num(self, v: Any, path: str) -> float:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            self.fail(path, f"must be a finite number, got {_shown(v)}")
        return float(v)

    def bool(self, v: Any, path: str) -> bool:
        if not isinstance(v, bool):
            self.fail(path, f"must be true or false, got {_shown(v)}")
        return v

    def one_of(self, v: Any, path: str, allowed: tuple[str, ...]) -> str:
        if v not in allowed:
            self.fail(path, f"must be one of {', '.join(allowed)}, got {_shown(v)}")
        return v

    def opt(self, v: Any, path: str, read: Callable[[Any, str], Any]) -> Any:
        return None if v is None else read(v, path)


def _shown(v: Any) -> str:
    try:
        return json.dumps(v, ensure_ascii=False)[:40]
    except (TypeError, ValueError):
        return type(v).__name__
