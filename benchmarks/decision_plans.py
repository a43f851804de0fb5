"""flidec's reading of a decision format beside flide 0.1.4's own, on the CPU, without a forward pass.

    python benchmarks/decision_plans.py [--layouts readout,standalone,forms] [--requests 48] [--out FILE]

Consumes the decision layouts' checkpoints (make_checkpoint --decision LAYOUT, tiny: the tokenizer and the
readout head are the real shapes' own) and decision_oracle.py's seeded request set; for each request it asks
both engines' public planning for every question's prompt ids (flide: its format's `plan`, prefix plus the
question's suffix; flidec: DecisionReading's walker, each read's path) and, from the same seeded logits over
each question's labels, both engines' answers (flide: its format's `finish`; flidec: DecisionReading.answer).
Produces per layout: questions compared, prompts whose ids differ, refusals that differ, max |dp| of the
answers. flide is imported from where pip put it (`pip install --no-deps flide==0.1.4` beside flidec).
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.decision_oracle import draw_requests, request_set

LAYOUTS = ("readout", "standalone", "forms")


def flidec_side(ckpt: Path, requests: list[dict]) -> list[dict | str]:
    """Per request: {qid: (prompt ids, head rows, piece)} or the refusal's text."""
    from flidec.formats import resolve_format
    from flidec.frontend import load_spec
    from flidec.ir.errors import InstanceError
    from flidec.models.tokenizer import load_tokenizer

    spec, _ = load_spec(ROOT / "tests" / "formats" / "systemone_decision.flide")
    reading = resolve_format(spec.format, ckpt, load_tokenizer(ckpt)).fmt
    walker = reading.walker(spec.trees[0], verify=True)
    out: list[dict | str] = []
    for request in requests:
        try:
            plan, shape = walker.plan(request)
        except InstanceError as e:
            out.append("; ".join(e.problems))
            continue
        reads = {path: (plan.path_ids(seg), piece) for seg, piece, path in plan.reads}
        out.append(
            {qid: reads[f"questions[{json.dumps(qid, ensure_ascii=False)}]"] for qid in shape["questions"]}
        )
    return out, reading


def flide_side(ckpt: Path, requests: list[dict]):
    from flide.formats.base import check_limits
    from flide.formats.template import Template

    fmt = Template(str(ckpt))
    out = []
    for request in requests:
        try:
            parsed = SystemOneRequestOf(request)
            check_limits(fmt, parsed)  # what flide's request path runs before the format plans
            plan = fmt.plan(parsed)
        except ValueError as e:  # flide's refusals (pydantic's validation errors are ValueErrors too)
            out.append(str(e).splitlines()[0])
            continue
        whole = {
            qid: plan.prefix + suffix for (qid, *_), suffix in zip(plan.data, plan.suffixes, strict=True)
        }
        out.append((plan, whole))
    return out, fmt


def compare(ckpt: Path, requests: list[dict], seed: int) -> dict:
    ours, reading = flidec_side(ckpt, requests)
    theirs, fmt = flide_side(ckpt, requests)
    rng = random.Random(seed)
    stats = {
        "requests": len(requests),
        "questions": 0,
        "ids_differ": 0,
        "rows_differ": 0,
        "refusals_differ": 0,
        "both_refused": 0,
        "max_dp": 0.0,
        "examples": [],
    }
    for request, a, b in zip(requests, ours, theirs, strict=True):
        if isinstance(a, str) or isinstance(b, str):
            if isinstance(a, str) and isinstance(b, str):
                stats["both_refused"] += 1
            else:
                stats["refusals_differ"] += 1
                stats["examples"].append(
                    {
                        "flidec": a if isinstance(a, str) else "answered",
                        "flide": b if isinstance(b, str) else "answered",
                    }
                )
            continue
        plan, ids = b
        outputs, pending = [], []
        for qid, _, _, rows in plan.data:
            stats["questions"] += 1
            path_ids, piece = a[qid]
            if list(path_ids) != list(ids[qid]):
                stats["ids_differ"] += 1
            # the same logits for both: one value per head row this question reads
            vector = [0.0] * len(fmt.row_ids)
            flat = [r for rs in rows for r in (rs if isinstance(rs, list) else [rs])]
            # the head rows each label reads: a readout head's row index, or the output head's token id
            read = flat if reading.fmt.head.kind == "readout" else [fmt.row_ids[r] for r in flat]
            if read != list(piece.labels):
                stats["rows_differ"] += 1
            values = {r: rng.gauss(0.0, 2.0) for r in flat}
            for r, v in values.items():
                vector[r] = v
            outputs.append([[vector]])
            ours_logits = [values[r] for r in flat]
            pending.append((qid, _probs(reading.answer(piece, ours_logits))))
        response, _ = fmt.finish(SystemOneRequestOf(request), plan, outputs)  # flide's own arithmetic
        for qid, mine_p in pending:
            theirs_p = _probs(response.answers[qid].model_dump())
            stats["max_dp"] = max(
                stats["max_dp"], max(abs(x - y) for x, y in zip(mine_p, theirs_p, strict=True))
            )
    return stats


def SystemOneRequestOf(request: dict):  # noqa: N802 (flide's request type, built from the same dict)
    from flide.api.schema import SystemOneRequest

    return SystemOneRequest.model_validate({"model": "x", **request})


def _counter(tok):
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def _probs(answer: dict) -> list[float]:
    if answer["type"] == "noul":
        return [answer["noul"]]
    return list(answer["probabilities"].values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python benchmarks/decision_plans.py", description=__doc__.split("\n")[0]
    )
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/decision-plans"))
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    from tokenizers import Tokenizer

    from flidec.testing.make_checkpoint import make_checkpoint

    result = {
        "command": "python benchmarks/decision_plans.py " + " ".join(argv or sys.argv[1:]),
        "flide": _flide_version(),
        "requests_per_layout": args.requests,
        "date": datetime.date.today().isoformat(),
        "commit": _commit(),
        "layouts": {},
    }
    for layout in args.layouts.split(","):
        ckpt = args.work_dir / layout
        if not (ckpt / "decision_config.json").is_file():
            make_checkpoint(ckpt, "tiny", seed=0, decision=layout)
        count = _counter(Tokenizer.from_file(str(ckpt / "tokenizer.json")))
        config = json.loads((ckpt / "decision_config.json").read_text())
        requests = request_set(draw_requests(count, args.requests - 3, args.seed, 800), config)
        result["layouts"][layout] = compare(ckpt, requests, args.seed)
        print(layout, json.dumps({k: v for k, v in result["layouts"][layout].items() if k != "examples"}))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return 0


def _commit() -> str:
    import subprocess

    run = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return run.stdout.strip() or "unknown"


def _flide_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("flide")
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
