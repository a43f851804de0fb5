"""BENCHMARKS.md's section "Decision formats beside flide" from benchmarks/decision_oracle.py's result file.

Consumes the result JSON (per layout: the request set, each engine's row, the comparison); produces the
Markdown section: heading, command, date, GPU, commit, the table and what its numbers mean. No side
effects on import: benchmarks/report.py (`--decision FILE`) and decision_oracle.py (`--report`) both use it.
"""

from __future__ import annotations

ENGINES = ("flidec", "flide")


def section(result: dict) -> str:
    """BENCHMARKS.md's section: heading, command, date, GPU, commit, the table, what the numbers mean."""
    engines = result.get("engines", list(ENGINES))
    via = " (`DECISION=1 bash benchmarks/device.sh COMMIT`)" if result["device"].startswith("cuda") else ""
    lines = [
        "## Decision formats beside flide", "",
        f"`{result['command']}`{via}, {result['date']}, "
        f"{result.get('gpu') or result['device']}, commit {result['commit']}; {result['size']} checkpoints "
        f"(seeded weights, the real tokenizer), `{result['spec']}`.", "",
        "| layout | requests | questions compared | max \\|dp\\| | mean \\|dp\\| | argmax flips "
        "| refusals that differ | refused by both | flidec s | flide s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for layout, entry in result["layouts"].items():
        if "skipped" in entry or "error" in entry:
            lines.append(f"| {layout} | {entry.get('skipped') or 'error'} |" + " |" * 8)
            if "error" in entry:
                notes.append(f"{layout}: {entry['error']}")
            continue
        c = entry.get("comparison") or {}
        rows = entry.get("engines", {})
        cells = [layout, str(entry["requests"]), _n(c.get("questions")), _p(c.get("max_dp")),
                 _p(c.get("mean_dp")), _n(c.get("argmax_flips")), _n(c.get("refusals_differ")),
                 _n(c.get("both_refused"))]
        for engine in ENGINES:
            row = rows.get(engine, {})
            cells.append(_s(row))
            if engine in engines and row.get("status") != "ok":
                notes.append(f"{layout}, {engine}: {row.get('status')}: {row.get('error', '')}".rstrip(": "))
            elif row.get("note"):
                notes.append(f"{layout}, {engine}: {row['note']}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Per layout, both engines answer the same seeded System One requests: flidec through the "
              "spec compiled for the device with the checkpoint's decision_config.json, flide "
              f"{_flide_version(result)} through its Engine with the format that file names (its offline "
              "packed path). |dp| is the absolute difference of one probability (a noul's p, a choice "
              "option's, a score level's) over every question both answered; flide rounds to 6 decimals, so "
              "|dp| under 1e-6 is agreement. An argmax flip is a question whose top option differs (a "
              "noul's p on either side of 0.5); a refusal that differs is a request one engine answers and "
              "the other turns down. Seconds: one pass over the set after a warm-up pass, request JSON to "
              "answers (flide's planning and finishing included), each engine in its own process."]
    if result.get("stopped"):
        notes.append(f"the run was {result['stopped']}")
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _flide_version(result: dict) -> str:
    for entry in result["layouts"].values():
        if entry.get("engines", {}).get("flide", {}).get("version"):
            return entry["engines"]["flide"]["version"]
    return result["environment"].get("flide") or "0.1.4"


def _n(v: object) -> str:
    return "-" if v is None else str(v)


def _p(v: float | None) -> str:
    return "-" if v is None else f"{v:.2e}" if 0 < v < 1e-3 else f"{v:.4f}"


def _s(row: dict) -> str:
    if row.get("status") != "ok":
        return {"not requested": "-"}.get(row.get("status"), row.get("status") or "-")
    if row.get("timed_s") is None:
        return f"{row['warm_s']:.2f} (cold)"
    return f"{row['timed_s']:.2f}"


def plans_section(result: dict) -> str:
    """The reading beside flide's own, on the CPU (benchmarks/decision_plans.py): prompt ids, refusals and
    the answers both engines make from the same logits."""
    lines = [
        "### The reading beside flide's own, without a forward pass (benchmarks/decision_plans.py)", "",
        f"`{result['command']}`, {result['date']}, CPU, commit {result['commit']}, flide {result['flide']}; "
        "tiny checkpoints of the three layouts (the real tokenizer, the layouts' own readout heads).", "",
        "| layout | requests | questions compared | prompts whose ids differ | head rows that differ "
        "| refusals that differ | refused by both | max \\|dp\\| from the same logits |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for layout, s in result["layouts"].items():
        cells = [layout, s["requests"], s["questions"], s["ids_differ"], s["rows_differ"],
                 s["refusals_differ"], s["both_refused"], _p(s["max_dp"])]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += ["", "Each question's whole prompt as flide's format plans it (its prefix and the "
              "question's suffix) against flidec's path for that read; then one seeded logit per head row "
              "the question reads, given to flide's `finish` and to flidec's `DecisionReading.answer`: "
              "labels, label forms, readout rows, temperatures and the softmax. flide rounds its "
              "probabilities to 6 decimals, so a |dp| under 1e-6 is agreement."]
    return "\n".join(lines) + "\n"
