"""Decision formats beside flide: flidec's compiled artifact and flide 0.1.4 on the same System One requests.

    python benchmarks/decision_oracle.py [--layouts readout,standalone,forms] [--engines flidec,flide] [--size
        0.8B] [--device cuda] [--requests 48] [--time-budget-s 400] [--out decision.json] [--commit HASH]
    python benchmarks/decision_oracle.py --report decision.json   # BENCHMARKS.md's section from a result

Consumes "flide-template-v1" checkpoints (make_checkpoint --decision LAYOUT; made as /tmp/decision-SIZE-LAYOUT
when missing); produces per layout, for ~48 seeded requests, max and mean |dp|, argmax flips and differing
refusals of flidec (tests/formats/systemone_decision.flide compiled) against flide, and each one's seconds:
a JSON (`--out`; each engine in its own process, its failure a row) and Markdown."""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/decision_oracle.py` puts benchmarks/ first, not the root
    sys.path.insert(0, str(ROOT))

from benchmarks.decision_report import ENGINES, section
from benchmarks.source import ensure_flidec

ensure_flidec(ROOT)  # the GPU box runs flidec from this source tree when it is not installed

# the harness's own seeded prose draws, so these states and questions read like its workloads'
from benchmarks.workloads import _GRADES, _noul, _Prose

SPEC = ROOT / "tests" / "formats" / "systemone_decision.flide"
LAYOUTS = ("readout", "standalone", "forms")
WEIGHT_FILES = ("model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json")
MIN_WORKER_S = 20.0  # an engine is not started with less left: it could not load, let alone answer
TAIL_LINES = 40  # of a worker's output kept in the JSON when it fails
# Requests whose refusal one layout's configuration asks for: appended after the drawn ones, unchanged by a
# layout, so "refusals that differ" checks both engines turn down the same ones.
PROBES = (
    {"state": "A list of the colours a palette offers, one per option below.",
     "questions": {
         "colour": {"type": "choice", "instructions": "Which colour is named first?",  # over standalone's 30
                    "criteria": {f"colour {i}": None for i in range(36)}},
         "short": {"type": "noul", "instructions": "Is the list short?"}}},
    {"state": {"ticket": 51, "text": "The export button does nothing on Safari."},
     "questions": {
         "bare": {"type": "noul"},  # standalone's prompt refuses a question without instructions
         "area": {"type": "choice", "instructions": "Which area?",
                  "criteria": {"frontend": "the browser side", "backend": None}}}},
    {"state": "The build took 41 minutes today, up from 12 last week.",
     "questions": {
         "slow": {"type": "noul", "instructions": "Did the build get slower?"},
         "rate": {"type": "score", "instructions": "How bad is it?",  # forms reads no score question
                  "criteria": ["fine", "annoying", "blocking"]}}},
)


class Stopped(BaseException):  # not an Exception: an engine's `except Exception` must let it through
    """SIGTERM or SIGINT (device.sh's DECISION_S cap): stop the worker, keep what was measured."""


def _stop_signal(signum: int, frame: object) -> None:
    raise Stopped(f"stopped by signal {signum}")


def log(msg: str) -> None:
    print(f"[decision {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the requests -------------------------------------------------------------------------------------------


def draw_requests(count, n: int, seed: int, max_tokens: int = 1500) -> list[dict]:
    """`n` seeded System One requests: states of 50-`max_tokens` tokens (log-uniform; `count` tokenizes) as
    prose, JSON objects and lists of events; 1-6 questions each, noul (with and without criteria), choice
    (2-40 options, with and without descriptions, some descriptions JSON), score (2-10 levels)."""
    p = _Prose(count, random.Random(f"decision:{seed}"))
    out = []
    for i in range(n):
        tokens = round(math.exp(p.rng.uniform(math.log(50), math.log(max(max_tokens, 50)))))
        shape = p.rng.choices(("text", "object", "list"), (11, 6, 3))[0]
        if shape == "object":  # the body carries most of the tokens
            state: object = {"id": 7000 + i, "title": p.sentence(10), "tags": p.distinct_words(3),
                             "body": p.state(max(tokens - 60, 20)), "meta": {"reviewed": i % 2 == 0}}
        elif shape == "list":  # standalone keeps a list's tail when it cuts it, a text's head
            state = [{"t": t, "event": p.sentence(14)} for t in range(max(tokens // 22, 2))]
        else:
            state = p.state(tokens)
        questions = {}
        for j in range(p.rng.randint(1, 6)):
            kind = p.rng.choices(("noul", "choice", "score"), (3, 4, 2))[0]
            question = _noul(p) if kind == "noul" else _choice(p) if kind == "choice" else _score(p)
            if p.rng.random() < 0.1:  # instructions as a JSON object, rendered through `describe`
                question["instructions"] = {"ask": question["instructions"], "about": p.term()}
            questions[f"q{j + 1}"] = question
        out.append({"state": state, "questions": questions})
    return out


def _choice(p: _Prose) -> dict:
    r = p.rng.random()
    n = p.rng.randint(2, 5) if r < 0.5 else p.rng.randint(6, 15) if r < 0.8 else p.rng.randint(16, 40)
    style = p.rng.choice(("bare", "described", "mixed")) if n <= 12 else p.rng.choice(("bare", "mixed"))
    criteria: dict = {}
    for k, word in enumerate(p.distinct_words(n)):
        if style == "bare" or (style == "mixed" and k % 3 == 1):
            criteria[word] = None
        elif style == "mixed" and k % 3 == 2:
            criteria[word] = {"hint": p.sentence(6)}
        else:
            criteria[word] = p.sentence(10)
    return {"type": "choice", "instructions": f"Which option fits what the state says about {p.term()}?",
            "criteria": criteria}


def _score(p: _Prose) -> dict:
    picks = sorted(p.rng.sample(range(len(_GRADES)), p.rng.randint(2, 10)))
    levels = [_GRADES[i] if p.rng.random() < 0.8 else {"level": _GRADES[i]} for i in picks]
    return {"type": "score", "instructions": f"How much does the state say about {p.term()}?",
            "criteria": levels}


def request_set(drawn: list[dict], config: dict) -> list[dict]:
    """The requests one layout answers: the drawn ones adapted to its decision_config.json, then PROBES."""
    return adapt(drawn, config) + [json.loads(json.dumps(r)) for r in PROBES]


def adapt(requests: list[dict], config: dict) -> list[dict]:
    """Drawn requests as a layout takes them: only question types it reads (a request left without any gets
    one noul) and at most its `max_options` options a choice, so that its refusals come from PROBES alone."""
    types, cap = config.get("types"), config.get("max_options")
    out = []
    for r in requests:
        questions = {}
        for qid, q in r["questions"].items():
            if types is not None and q["type"] not in types:
                continue
            if cap is not None and q["type"] == "choice" and len(q["criteria"]) > cap:
                q = q | {"criteria": dict(list(q["criteria"].items())[:cap])}
            questions[qid] = q
        out.append({"state": r["state"], "questions": questions or {
            "q1": {"type": "noul", "instructions": "Does the state describe a program?"}}})
    return out


# --- comparing answers --------------------------------------------------------------------------------------


def _probabilities(answer: dict) -> dict[str, float]:
    """A noul's p (its one number: p_false's difference is the same), a choice's or score's per option."""
    return {"noul": float(answer["noul"])} if answer["type"] == "noul" else {
        k: float(v) for k, v in answer["probabilities"].items()}


def _top(answer: dict) -> str:
    if answer["type"] == "noul":
        return "true" if float(answer["noul"]) >= 0.5 else "false"
    ps = answer["probabilities"]
    return max(ps, key=lambda k: float(ps[k]))


def _gap(answer: dict) -> float:
    """How far the top option is ahead of the next: a flip across a smaller gap is a near tie."""
    if answer["type"] == "noul":
        return abs(2 * float(answer["noul"]) - 1)
    ps = sorted((float(v) for v in answer["probabilities"].values()), reverse=True)
    return ps[0] - ps[1] if len(ps) > 1 else 1.0


def _why(result: dict) -> str:
    error = result["error"]
    return json.dumps(error, ensure_ascii=False)[:300] if not isinstance(error, str) else error[:300]


def compare(a: list[dict], b: list[dict], names: tuple[str, str] = ("flidec", "flide")) -> dict:
    """Answers of two engines to the same requests: |dp| over every probability of every question both
    answered, argmax flips, requests one answers and the other refuses, questions whose shapes differ."""
    dps: list[float] = []
    by_type: dict[str, dict] = {}
    flips, refusals, mismatched, worst = [], [], [], []
    both_refused = questions = 0
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if "error" in x or "error" in y:
            if "error" in x and "error" in y:
                both_refused += 1
            else:
                name, refusal = (names[0], x) if "error" in x else (names[1], y)
                refusals.append({"request": i, "refused_by": name, "why": _why(refusal)})
            continue
        xa, ya = x["answers"], y["answers"]
        for qid in sorted(set(xa) ^ set(ya)):
            mismatched.append({"request": i, "question": qid, "why": "answered by one engine only"})
        for qid in (q for q in xa if q in ya):
            qa, qb = xa[qid], ya[qid]
            pa, pb = _probabilities(qa), _probabilities(qb)
            if qa["type"] != qb["type"] or pa.keys() != pb.keys():
                mismatched.append({"request": i, "question": qid, "why": "types or options differ"})
                continue
            questions += 1
            d = [abs(pa[k] - pb[k]) for k in pa]
            dps.extend(d)
            t = by_type.setdefault(qa["type"], {"questions": 0, "probabilities": 0, "sum_dp": 0.0,
                                                "max_dp": 0.0, "argmax_flips": 0})
            t["questions"] += 1
            t["probabilities"] += len(d)
            t["sum_dp"] += sum(d)
            t["max_dp"] = max(t["max_dp"], *d)
            worst.append({"request": i, "question": qid, "type": qa["type"], "options": len(pa),
                          "max_dp": max(d)})
            if _top(qa) != _top(qb):
                t["argmax_flips"] += 1
                flips.append({"request": i, "question": qid, "type": qa["type"], names[0]: _top(qa),
                              names[1]: _top(qb), f"{names[0]}_gap": round(_gap(qa), 6),
                              f"{names[1]}_gap": round(_gap(qb), 6)})
    for t in by_type.values():
        t["mean_dp"] = t.pop("sum_dp") / t["probabilities"]
    worst.sort(key=lambda w: -w["max_dp"])
    return {
        "engines": list(names), "requests": len(a), "questions": questions, "probabilities": len(dps),
        "max_dp": max(dps) if dps else None, "mean_dp": sum(dps) / len(dps) if dps else None,
        "argmax_flips": len(flips), "refusals_differ": len(refusals), "both_refused": both_refused,
        "mismatched": len(mismatched), "by_type": by_type, "flips": flips[:24],
        "refusal_differences": refusals[:24], "mismatches": mismatched[:24], "worst": worst[:6],
    }


# --- the engines (each in a worker process of its own) -----------------------------------------------------


def flidec_engine(args: argparse.Namespace) -> tuple[dict, object]:
    """Compile the spec against the checkpoint for the device (kernels from the shared cache), load it."""
    import flidec
    from flidec.compile import compile_artifact
    from flidec.runtime.program import load

    target = _target(args.device)
    artifact = args.work_dir / f"artifact-{args.checkpoint.name}-{target}"
    shutil.rmtree(artifact, ignore_errors=True)  # a fresh compile: the tree under test may have changed
    t0 = time.perf_counter()
    compile_artifact(SPEC, args.checkpoint, target, artifact, kernel_cache=args.kernel_cache, log=sys.stderr)
    t1 = time.perf_counter()
    # saved states off: the timed pass must not resume the warm-up pass's states (flide's session cache is
    # off too)
    program = load(artifact, args.device, saved_states=False)
    facts = {"version": flidec.__version__, "target": target, "artifact": str(artifact),
             "compile_s": round(t1 - t0, 3), "load_s": round(time.perf_counter() - t1, 3),
             "answers": "Program.run(requests): validation, tokenizing, binding, replay, reading"}
    return facts, program.run


def flide_engine(args: argparse.Namespace) -> tuple[dict, object]:
    """flide 0.1.4 through its public API: Engine with the format the checkpoint's decision_config.json names,
    the format's plan per request, Engine.run_plans over them all (its offline packed path), finish."""
    try:
        from importlib import metadata

        from flide.api.schema import SystemOneRequest
        from flide.formats.base import check_limits
        from flide.runtime.engine import Engine
    except Exception as e:  # noqa: BLE001 -- not installed, or its imports fail on this box
        raise Unavailable(f"flide is not importable: {type(e).__name__}: {e}") from None
    if not args.device.startswith("cuda"):
        raise Unavailable("flide runs on CUDA only")
    import logging

    # its start-up notes (kernels compiled on a first start, load time, memory) belong in the run's log
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("flide").setLevel(logging.INFO)
    t0 = time.perf_counter()
    # capture=False: no CUDA graphs, which only its one-request-at-a-time path replays; run_plans packs
    engine = Engine(str(args.checkpoint), device=args.device if ":" in args.device else "cuda:0",
                    dtype="bfloat16", capture=False)
    facts = {"version": metadata.version("flide"), "format": engine.format.name,
             "start_s": round(time.perf_counter() - t0, 3),
             "answers": "per request SystemOneRequest, check_limits, format.plan; Engine.run_plans; "
                        "format.finish"}

    def answer(requests: list[dict]) -> list[dict]:
        out: list[dict | None] = [None] * len(requests)
        todo = []
        for i, r in enumerate(requests):
            try:
                request = SystemOneRequest.model_validate({"model": "flide", "state": r.get("state"),
                                                           "questions": r["questions"]})
                check_limits(engine.format, request)
                todo.append((i, request, engine.format.plan(request)))
            except Exception as e:  # noqa: BLE001 -- as flide's offline runner does: the row's error
                out[i] = {"error": f"{type(e).__name__}: {e}"}
        outputs = engine.run_plans([plan for _, _, plan in todo])[0] if todo else []
        for (i, request, plan), branches in zip(todo, outputs, strict=True):
            try:
                out[i] = engine.format.finish(request, plan, branches)[0].model_dump()
            except Exception as e:  # noqa: BLE001 -- the offline runner's row error too
                out[i] = {"error": f"{type(e).__name__}: {e}"}
        return out  # type: ignore[return-value]

    return facts, answer


class Unavailable(Exception):
    """The engine cannot run here (not importable, or not on this device)."""


def _target(device: str) -> str:
    if not device.startswith("cuda"):
        return "cpu"
    import torch

    major, minor = torch.cuda.get_device_capability(torch.device(device))
    return f"sm_{major}{minor}"


def worker(args: argparse.Namespace) -> int:
    """One engine on one layout's requests: set up, a warm-up pass, a timed pass when the deadline allows; the
    result (answers, seconds, how the two passes compare) goes to --result."""
    result: dict = {"engine": args.worker}
    try:
        requests = json.loads(args.requests.read_text())
        facts, answer = (flidec_engine if args.worker == "flidec" else flide_engine)(args)
        result |= {"status": "ok", "device_name": _device_name(args.device)} | facts
        t0 = time.perf_counter()
        warm = answer(requests)
        result["warm_s"] = round(time.perf_counter() - t0, 4)
        answers, result["timed_s"] = warm, None
        if time.time() + 1.5 * result["warm_s"] < args.deadline:
            t0 = time.perf_counter()
            answers = answer(requests)
            result["timed_s"] = round(time.perf_counter() - t0, 4)
            repeat = compare(warm, answers, ("warm-up", "timed"))
            result["repeat"] = {k: repeat[k] for k in ("max_dp", "argmax_flips", "refusals_differ")} | {
                "identical": json.dumps(warm, sort_keys=True) == json.dumps(answers, sort_keys=True)}
        else:
            result["note"] = "no time left for a timed pass: the answers are the warm-up pass's"
        result["answered"] = sum("error" not in a for a in answers)
        result["refused"] = len(answers) - result["answered"]
        result["answers"] = answers
    except Unavailable as e:
        result |= {"status": "unavailable", "error": str(e)}
    except Exception as e:  # noqa: BLE001 -- the engine's failure is the row
        result |= {"status": "error", "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()[-3000:]}
    args.result.write_text(json.dumps(result, ensure_ascii=False))
    return 0


def _device_name(device: str) -> str:
    if not device.startswith("cuda"):
        return f"cpu ({platform.processor() or platform.machine()})"
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def run_worker(engine: str, checkpoint: Path, requests: Path, args: argparse.Namespace,
               deadline: float) -> dict:
    """The worker process for one engine and layout, its output passed through (and its tail kept), bounded by
    the deadline; a crash, a kill or a missing result is the row."""
    result_path = requests.with_name(f"{requests.stem}.{engine}.json")
    result_path.unlink(missing_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", engine,
            "--checkpoint", str(checkpoint), "--requests-file", str(requests), "--result", str(result_path),
            "--device", args.device, "--work-dir", str(args.work_dir),
            "--kernel-cache", str(args.kernel_cache), "--deadline", str(deadline)]
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)  # its own group: a kill reaches all

    def forward() -> None:
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            print(f"  [{engine}] {line}", end="", file=sys.stderr, flush=True)

    reader = threading.Thread(target=forward, daemon=True)
    reader.start()
    t0 = time.perf_counter()
    stopped = None
    try:
        proc.wait(timeout=max(deadline - time.time(), 1.0))
    except subprocess.TimeoutExpired:
        stopped = "the time budget ran out"
    finally:  # also on Stopped, which run() records
        if proc.poll() is None:
            _kill(proc)
        reader.join(timeout=5)
        wall = round(time.perf_counter() - t0, 2)
    if result_path.is_file():
        return json.loads(result_path.read_text()) | {"worker_s": wall}
    status = "stopped" if stopped else "crashed"
    return {"engine": engine, "status": status, "error": stopped or f"the worker exited {proc.returncode} "
            "without a result", "returncode": proc.returncode, "worker_s": wall, "log_tail": "\n".join(tail)}


def _kill(proc: subprocess.Popen) -> None:
    """SIGTERM to the worker's group, then SIGKILL after a grace (a CUDA context can take seconds to go)."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


# --- checkpoints --------------------------------------------------------------------------------------------


def ensure_checkpoint(size: str, layout: str, donor: Path | None) -> tuple[Path, str]:
    """/tmp/decision-SIZE-LAYOUT, made when its weights are missing: from a donor of the same size (an other
    layout's directory) the weights are linked, since every layout's are seed 0's, else written. The layout's
    files are (re)written either way: they are cheap and the code that writes them may be newer than the
    directory."""
    from flidec.testing.decision_checkpoints import write_decision_layout
    from flidec.testing.make_checkpoint import make_checkpoint

    path = Path(f"/tmp/decision-{size.lower()}-{layout}")
    if _weights(path):
        write_decision_layout(path, layout, seed=0)
        return path, "found"
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    make_checkpoint(partial, size, seed=0, decision=layout, weights=donor is None)
    for f in _weights(donor) if donor is not None else ():
        try:
            os.link(f, partial / f.name)
        except OSError:  # another file system
            shutil.copyfile(f, partial / f.name)
    shutil.rmtree(path, ignore_errors=True)
    partial.rename(path)
    return path, "made" if donor is None else f"made, weights linked from {donor}"


def _weights(path: Path) -> list[Path]:
    if not (path.is_dir() and (path / "config.json").is_file()):
        return []
    return [f for pattern in WEIGHT_FILES for f in sorted(path.glob(pattern))]


# --- the run ------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    start = time.time()
    deadline = start + args.time_budget_s
    layouts = [x for x in args.layouts.split(",") if x]
    engines = [x for x in args.engines.split(",") if x]
    for name, chosen, known in (("--layouts", layouts, LAYOUTS), ("--engines", engines, ENGINES)):
        if not chosen or set(chosen) - set(known):
            raise SystemExit(f"{name}: a comma list of {', '.join(known)}")
    if args.requests <= len(PROBES):
        raise SystemExit(f"--requests: more than the {len(PROBES)} probes")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    args.kernel_cache = args.kernel_cache or args.work_dir / "kernels"
    now = datetime.now(UTC)
    result: dict = {
        "schema": 1, "date": now.strftime("%Y-%m-%d"), "time_utc": now.strftime("%H:%M:%S"),
        "commit": args.commit or _git_commit(), "command": " ".join(["python3", *sys.argv]),
        "device": args.device, "gpu": None, "size": args.size, "seed": args.seed,
        "max_state_tokens": args.max_state_tokens,
        "spec": str(SPEC.relative_to(ROOT)), "time_budget_s": args.time_budget_s,
        "environment": _environment(), "engines": engines, "layouts": {},
    }
    signal.signal(signal.SIGTERM, _stop_signal)
    signal.signal(signal.SIGINT, _stop_signal)
    donor = drawn = None
    try:
        for layout in layouts:
            entry = result["layouts"][layout] = {}
            if deadline - time.time() < MIN_WORKER_S:
                entry["skipped"] = "time budget"
                continue
            try:
                t0 = time.perf_counter()
                checkpoint, how = ensure_checkpoint(args.size, layout, donor)
                donor = donor or checkpoint
                entry |= {"checkpoint": str(checkpoint), "checkpoint_made": how,
                          "checkpoint_s": round(time.perf_counter() - t0, 2)}
                config = json.loads((checkpoint / "decision_config.json").read_text())
                if drawn is None:  # once: every layout's checkpoint has the same tokenizer
                    drawn = draw_requests(_counter(checkpoint), args.requests - len(PROBES), args.seed,
                                          args.max_state_tokens)
                requests = request_set(drawn, config)
            except Exception as e:  # noqa: BLE001 -- this layout's row says why; the next one may run
                entry["error"] = f"{type(e).__name__}: {e}"
                log(f"{layout}: {entry['error']}")
                continue
            path = args.work_dir / f"requests-{layout}.json"
            path.write_text(json.dumps(requests, ensure_ascii=False))
            entry["requests"] = len(requests)
            entry["questions"] = dict(collections.Counter(
                q["type"] for r in requests for q in r["questions"].values()))
            answers = {}
            for engine in ENGINES:
                if engine not in engines:
                    entry.setdefault("engines", {})[engine] = {"status": "not requested"}
                    continue
                if deadline - time.time() < MIN_WORKER_S:
                    entry.setdefault("engines", {})[engine] = {"status": "skipped", "error": "time budget"}
                    continue
                log(f"{layout}: {engine} ({deadline - time.time():.0f} s left)")
                # what the JSON says of this engine if a signal ends the run while its worker runs
                entry.setdefault("engines", {})[engine] = {"status": "stopped", "error": "the run stopped "
                                                           "while this engine ran"}
                row = run_worker(engine, checkpoint, path, args, deadline - 2)
                answers[engine] = row.pop("answers", None)
                result["gpu"] = result["gpu"] or row.get("device_name")
                entry.setdefault("engines", {})[engine] = row
                log(f"{layout}: {engine} {row['status']}" + (f": {row['error']}" if "error" in row else ""))
                _write(args.out, result)
            if all(answers.get(e) is not None for e in ENGINES):
                entry["comparison"] = compare(answers["flidec"], answers["flide"])
            _write(args.out, result)
    except Stopped as e:
        result["stopped"] = str(e)
        log(str(e))
    result["elapsed_s"] = round(time.time() - start, 1)
    _write(args.out, result)
    print(section(result))
    return 0


def _counter(checkpoint: Path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


def _write(out: Path | None, result: dict) -> None:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _environment() -> dict:
    from importlib import metadata

    env = {"python": platform.python_version()}
    for name in ("torch", "triton", "transformers", "flide", "flash-linear-attention"):
        try:
            env[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            env[name] = None
    return env


# --- the command line ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python benchmarks/decision_oracle.py",
                                description=__doc__.split("\n")[0])
    p.add_argument("--layouts", default=",".join(LAYOUTS), help=f"comma list of {', '.join(LAYOUTS)}")
    p.add_argument("--engines", default=",".join(ENGINES), help=f"comma list of {', '.join(ENGINES)}")
    p.add_argument("--size", default="0.8B", help="make_checkpoint --size (tiny for a CPU dry run)")
    p.add_argument("--device", default=None, help="cuda when CUDA is there, else cpu")
    p.add_argument("--requests", type=int, default=48, help="requests per layout, the probes included")
    p.add_argument("--seed", type=int, default=0, help="the request set's seed")
    p.add_argument("--max-state-tokens", type=int, default=1500,
                   help="the longest state drawn (from 50; smaller for a quick CPU run)")
    p.add_argument("--time-budget-s", type=float, default=400.0, help="the whole run, checkpoints included")
    p.add_argument("--out", type=Path, help="the JSON result, written after every step")
    p.add_argument("--commit", help="commit measured (default: git, else 'unknown')")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/decision-oracle"),
                   help="requests, artifacts and the workers' results")
    p.add_argument("--kernel-cache", type=Path, help="flidec's compiled kernels, shared by the layouts "
                   "(default: WORK_DIR/kernels)")
    p.add_argument("--report", type=Path, metavar="RESULT.json",
                   help="print the Markdown section of a result, run nothing")
    # a worker: one engine on one layout's requests (run() starts these)
    p.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    p.add_argument("--requests-file", dest="requests_file", type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report is not None:
        print(section(json.loads(args.report.read_text())), end="")
        return 0
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.worker is not None:
        args.requests = args.requests_file
        return worker(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
