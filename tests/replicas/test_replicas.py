"""`flidec serve ARTIFACT --replicas 2` on Ray Serve, as a user runs it: one local Ray cluster (this module's
only one) with two CPU replicas of the systemone cpu artifact (tests/conftest.py) behind one endpoint,
sharing a checkpoint directory. jevcompat passes keyless through the endpoint; every answer is bit for bit
a single process's (the same Program loaded here); an agent trajectory's steps land on one replica (the
`x-flidec-replica` header); killing a replica while requests are in flight (two about each state, shared
by the replica that holds them) loses none and changes no answer. The routing rule itself: test_router.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray.serve")

SERVED = "flidec-tiny"
WAIT = 180
TICKET = ("Hi, I was charged twice for my March invoice (order #4471) and the refund I was promised last "
          "week still hasn't arrived. Please fix this today.")
STEPS = ["Step {i}: the agent read the invoice log and found charge {i} of order #{n}; it asked the billing "
         "tool for the refund status and got 'pending since {i} days'. "]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def _post(url: str, body: dict, timeout: float = 120) -> tuple[int, dict, dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, json.loads(e.read())


class Endpoint:
    def __init__(self, proc: subprocess.Popen, url: str):
        self.proc, self.url = proc, url

    def ask(self, body: dict) -> tuple[dict, str]:
        status, headers, answer = _post(self.url + "/v1/systemone", body)
        assert status == 200, answer
        return answer, headers["x-flidec-replica"]

    def replica_pids(self) -> list[int]:
        """The replicas' worker processes: descendants of the CLI's process titled ray::ServeReplica."""
        children: dict[int, list[int]] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(d.name))
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            for c in children.get(pid, []):
                todo.append(c)
                try:
                    cmd = Path(f"/proc/{c}/cmdline").read_bytes()
                except OSError:
                    continue
                if cmd.startswith(b"ray::ServeReplica"):
                    out.append(c)
        return out


@pytest.fixture(scope="module")
def endpoint(systemone_cpu_artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    port = _free_port()
    checkpoints = tmp_path_factory.mktemp("replica-checkpoints")
    cmd = [sys.executable, "-m", "flidec.cli", "serve", str(systemone_cpu_artifact), "--replicas", "2",
           "--port", str(port), "--device", "cpu", "--threads", "1", "--served-name", SERVED,
           "--checkpoints", str(checkpoints), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + WAIT
    while _get(url + "/health") != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out = proc.communicate()[0][-4000:]
            raise AssertionError(f"flidec serve --replicas 2 did not become ready: {out}")
        time.sleep(0.2)
    yield Endpoint(proc, url)
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("flidec serve --replicas 2 did not stop on SIGTERM") from None
    assert proc.returncode == 0, out[-4000:]


@pytest.fixture(scope="module")
def single(systemone_cpu_artifact: Path):
    """The same artifact in this process: what a single-process server answers."""
    import torch

    from flidec.runtime.program import load

    torch.set_num_threads(1)
    program = load(systemone_cpu_artifact, "cpu", served_name=SERVED, saved_states=False)

    def answer(body: dict) -> dict:
        (out,) = program.run([body], "systemone")
        return out

    return answer


def _body(state: str, q: int = 0, **extra: object) -> dict:
    questions = {"refund": {"type": "noul", "instructions": f"Does the customer want a refund? ({q})"},
                 "team": {"type": "choice", "instructions": "Which team handles it?",
                          "criteria": {"billing": "payments", "shipping": None, "support": "the rest"}}}
    return {"model": "jev-latest", "state": state, "questions": questions, **extra}


def _one(body: dict, question: str) -> dict:
    """The body asking only its question `question`."""
    return {**body, "questions": {question: body["questions"][question]}}


def _trajectory(agent: int, steps: int) -> list[str]:
    """An agent's growing history: each step's state extends the last one's text."""
    states, text = [], f"Agent {agent} works ticket #{4471 + agent}. {TICKET} "
    for i in range(steps):
        text += STEPS[0].format(i=i, n=agent * 100 + i) * 3
        states.append(text)
    return states


