"""The runtime imports no compiler: with Triton, lark, transformers and flidec's codegen, passes, formats and
frontend packages blocked, flidec.runtime.program loads a cpu artifact and answers."""

from __future__ import annotations

import json
import subprocess
import sys

BLOCKED = ("triton", "lark", "transformers", "flidec.codegen", "flidec.passes", "flidec.formats",
           "flidec.frontend", "cuda")

SCRIPT = """
import importlib.abc, json, sys
BLOCKED = %r

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"blocked: {name}")
        return None

sys.meta_path.insert(0, Blocker())
from flidec.runtime.program import load
program = load(sys.argv[1], "cpu", served_name="jev")
result = program.run([{"state": "The sky is green.",
                       "questions": {"q": {"type": "noul", "instructions": "Sky green?"}}}])
loaded = sorted(m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in BLOCKED))
print(json.dumps({"result": result, "loaded": loaded}))
"""


def test_runtime_loads_and_answers_without_the_compiler(systemone_cpu_artifact) -> None:
    run = subprocess.run([sys.executable, "-c", SCRIPT % (BLOCKED,), str(systemone_cpu_artifact)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []
    (answer,) = out["result"]
    assert answer["model"] == "jev" and answer["answers"]["q"]["type"] == "noul"
