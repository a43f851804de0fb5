"""Run the harness from a source checkout: make `flidec.*` importable without installing the repo.

Consumes the repo root (on sys.path already, so `flidec` imports from ./flidec) and pyproject.toml's
`[tool.setuptools] package-dir`, which installs ir/, passes/, codegen/ and runtime/ as flidec.ir, ...;
produces those subpackages registered in sys.modules from their folders, so nothing has to be built on
the GPU box (it has no network and maybe no recent setuptools). Does nothing when flidec is installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import tomllib
from pathlib import Path


def ensure_flidec(root: Path) -> str:
    """'installed' when flidec's subpackages import already, else 'source' after mapping them."""
    try:
        importlib.import_module("flidec.ir")
        return "installed"
    except ModuleNotFoundError:
        pass
    flidec = importlib.import_module("flidec")
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for name, folder in sorted(config.items()):
        parent, _, child = name.rpartition(".")
        if not parent or name in sys.modules:
            continue
        path = root / folder
        spec = importlib.util.spec_from_file_location(
            name, path / "__init__.py", submodule_search_locations=[str(path)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        setattr(flidec if parent == "flidec" else sys.modules[parent], child, module)
    return "source"
