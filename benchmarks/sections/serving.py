"""BENCHMARKS.md's serving sections: the agent workload's saved states (benchmarks/agent.py), the server
under load (benchmarks/serve_bench.py) and replicas' expected scaling (benchmarks/router_cost.py with the
server's numbers); each is empty without its file."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path


def agent_section(specs: list[str], root: Path) -> str:
    """The agent workload's section (benchmarks/agent.py files, the latest first, each `PATH` or
    `PATH:ENGINE,ENGINE` to show only those engines' rows): per engine the mean time a step, steps 0-9 and
    from step 10 on, and the total; flidec-saved's bitwise count and the restart."""
    if not specs:
        return ""
    runs, shown = [], {}
    for spec in specs:
        path, _, names = spec.partition(":")
        runs.append((Path(path), json.loads((root / path).read_text())))
        shown[Path(path)] = set(names.split(",")) if names else None
    first = runs[0][1]
    lines = ["", "## The agent workload: saved states (benchmarks/agent.py)",
             f"{first['trajectories']} trajectories x {first['steps']} steps on {first['gpu']}, histories "
             f"{first['history_tokens'][0]:,} to {first['history_tokens'][1]:,} tokens "
             f"(+{first['step_tokens']} a step), asked step after step; each engine's mean time a step over "
             "the trajectories. One row a file, from one device call each:", "",
             "| file | variant | engine | steps 0-9, ms | from step 10, ms | total, s | resumed == fresh |",
             "|---|---|---|---|---|---|---|"]
    restarts = []
    for path, run in runs:
        for variant, row in run["variants"].items():
            only = shown[path]
            for name in ("flidec", "flidec-saved", "flide", "flide-session"):
                e = row.get(name)
                if e is None or (only is not None and name not in only):
                    continue
                if "error" in e:
                    lines.append(f"| {path.name} | {variant} | {name} | error: {e['error'][:80]} | | | |")
                    continue
                if "step_ms" not in e:  # the call ended in the untimed warm-up
                    lines.append(f"| {path.name} | {variant} | {name} | not timed: the call ended in its "
                                 f"warm-up ({e['warm_steps']} of {run['steps']} steps in {e['warm_s']:.0f} s)"
                                 " | | | |")
                    continue
                done = e.get("steps_done", run["steps"])
                late = "-" if e["steps_10_on_ms"] is None else f"{e['steps_10_on_ms']:.1f}"
                total = f"{e['total_s']:.1f}" + (f" ({done} of {run['steps']} steps)" if done < run["steps"]
                                                 else "")
                lines.append(f"| {path.name} | {variant} | {name} | {e['steps_0_9_ms']:.1f} | "
                             f"{late} | {total} | {e.get('bitwise', '')} |")
            if only is not None and "flidec-saved" not in only:
                continue
            if "restart" in row:
                r = row["restart"]
                if not r.get("from_tier", True):
                    restarts.append(f"- {path.name}, {variant}: nothing was saved, so nothing resumed (the "
                                    f"restart's steps {r['disk_resume_ms']:.1f} and "
                                    f"{r['gpu_resume_ms']:.1f} ms)")
                else:
                    restarts.append(f"- {path.name}, {variant}: the next step resumed from disk in a new "
                                    f"Program {r['disk_resume_ms']:.1f} ms, from GPU memory "
                                    f"{r['gpu_resume_ms']:.1f} ms; resumed from disk == from GPU memory "
                                    f"{r['bitwise']}")
            if "phases" in row:
                ph = row["phases"]
                restarts.append(f"- {path.name}, {variant}: one more step ({ph['total']:.1f} ms) in "
                                f"phases: before the engine's submit {ph['before']:.1f} ms, the submit "
                                f"{ph['submit']:.1f}, waiting for the device {ph['wait']:.1f}, after it "
                                f"{ph['after']:.1f}")
    return "\n".join(lines + ["", *restarts]) + "\n"


def _errors(summary: dict) -> str:
    """Answers other than 200: their count, and by status when there are any."""
    others = ", ".join(f"{k}: {v}" for k, v in summary["statuses"].items() if k != "200")
    return f"{summary['errors']} ({others})" if others else str(summary["errors"])


