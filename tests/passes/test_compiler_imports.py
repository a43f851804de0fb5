"""The compiler's imports of the runtime: only the contracts both sides keep (docs/DESIGN.md "Layout and
dependency direction"), never the runtime's serving machinery. A new import of the runtime from passes/,
codegen/, flidec/compile.py or flidec/formats/ fails here until the list (and the doc) says why it is one."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPILER = [
    *sorted((ROOT / "passes").glob("*.py")),
    *sorted((ROOT / "codegen").glob("*.py")),
    ROOT / "flidec" / "compile.py",
    *sorted((ROOT / "flidec" / "formats").glob("*.py")),
]
# the contracts: what a kernel launch, a recording, a meta table, the op table, the model graph, a prompt
# format and an artifact's version are, written once on the runtime side (it reads them at serving time), and
# the reference executor, the oracle any stage's graph runs on (passes/graph.py)
ALLOWED = {
    "flidec.runtime.recording",
    "flidec.runtime.launch",
    "flidec.runtime.tables",
    "flidec.runtime.meta",
    "flidec.runtime.artifact",
    "flidec.runtime.reference.op_table",
    "flidec.runtime.reference.ops",
    "flidec.runtime.reference.qwen3_5",
    "flidec.runtime.reference.executor",
    "flidec.runtime.next_token",
    "flidec.runtime.decision.format",
    "flidec.runtime.decision.fields",
    "flidec.runtime.decision.reading",
    "flidec.runtime.decision.render",
}


def runtime_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("flidec.runtime"):
            if node.module in ("flidec.runtime", "flidec.runtime.reference"):
                out |= {f"{node.module}.{a.name}" for a in node.names}
            else:
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("flidec.runtime")}
    return out


def test_the_compiler_imports_only_runtime_contracts() -> None:
    found = {str(p.relative_to(ROOT)): runtime_imports(p) - ALLOWED for p in COMPILER}
    assert not {k: v for k, v in found.items() if v}
