"""The agent workload: trajectories whose history grows every step, asked step after step as an agent asks.

    python benchmarks/agent.py --model DIR [--trajectories 16] [--steps 24] [--start-tokens 1000]
                               [--step-tokens 300] [--variants planner,systemone] [--engines ...] [--out FILE]

Each of `--trajectories` histories starts at about `--start-tokens` tokens of prose (benchmarks/prose.py)
and grows by about `--step-tokens` a step; at every step, trajectory after trajectory, one request asks
examples/planner.flide's tree (`planner`: the next tool, and three candidate actions with their outcomes)
or four System One questions (`systemone`: examples/systemone.flide), and waits for its answer before the
next. Engines (on one GPU, side by side):
- `flidec-saved`: the compiled artifact with saved states (runtime/saved: every step resumes from the
  point the step before saved, in GPU memory; a System One body names its trajectory's `x_session`, its
  state not being `resumable`);
- `flidec`: the same artifact with saved states off (every step computes its whole history);
- `flide-session`, `flide`: flide 0.1.4 (its public Engine, as benchmarks/engines/flide.py runs it, on the
  same token ids, one fork level: the state and one suffix per question) with its session cache
  (`session_cache_gb`, `session_min_tokens` lowered to 512 so it saves from the first step) and without. flide
  compiles for every new input shape: each flide engine first runs the whole workload on other histories
  of the same lengths, untimed.
Per engine and variant: the mean time per step (over trajectories), steps 0-9 and from step 10 on, the
total, and for flidec-saved (no checkpoint directory: GPU and host memory) the positions reused. Every
flidec-saved answer is compared with flidec's (torch.equal of the label logits): `bitwise` counts those
equal. Then a restart: a Program with a checkpoint directory answers each trajectory's last step, and a new
Program over the directory resumes each trajectory's next step from disk, timed against the first Program
resuming the same step from GPU memory. flidec's saved states get GPU_BUDGET_GIB of GPU memory, the size of
flide's session cache here. Last, on the Program of the timed steps: one more step per trajectory timed in
phases (`phases`: before the engine's submit, the submit, waiting for its result, after it), and one more
under cProfile (untimed): where the host time of a resumed step goes (`host_profile`, the top functions by
own time). Writes the report as JSON (`--out`) and prints it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.source import ensure_flidec

ensure_flidec(ROOT)

import torch

EXAMPLES = ROOT / "examples"
GPU_BUDGET_GIB = 8.0  # flidec's saved states in GPU memory: the size of flide's session cache below
SPECS = {"planner": EXAMPLES / "planner.flide", "systemone": EXAMPLES / "systemone.flide"}


def histories(count_tokens, trajectories: int, steps: int, start: int, step: int, seed: int
              ) -> list[list[str]]:
    """Per trajectory, its history at every step (each extends the one before)."""
    from benchmarks.prose import paragraphs

    paras = paragraphs()
    out = []
    for t in range(trajectories):
        at = (seed * 7919 + t * 131) % len(paras)
        texts, text = [], ""

        def grow(target: int, text: str) -> str:
            nonlocal at
            while count_tokens(text) < target:
                text = (text + "\n\n" if text else "") + paras[at % len(paras)]
                at += 1
            return text

        text = grow(start, text)
        texts.append(text)
        for k in range(1, steps + 3):  # three more than timed: the restart's, the phases', the profile's
            text = grow(start + k * step, text)
            texts.append(text)
        out.append(texts)
    return out


def instance(variant: str, history: str, k: int) -> dict:
    if variant == "planner":
        return {"history": history,
                "next_tool": {"instructions": "Which tool should the agent call next?",
                              "criteria": {"shell": "run a command", "editor": "change a file",
                                           "search": "look something up", "done": "stop here"}},
                "action": [{"text": f"run the test suite again (step {k})",
                            "outcome": [{"text": "every test passes"}, {"text": "one test still fails"}]},
                           {"text": "revert the last change", "outcome": [{"text": "the build is green"}]},
                           {"text": "ask the user for the missing file",
                            "outcome": [{"text": "the user answers"}, {"text": "no answer comes"}]}]}
    return {"state": history, "questions": {
        "finished": {"type": "noul", "instructions": "Is the task finished?"},
        "next": {"type": "choice", "instructions": "What should happen next?",
                 "criteria": {"test": None, "edit": None, "search": None, "stop": None}},
        "progress": {"type": "score", "instructions": "How far along is the task?",
                     "criteria": ["not started", "early", "halfway", "nearly done", "done"]},
        "stuck": {"type": "noul", "instructions": "Is the agent stuck?"}}}


def with_session(variant: str, inst: dict, trajectory: int) -> dict:
    """What flidec-saved sends: a System One body names its trajectory's session (`x_session`), its state
    not being `resumable`; the planner's state is, so its instance goes as it is."""
    return {**inst, "x_session": f"trajectory-{trajectory}"} if variant == "systemone" else inst


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


