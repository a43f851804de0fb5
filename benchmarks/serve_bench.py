"""The server under load (issue 26): flidec serve and flide serve 0.1.4 side by side on the same rows.

    python benchmarks/serve_bench.py --out serve.json [--model /tmp/qwen35-0.8b] [--make-size 0.8B]
        [--device cuda] [--rows 256] [--scale 1.0] [--clients 64] [--requests 2048] [--burst 256]
        [--max-queue 64] [--deadline 60] [--threads N] [--servers flidec,flide] [--flide-python PY]
        [--time-budget-s 300] [--commit HASH] [--work-dir DIR]

Makes the checkpoint when it is missing (make_checkpoint, seed 0, bf16, as benchmarks/run.py does), writes
`--rows` distinct System One request bodies as JSONL (benchmarks/workloads.py's QuALITY-like rows, every
fourth, and RACE-like rows, the rest; `--scale` shrinks their states), compiles examples/systemone.flide
for the device, then for each server: starts it in a process of its own through its CLI (`flidec serve
ARTIFACT --port P --device D --max-queue Q --deadline S`; `flide serve --model DIR --format next_token
--device D --port P`, flide a black box), waits for GET /health or GET /v1/models to answer 200
(bounded), runs benchmarks/serve_load.py against it once per `--loads` entry (`rows`: the rows as they are;
`shared`: each question of a row sent as its own request, a row's requests consecutive, so the clients have
the requests about one state in flight together), and stops it with SIGTERM (graceful). Each server
gets an equal share of the budget left when its turn comes, split evenly between the loads. Writes `--out`
after every step: {gpu, commit, rows, load, servers: {name: {command, ready_s, summary (the rows load's
serve_load JSON), loads: {load: serve_load JSON}, stop} or {command, error, stop}}}; each server's log
lies beside it (serve.NAME.log); the rows, the artifact and the load files go to `--work-dir`. Runs from a
source checkout as it is (benchmarks/source.py).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.source import ensure_flidec

ensure_flidec(ROOT)

SPEC = ROOT / "examples" / "systemone.flide"
QUALITY_EVERY = 4  # every fourth row QuALITY-like (~5,000 tokens, 9 choices), the rest RACE-like (~450, 4)
STOP_GRACE_S = 30.0  # after SIGTERM, before SIGKILL
# The CLIs as their console scripts run them, so that neither needs its script on PATH (the GPU box
# installs into a --target folder); flidec's maps its source tree first when it is not installed.
FLIDEC_CLI = ("import sys; from pathlib import Path; sys.path.insert(0, {root!r}); "
              "from benchmarks.source import ensure_flidec; ensure_flidec(Path({root!r})); "
              "from flidec.cli import main; sys.exit(main(sys.argv[1:]))")
FLIDE_CLI = "import sys; from flide.cli import main; sys.exit(main())"


class Stopped(BaseException):  # not an Exception: a server's `except Exception` must let it through
    """SIGTERM or SIGINT reached this script (device.sh's SERVE_S cap): stop the server, keep the file."""


def _stop_signal(signum: int, frame: object) -> None:
    raise Stopped(f"stopped by signal {signum} (the time cap)")


def log(msg: str) -> None:
    print(f"[serve {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def request_rows(count_tokens, n: int, scale: float) -> list[dict]:
    """`n` distinct System One request bodies: every QUALITY_EVERY-th QuALITY-like, the rest RACE-like,
    drawn from the workloads' own row makers (seed after seed until enough distinct ones)."""
    from benchmarks.workloads import build_workload

    seen: set[str] = set()

    def draw(name: str, k: int) -> list[dict]:
        rows, seed = [], 0
        while len(rows) < k:
            for row in build_workload(name, count_tokens, seed=seed, scale=scale).instances:
                key = json.dumps(row, sort_keys=True)
                if key not in seen and len(rows) < k:
                    seen.add(key)
                    rows.append(row)
            seed += 1
        return rows

    quality = draw("quality", n // QUALITY_EVERY)
    race = draw("race", n - len(quality))
    return [quality.pop(0) if i % QUALITY_EVERY == QUALITY_EVERY - 1 and quality else race.pop(0)
            for i in range(n)]


def shared_rows(rows: list[dict]) -> list[dict]:
    """Each question of each row as a request of its own about the row's state, a row's questions in turn."""
    return [{**row, "questions": {qid: q}} for row in rows for qid, q in row["questions"].items()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return 0
    finally:
        conn.close()


def _tail(path: Path, chars: int = 1500) -> str:
    """The log's last whole lines, up to about `chars` characters."""
    text = path.read_text(errors="replace").strip() if path.exists() else ""
    if len(text) > chars:
        text = text[-chars:].partition("\n")[2]
    return text


class Served:
    """One server process: started through its CLI, its output in `log_path`; stop() is graceful."""

    def __init__(self, argv: list[str], log_path: Path):
        self.argv, self.log_path = argv, log_path
        self.log_file = log_path.open("w")
        self.proc = subprocess.Popen(argv, stdout=self.log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)

    def wait_ready(self, port: int, limit_s: float) -> float:
        """Seconds until GET /health (flidec) or GET /v1/models (the System One API's one GET) answers 200;
        RuntimeError with the log's tail when the process exits first or the limit passes."""
        start = time.monotonic()
        while time.monotonic() - start < limit_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with status {self.proc.returncode} before it was ready: "
                                   f"{_tail(self.log_path)}")
            if _status(port, "/health") == 200 or _status(port, "/v1/models") == 200:
                return round(time.monotonic() - start, 2)
            time.sleep(0.5)
        raise RuntimeError(f"not ready within {limit_s:.0f} s: {_tail(self.log_path)}")

    def stop(self) -> dict:
        """SIGTERM, then SIGKILL after STOP_GRACE_S: how it ended."""
        start = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.log_file.close()
                return {"signal": "SIGKILL", "exit": self.proc.returncode,
                        "stop_s": round(time.monotonic() - start, 2)}
        self.log_file.close()
        return {"signal": "SIGTERM", "exit": self.proc.returncode,
                "stop_s": round(time.monotonic() - start, 2)}


def server_argv(name: str, args: argparse.Namespace, artifact: Path, port: int) -> list[str]:
    if name == "flidec":
        argv = [sys.executable, "-c", FLIDEC_CLI.format(root=str(ROOT)), "serve", str(artifact),
                "--port", str(port), "--device", args.device, "--max-queue", str(args.max_queue),
                "--deadline", f"{args.deadline:g}", "--log-level", "warning"]
        return argv + (["--threads", str(args.threads)] if args.threads else [])
    return [args.flide_python, "-c", FLIDE_CLI, "serve", "--model", str(args.model), "--format", "next_token",
            "--device", args.device, "--host", "127.0.0.1", "--port", str(port)]


def shown(argv: list[str]) -> str:
    """The command line as its CLI's user types it (the -c launcher as the script's name)."""
    name = "flidec" if "flidec.cli" in argv[2] else "flide"
    return " ".join([name, *argv[3:]])


def run_load(args: argparse.Namespace, rows_path: Path, port: int, limit_s: float, out: Path,
             burst: bool = True) -> dict:
    """benchmarks/serve_load.py in its own process (stdlib only, as a client box would run it): it sends
    nothing 30 s before `limit_s` (a slow server gives a partial summary, `sent` < requests) and is killed
    at `limit_s`."""
    argv = [sys.executable, str(ROOT / "benchmarks" / "serve_load.py"), f"http://127.0.0.1:{port}",
            "--rows", str(rows_path), "--clients", str(args.clients), "--requests", str(args.requests),
            "--out", str(out), "--max-s", f"{max(limit_s - 30, 1.0):.0f}"] + \
        (["--burst", str(args.burst)] if args.burst and burst else [])
    out.unlink(missing_ok=True)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=max(limit_s, 1.0))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"serve_load did not finish within {limit_s:.0f} s (its share of the budget)"
                           ) from None
    except BaseException:
        proc.kill()
        raise
    if not out.exists():
        raise RuntimeError(f"serve_load exited with status {proc.returncode}: {err.strip()[-1500:]}")
    return json.loads(out.read_text())


def bench_server(name: str, args: argparse.Namespace, artifact: Path | None, rows_paths: dict[str, Path],
                 deadline: float, entry: dict) -> None:
    """Fill one server's entry as it goes: start, ready, load, stop; an error at any step is its text."""
    port = free_port()
    argv = server_argv(name, args, artifact or Path("-"), port)
    entry["command"] = shown(argv)
    if name == "flidec" and artifact is None:
        entry["error"] = "no artifact: the compile failed (see compile_error)"
        return
    log(f"{name}: {entry['command']} (until {deadline - time.monotonic():.0f} s from now)")
    served = Served(argv, args.out.parent / f"serve.{name}.log")
    try:
        entry["ready_s"] = served.wait_ready(port, deadline - time.monotonic() - 20)
        entry["loads"] = {}
        for k, (load, path) in enumerate(rows_paths.items()):
            log(f"{name}: ready in {entry['ready_s']} s; {load} load: {args.clients} clients, "
                f"{args.requests} requests")
            limit = (deadline - time.monotonic() - 10) / (len(rows_paths) - k)
            s = entry["loads"][load] = run_load(args, path, port, limit,
                                                args.work_dir / f"{name}.{load}.load.json", burst=k == 0)
            if load == "rows":
                entry["summary"] = s
            log(f"{name} {load}: {s['requests_per_s']} requests/s, {s['questions_per_s']} questions/s, p50 "
                f"{s['p50_ms']} ms, p99 {s['p99_ms']} ms, errors {s['errors']}, differ from alone "
                f"{s['differ_from_alone']}")
    except Exception as e:  # noqa: BLE001 -- a server that fails is a row with its error, not a crash
        entry["error"] = f"{type(e).__name__}: {e}".strip()[:2000]
        log(f"{name}: {entry['error'][:300]}")
    finally:
        entry["stop"] = served.stop()


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python benchmarks/serve_bench.py", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path, help="the results file (serve.json)")
    p.add_argument("--model", type=Path, default=Path("/tmp/qwen35-0.8b"), help="made here if missing")
    p.add_argument("--make-size", default="0.8B", help="make_checkpoint --size for a missing --model")
    p.add_argument("--device", default=None, help="cuda when there is one, else cpu")
    p.add_argument("--rows", type=int, default=256, help="distinct request bodies")
    p.add_argument("--scale", type=float, default=1.0, help="shrink the rows' states (0, 1]")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--requests", type=int, default=2048)
    p.add_argument("--burst", type=int, default=256, help="requests released at one instant (0: none)")
    p.add_argument("--max-queue", type=int, default=64, help="flidec serve --max-queue: at least --clients "
                   "(the load is never refused), under --burst (the burst is, past it)")
    p.add_argument("--deadline", type=float, default=60.0, help="flidec serve --deadline, seconds")
    p.add_argument("--threads", type=int, help="flidec serve --threads (on a shared CPU, 1)")
    p.add_argument("--servers", default="flidec,flide", help="comma list of flidec, flide")
    p.add_argument("--loads", default="rows,shared", help="comma list of rows, shared (one question a "
                   "request, a row's requests in flight together)")
    p.add_argument("--flide-python", default=sys.executable, help="the Python that has flide 0.1.4")
    p.add_argument("--time-budget-s", type=float, default=300.0, help="the whole run, setup included")
    p.add_argument("--commit", default=None, help="default: git's, else 'unknown'")
    p.add_argument("--work-dir", type=Path, help="the rows, the artifact and the load files (default: a "
                   "new temporary folder)")
    args = p.parse_args(argv)
    args.servers = [s for s in args.servers.split(",") if s]
    for s in args.servers:
        if s not in ("flidec", "flide"):
            p.error(f"unknown server {s!r}; flidec or flide")
    args.loads = [s for s in args.loads.split(",") if s]
    for s in args.loads:
        if s not in ("rows", "shared"):
            p.error(f"unknown load {s!r}; rows or shared")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.monotonic()
    deadline = start + args.time_budget_s
    signal.signal(signal.SIGTERM, _stop_signal)
    import torch

    from flidec.compile import compile_artifact
    from flidec.models.tokenizer import load_tokenizer
    from flidec.testing.make_checkpoint import make_checkpoint

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="serve-bench-"))
    args.work_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {"gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
                    "commit": args.commit or git_commit(), "device": args.device, "rows": None,
                    "load": {"clients": args.clients, "requests": args.requests, "burst": args.burst,
                             "max_queue": args.max_queue, "deadline_s": args.deadline}, "servers": {}}

    def write() -> None:
        args.out.write_text(json.dumps(report, indent=1) + "\n")

    try:
        if not (args.model / "config.json").is_file():
            log(f"{args.model} does not exist: making a {args.make_size} checkpoint (seed 0, bf16)")
            make_checkpoint(args.model, args.make_size, seed=0, dtype="bf16")
        tokenizer = load_tokenizer(args.model)
        t0 = time.monotonic()
        rows = request_rows(lambda s: len(tokenizer.encode(s)), args.rows, args.scale)
        rows_paths = {}
        for load in args.loads:
            rows_paths[load] = args.work_dir / f"{load}.jsonl"
            bodies = rows if load == "rows" else shared_rows(rows)
            rows_paths[load].write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in bodies),
                                        encoding="utf-8")
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        tokens = [len(tokenizer.encode(r["state"])) for r in rows]  # QuALITY- and RACE-like: text states
        report["rows"] = {"count": len(rows), "quality_like": len(rows) // QUALITY_EVERY,
                          "race_like": len(rows) - len(rows) // QUALITY_EVERY, "scale": args.scale,
                          "questions": sum(len(r["questions"]) for r in rows),
                          "state_tokens": [min(tokens), round(sum(tokens) / len(tokens)), max(tokens)],
                          "sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}
        log(f"{len(rows)} rows ({time.monotonic() - t0:.1f} s): {report['rows']}")
        write()
        artifact: Path | None = None
        if "flidec" in args.servers:
            target = "cpu" if args.device == "cpu" else "sm_90"
            artifact = args.work_dir / f"systemone.{target}"
            t0 = time.monotonic()
            try:
                compile_artifact(SPEC, args.model, target, artifact)
                report["compile_s"] = round(time.monotonic() - t0, 1)
                log(f"compiled {SPEC.name} for {target} in {report['compile_s']} s")
            except Exception as e:  # noqa: BLE001 -- flidec's row says so; flide still runs
                report["compile_error"] = f"{type(e).__name__}: {e}"[:2000]
                artifact = None
        for i, name in enumerate(args.servers):
            share = (deadline - time.monotonic()) / (len(args.servers) - i)
            report["servers"][name] = {}
            bench_server(name, args, artifact, rows_paths, time.monotonic() + share, report["servers"][name])
            write()
    except Stopped as e:
        report["stopped"] = str(e)
    report["elapsed_s"] = round(time.monotonic() - start, 1)
    write()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