def test_jevcompat_passes_keyless_through_the_endpoint(endpoint: Endpoint, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    run = subprocess.run([sys.executable, "-m", "jevcompat.cli", "test", endpoint.url, "--json", str(report),
                          "--timeout", "60"], capture_output=True, text=True, timeout=600, check=False,
                         env={**os.environ, "NO_COLOR": "1"})
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    line = run.stdout.strip().splitlines()[-1]
    assert line == "conformant to spec 0.1: MUST 32/32, SHOULD 13/13", run.stdout[-3000:]


def test_answers_are_a_single_process_answers_bit_for_bit(endpoint: Endpoint, single) -> None:
    seen = set()
    for i in range(6):
        body = _body(f"{TICKET} Case {i}: " + "the customer wrote again. " * (i * 7), q=i)
        answer, replica = endpoint.ask(body)
        seen.add(replica)
        assert answer == single(body)  # floats parsed from JSON: equal means the same bits


def test_an_agent_trajectory_stays_on_one_replica(endpoint: Endpoint, single) -> None:
    where: dict[str, set[str]] = {}
    trajectories = {f"agent-{a}": _trajectory(a, 5) for a in (1, 2)}
    for step in range(5):
        for session, states in trajectories.items():
            body = _body(states[step], q=step, x_session=session)
            answer, replica = endpoint.ask(body)
            where.setdefault(session, set()).add(replica)
            assert answer == single({k: v for k, v in body.items() if k != "x_session"})
    assert all(len(r) == 1 for r in where.values()), where
    # without a session id, a continuation follows its state's token prefix to the same replica
    states = _trajectory(3, 4)
    replicas = {endpoint.ask(_body(s, q=i))[1] for i, s in enumerate(states)}
    assert len(replicas) == 1, replicas


def test_killing_a_replica_mid_run_loses_nothing_and_changes_no_answer(endpoint: Endpoint, single) -> None:
    pids = endpoint.replica_pids()
    assert len(pids) == 2, pids
    # each agent's step asks its two questions as two requests about one state, in flight together (the
    # shared-state load: the replica computes the state once for both)
    bodies = [_one(_body(s, q=i, x_session=f"kill-{a}"), name) for i in range(4) for a in range(4)
              for s in [_trajectory(10 + a, 4)[i]] for name in ("refund", "team")]
    results: dict[int, tuple[int, dict]] = {}
    lock = threading.Lock()

    def client(k: int) -> None:
        for i in range(k, len(bodies), 8):  # each client walks one agent's steps in order, one question
            status, _, answer = _post(endpoint.url + "/v1/systemone", bodies[i])
            with lock:
                assert i not in results  # answered once
                results[i] = (status, answer)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    while True:  # kill one replica once a few answers are in and the rest are on their way
        with lock:
            if len(results) >= 3:
                break
        time.sleep(0.01)
    os.kill(pids[0], signal.SIGKILL)
    for t in threads:
        t.join(WAIT)
    assert len(results) == len(bodies)
    for i, body in enumerate(bodies):
        status, answer = results[i]
        assert status == 200, answer
        assert answer == single({k: v for k, v in body.items() if k != "x_session"})
    with urllib.request.urlopen(endpoint.url + "/metrics", timeout=10) as r:
        metrics = r.read().decode()
    resent = next(line for line in metrics.splitlines() if line.startswith("flidec_replica_resent_total"))
    print(f"\n{resent} (requests the killed replica held, answered by the other)")
    # Ray restarts it; the endpoint keeps answering meanwhile
    answer, _ = endpoint.ask(_body(TICKET + " after the kill"))
    assert answer == single(_body(TICKET + " after the kill"))
    deadline = time.monotonic() + WAIT
    while len(endpoint.replica_pids()) < 2 or pids[0] in endpoint.replica_pids():
        assert time.monotonic() < deadline, "Ray did not restart the killed replica"
        time.sleep(0.5)