def summary(per_step: list[list[float]]) -> dict:
    means = [statistics.mean(s) for s in per_step]
    return {"step_ms": [round(m, 3) for m in means], "steps_0_9_ms": round(statistics.mean(means[:10]), 3),
            "steps_10_on_ms": round(statistics.mean(means[10:]), 3) if len(means) > 10 else None,
            "total_s": round(sum(sum(s) for s in per_step) / 1e3, 3)}


def run_flidec(artifact: Path, variant: str, hist: list[list[str]], steps: int, checkpoints: Path) -> dict:
    from flidec.runtime.program import load

    fresh = load(artifact, "cuda", saved_states=False)
    saved = load(artifact, "cuda", gpu_budget_gib=GPU_BUDGET_GIB)  # no checkpoint directory: no writes
    for p in (fresh, saved):  # first use of the buckets these steps land in: graphs captured, untimed
        p.label_logits([instance(variant, h[0] + " warm", 0) for h in hist[:1]])
    times = {"flidec": [[] for _ in range(steps)], "flidec-saved": [[] for _ in range(steps)]}
    reused, equal, total = [[] for _ in range(steps)], 0, 0
    for k in range(steps):
        for t, h in enumerate(hist):
            inst = instance(variant, h[k], k)
            want, ms = timed(lambda inst=inst: fresh.label_logits([inst]))
            times["flidec"][k].append(ms)
            inst = with_session(variant, inst, t)
            got, ms = timed(lambda inst=inst: saved.answer([inst]))
            times["flidec-saved"][k].append(ms)
            reused[k].append(got[0].reused)
            equal += int(torch.equal(got[0].logits, want[0]))
            total += 1
    out = {name: summary(t) for name, t in times.items()}
    out["flidec-saved"]["reused_mean"] = [round(statistics.mean(r), 1) for r in reused]
    out["flidec-saved"]["bitwise"] = f"{equal}/{total}"
    stats = saved.stats.saved
    out["flidec-saved"]["saved_stats"] = {"hits": stats.hits, "tokens_reused": stats.tokens_reused,
                                          "saved": stats.saved, "bytes": stats.bytes,
                                          "points": stats.points, "evicted": stats.evicted,
                                          "from_tier": stats.from_tier}
    # a restart: a Program with a checkpoint directory answers every trajectory's last step (saving its
    # point); a new Program over the directory resumes the next step from disk, timed against the first
    # Program resuming the same step from GPU memory
    writer = load(artifact, "cuda", checkpoints=checkpoints, gpu_budget_gib=GPU_BUDGET_GIB)
    for t, h in enumerate(hist):
        writer.label_logits([with_session(variant, instance(variant, h[steps - 1], steps - 1), t)])
    writer.saved.flush()
    restarted = load(artifact, "cuda", checkpoints=checkpoints, gpu_budget_gib=GPU_BUDGET_GIB)
    restarted.label_logits([instance(variant, hist[0][0] + " warm", 0)])  # its first replay, untimed
    disk, gpu, same = [], [], 0
    for t, h in enumerate(hist):
        inst = with_session(variant, instance(variant, h[steps], steps), t)
        a, ms = timed(lambda inst=inst: restarted.label_logits([inst]))
        disk.append(ms)
        b, ms = timed(lambda inst=inst: writer.label_logits([inst]))
        gpu.append(ms)
        same += int(torch.equal(a[0], b[0]))
    out["restart"] = {"disk_resume_ms": round(statistics.mean(disk), 3),
                      "gpu_resume_ms": round(statistics.mean(gpu), 3),
                      "from_tier": restarted.stats.saved.from_tier, "bitwise": f"{same}/{len(hist)}"}
    out["phases"] = phases(saved, [with_session(variant, instance(variant, h[steps + 1], steps + 1), t)
                                   for t, h in enumerate(hist)])
    last = [with_session(variant, instance(variant, h[steps + 2], steps + 2), t) for t, h in enumerate(hist)]
    out["host_profile"] = host_profile(lambda: [saved.label_logits([inst]) for inst in last])
    return out


