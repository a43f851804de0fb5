"""BENCHMARKS.md's decision formats section: decision_report.py's text of decision_oracle.py's GPU run and of
decision_plans.py's CPU one."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import decision_report


def decision_section(run: Path | None, plans: Path | None, root: Path) -> str:
    """The decision formats' section from decision_oracle.py's GPU run and decision_plans.py's CPU one; empty
    without either, so the page is byte for byte what it was before the section."""
    parts = []
    if run is not None:
        parts.append(decision_report.section(json.loads((root / run).read_text())).rstrip())
    if plans is not None:
        text = decision_report.plans_section(json.loads((root / plans).read_text())).rstrip()
        if run is not None:  # what the two measurements together say
            parts.append("Where the reading itself agrees (the table below: the same prompt ids, head rows "
                         "and arithmetic), what is left between the engines is each one's bf16 forward pass "
                         "(flidec's default build rounds activations to bf16, docs/DESIGN.md E4).")
        parts.append(text if run is not None else "## Decision formats beside flide\n\n" + text)
    return "".join("\n\n" + p for p in parts)
