"""The tree IR modules load without lark or torch (the runtime box has neither the parser nor needs it)."""

from __future__ import annotations

import subprocess
import sys

BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("lark", "torch"):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
import flidec.ir.tree, flidec.ir.errors, flidec.ir.verify, flidec.ir.printer, flidec.ir.serde
import flidec.ir.instance
assert "lark" not in sys.modules and "torch" not in sys.modules
print("ok")
"""


def test_ir_imports_without_lark_or_torch():
    r = subprocess.run([sys.executable, "-c", BLOCK], capture_output=True, text=True, timeout=60, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, "ok\n", "")