def phases(program, instances: list[dict]) -> dict:
    """Mean ms of one `label_logits` call an instance, split at the engine: `before` its submit (validation,
    tokenizing, planning, the saved-state lookup, binding), the `submit` (staging saved points, the meta
    fill, the replay enqueued), the `wait` for its result, and `after` (gathering, saving the new point)."""
    engine, submit = program.engine, program.engine.submit
    marks: dict[str, float] = {}

    class Timed:  # the engine's pending result, its wait timed
        def __init__(self, pending):
            self.pending = pending

        def __getattr__(self, name):
            return getattr(self.pending, name)

        def result(self):
            marks["waited"] = time.perf_counter()
            out = self.pending.result()
            marks["answered"] = time.perf_counter()
            return out

    def timed_submit(*args, **kwargs):
        marks["submit"] = time.perf_counter()
        pending = submit(*args, **kwargs)
        marks["submitted"] = time.perf_counter()
        return Timed(pending)

    parts: dict[str, list[float]] = {"before": [], "submit": [], "wait": [], "after": [], "total": []}
    engine.submit = timed_submit
    try:
        for inst in instances:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            program.label_logits([inst])
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            m = marks
            spans = {"before": (t0, m["submit"]), "submit": (m["submit"], m["submitted"]),
                     "wait": (m["waited"], m["answered"]), "after": (m["answered"], t1), "total": (t0, t1)}
            for name, (a, b) in spans.items():
                parts[name].append((b - a) * 1e3)
    finally:
        engine.submit = submit
    return {name: round(statistics.mean(v), 3) for name, v in parts.items()}