def serve_section(path: Path | None, root: Path) -> str:
    """The server under load (benchmarks/serve_bench.py's file): per server throughput, p50/p99, errors,
    answers that differ from the same row sent alone (E1), the burst's refusals with Retry-After and its
    longest wait; a server that failed is an error row. Empty without a file."""
    if path is None:
        return ""
    run = json.loads((root / path).read_text())
    rows, load = run["rows"], run["load"]
    burst = f"then {load['burst']} requests released at one instant" if load["burst"] else "no burst"
    deadline = f", --deadline {load['deadline_s']:g}" if "deadline_s" in load else ""
    prose = (f"{path.name}: on {run['gpu']}, commit {run['commit']}. {load['clients']} clients send "
             f"{load['requests']:,} System One requests, the rows in turn, over {rows['count']} distinct "
             f"rows ({rows['quality_like']} QuALITY-like, {rows['race_like']} RACE-like; "
             f"{rows['questions']:,} questions; states of {rows['state_tokens'][0]:,} to "
             f"{rows['state_tokens'][2]:,} tokens) to "
             "one server after the other, once every row was sent alone (an answer under load that is not "
             f"that one, value for value, differs: E1), {burst} (flidec serve --max-queue {load['max_queue']}"
             f"{deadline}: past its queue a request is refused with 429 and Retry-After). Errors are "
             "answers other than 200 in the load, refusals those of the burst; the longest wait is the "
             "burst's.")
    if any("shared" in e.get("loads", {}) for e in run["servers"].values()):
        prose += (" The shared load sends each question of a row as its own request about the row's state, a "
                  "row's requests one after the other, so the clients have the requests about one state in "
                  "flight together (what an agent asking one question a request sends); its questions/s "
                  "compare with the rows load's.")
    lines = ["", "## The server under load (benchmarks/serve_bench.py)", textwrap.fill(prose, 110), "",
             "| server | load | requests/s | questions/s | p50 ms | p99 ms | errors | differ from alone | "
             "burst refused | with Retry-After | longest wait, ms |", "|---" * 11 + "|"]
    notes = []
    for name, e in run["servers"].items():
        loads = e.get("loads") or ({"rows": e["summary"]} if "summary" in e else {})
        if not loads:
            error = e.get("error", "did not finish").strip().splitlines()[-1]
            lines.append(f"| {name} | - | error: {error[:120]} |" + " |" * 8)
        for load_name, s in loads.items():
            b = s.get("burst")
            cells = [load_name, f"{s['requests_per_s']:,.1f}", f"{s['questions_per_s']:,.1f}",
                     f"{s['p50_ms']:,.1f}", f"{s['p99_ms']:,.1f}", _errors(s), str(s["differ_from_alone"])]
            cells += [str(b["refused"]), str(b["refused_with_retry_after"]), f"{b['max_wait_ms']:,.0f}"] \
                if b else ["-", "-", "-"]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        ready = f", ready in {e['ready_s']:.1f} s" if "ready_s" in e else ""
        cut = ""
        for load_name, s in loads.items():
            if s.get("sent", 0) < s.get("requests", 0) or s.get("alone_sent", 0) < s.get("rows", 0):
                cut += f"; {load_name} out of time: {s['sent']:,} of {s['requests']:,} requests sent, " \
                    f"{s['alone_sent']} of {s['rows']} rows alone"
        if loads and "error" in e:
            cut += f"; then: {e['error'].strip().splitlines()[-1][:200]}"
        notes.append(f"- {name}: `{e['command']}`{ready}{cut}")
    return "\n".join(lines + ["", *notes]) + "\n"


REPLICA_COUNTS = (1, 2, 4, 8)


def router_section(path: Path | None, serve: Path | None, root: Path) -> str:
    """Replicas' expected scaling (benchmarks/router_cost.py's file): what the ingress adds to a request
    (route, rule, dispatch), and N replicas' throughput computed as N times the single server's (the serve
    file's flidec row), capped by what one ingress can dispatch. Empty without a file."""
    if path is None:
        return ""
    cost = json.loads((root / path).read_text())
    d, route, tokenize, rule = cost["dispatch"], cost["route"], cost["tokenize"], cost["rule"]
    lengths = sorted(route, key=int)
    most = max(rule, key=int)
    ingress_ms = d["ms_each"] + route[lengths[-1]] + rule[most]
    prose = (f"{path.name}: on {cost['cpu']}, commit {cost['commit']}. What `flidec serve --replicas N`'s "
             "ingress adds to a request beside the single server's own work: its route, keyless (the state "
             "text's block keys, runtime/replicas/routing.py), "
             + ", ".join(f"{route[t]:.3f} ms at {int(t):,} tokens" for t in lengths)
             + " (tokenizing the state instead would cost "
             + ", ".join(f"{tokenize[t]:.1f}" for t in lengths)
             + f" ms; a request naming a session skips both); the rule over {most} replicas, "
             f"{rule[most] * 1e3:.0f} us; Ray Serve's dispatch through SavedStateRouter, "
             f"{d['ms_each']:.2f} ms "
             f"a request at {d['concurrency']} in flight ({d['requests_per_s']:,.0f} requests/s through one "
             "ingress, to 2 replicas that answer at once on the same cores: a lower bound).")
    lines = ["", "## Replicas: the expected scaling (benchmarks/router_cost.py)", textwrap.fill(prose, 110)]
    single = None
    if serve is not None:
        flidec = json.loads((root / serve).read_text())["servers"].get("flidec", {}).get("summary")
        single = flidec and (flidec["requests_per_s"], flidec["questions_per_s"])
    if not single:
        return "\n".join(lines) + "\n"
    rps, qps = single
    cap = 1e3 / ingress_ms
    lines += ["", textwrap.fill(
        f"Computed, not measured on several GPUs (issue 30): N replicas answer N times the single "
        f"server's {rps:,.1f} requests/s (the server under load, above), up to one ingress's "
        f"{cap:,.0f} requests/s ({ingress_ms:.2f} ms a request: the dispatch, the longest route and "
        "the rule). The ingress's HTTP and JSON work, which the single server does too, is not in that "
        "cost.", 110), "", "| replicas | expected requests/s | expected questions/s | bound by |",
              "|---|---|---|---|"]
    for n in REPLICA_COUNTS:
        r = min(n * rps, cap)
        bound = "the GPUs" if n * rps <= cap else "the ingress"
        lines.append(f"| {n} | {r:,.1f} | {r * qps / rps:,.1f} | {bound} |")
    return "\n".join(lines) + "\n"
