"""flidec.models sits below the runtime: every module of it imports with flidec.runtime blocked (no cycle)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import flidec.models

MODULES = sorted(f"flidec.models.{p.stem}" for p in Path(flidec.models.__file__).parent.glob("*.py")
                 if p.stem != "__init__")

SCRIPT = """
import importlib, importlib.abc, sys

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "flidec.runtime" or name.startswith("flidec.runtime."):
            raise ImportError(f"blocked: {name}")
        return None

sys.meta_path.insert(0, Blocker())
for name in sys.argv[1:]:
    importlib.import_module(name)
print(sorted(m for m in sys.modules if m.startswith("flidec.runtime")))
"""


def test_models_import_without_the_runtime() -> None:
    assert "flidec.models.config" in MODULES and "flidec.models.tokenizer" in MODULES
    run = subprocess.run([sys.executable, "-c", SCRIPT, *MODULES], capture_output=True, text=True,
                         timeout=120, check=False)
    assert (run.returncode, run.stdout) == (0, "[]\n"), run.stderr[-2000:]