def host_profile(fn, top: int = 25) -> list[dict]:
    """The functions `fn` spends most host time in, by own time: [{function, calls, own_ms, total_ms}]."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.runcall(fn)
    torch.cuda.synchronize()
    rows = []
    for (file, line, name), (_, calls, own, total, _) in pstats.Stats(prof).stats.items():
        where = f"{Path(file).name}:{line}:{name}" if line else name
        rows.append({"function": where, "calls": calls, "own_ms": round(own * 1e3, 2),
                     "total_ms": round(total * 1e3, 2)})
    return sorted(rows, key=lambda r: -r["own_ms"])[:top]


def run_flide(model: Path, spec: Path, variant: str, hist: list[list[str]], warm: list[list[str]],
              steps: int, sessions: bool, progress=lambda row: None) -> dict:
    """flide's row; `progress` gets the row so far after every step (the warm-up's seconds, then the timed
    steps), so a device call that runs out of time keeps what was measured."""
    from benchmarks.engines.flide import Flide
    from benchmarks.work import prepare_work
    from benchmarks.workloads import Workload
    from flidec.frontend import load_spec
    from flidec.models.tokenizer import load_tokenizer
    from flidec.runtime.next_token import NextTokenFormat

    parsed, _ = load_spec(spec)
    tree = parsed.trees[0]
    fmt = NextTokenFormat(load_tokenizer(model))
    adapter = Flide()
    adapter.load(model, "cuda")
    if sessions:
        from flide.runtime.engine import Engine

        adapter.engine = Engine(str(model), format="next_token", device="cuda", dtype="bfloat16",
                                backbone_options={"cuda_graphs": True}, session_cache_gb=8.0,
                                session_min_tokens=512)

    def ask(texts: list[list[str]], k: int) -> list[float]:
        out = []
        for h in texts:
            work = prepare_work(Workload("agent", spec, tree.name, (instance(variant, h[k], k),)), tree, fmt)
            prepared = adapter.prepare(work)
            _, ms = timed(lambda prepared=prepared: adapter.run(prepared, [0], offline=True))
            out.append(ms)
        return out

    t0 = time.perf_counter()
    for k in range(steps):  # other histories of the same lengths: flide's compiles, untimed
        ask(warm, k)
        progress({"warm_steps": k + 1, "warm_s": round(time.perf_counter() - t0, 1)})
    warm_s = round(time.perf_counter() - t0, 1)
    per_step: list[list[float]] = []
    for k in range(steps):
        per_step.append(ask(hist, k))
        progress({**summary(per_step), "warm_s": warm_s, "steps_done": k + 1})
    adapter.close()
    return {**summary(per_step), "warm_s": warm_s}


def write(out: Path | None, report: dict, variant: str, row: dict) -> None:
    """The report so far (a device call that runs out of time keeps what was measured)."""
    report["variants"][variant] = row
    if out is not None:
        out.write_text(json.dumps(report, indent=1) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--trajectories", type=int, default=16)
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--start-tokens", type=int, default=1000)
    p.add_argument("--step-tokens", type=int, default=300)
    p.add_argument("--variants", default="planner,systemone")
    p.add_argument("--engines", default="flidec,flide,flide-session")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    from flidec.compile import compile_artifact
    from flidec.models.tokenizer import load_tokenizer
    from flidec.testing.make_checkpoint import make_checkpoint

    if not (args.model / "config.json").exists():
        make_checkpoint(args.model, "0.8B", seed=0, dtype="bf16")
    tok = load_tokenizer(args.model)
    count = lambda text: len(tok.encode(text))  # noqa: E731
    hist = histories(count, args.trajectories, args.steps, args.start_tokens, args.step_tokens, seed=0)
    warm = histories(count, min(2, args.trajectories), args.steps, args.start_tokens, args.step_tokens,
                     seed=1)
    engines = args.engines.split(",")
    work = Path(tempfile.mkdtemp(prefix="agent-"))
    report: dict = {"gpu": torch.cuda.get_device_name(), "trajectories": args.trajectories,
                    "steps": args.steps, "start_tokens": args.start_tokens, "step_tokens": args.step_tokens,
                    "history_tokens": [count(hist[0][0]), count(hist[0][args.steps - 1])], "variants": {}}
    for variant in args.variants.split(","):
        row: dict = {}
        if "flidec" in engines:
            artifact = work / f"{variant}-artifact"
            t0 = time.perf_counter()
            compile_artifact(SPECS[variant], args.model, "sm_90", artifact, kernel_cache=work / "kernels")
            row["compile_s"] = round(time.perf_counter() - t0, 1)
            row.update(run_flidec(artifact, variant, hist, args.steps, work / f"{variant}-checkpoints"))
            write(args.out, report, variant, row)
        for name in ("flide", "flide-session"):
            if name in engines:
                try:
                    def progress(part: dict, name=name, row=row, variant=variant) -> None:
                        row[name] = part
                        write(args.out, report, variant, row)

                    row[name] = run_flide(args.model, SPECS[variant], variant, hist, warm, args.steps,
                                          name == "flide-session", progress)
                except Exception as e:  # noqa: BLE001 -- a peer that fails is a row with its error
                    row[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
                write(args.out, report, variant, row)
        report["variants"][variant] = row
        print(json.dumps({variant: row}), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
