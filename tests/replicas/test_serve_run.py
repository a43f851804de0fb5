"""The replicas as a Ray Serve application (`serve run flidec.runtime.replicas.deployment:app ...`), as a
cluster user deploys it: Serve's HTTP proxy on 127.0.0.1 in front of the Ingress and 2 CPU Replicas of the
systemone cpu artifact, in a process of its own (its own local Ray cluster, no dashboard). /health and
/v1/models answer, a System One request is answered by a named replica with a single process's bits, and
/metrics counts it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray.serve")

SCRIPT = """
import json, os, sys, urllib.request
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
import ray
from ray import serve
from flidec.runtime.replicas.deployment import app
artifact, port, body = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=4, log_to_driver=False)
try:
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(app({"artifact": artifact, "replicas": "2", "device": "cpu", "threads": "1",
                   "served_name": "flidec-tiny"}), name="flidec", route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    out = {}
    for path in ("/health", "/v1/models"):
        with urllib.request.urlopen(url + path, timeout=60) as r:
            out[path] = [r.status, json.loads(r.read())]
    req = urllib.request.Request(url + "/v1/systemone", body.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        out["answer"] = [r.status, r.headers.get("x-flidec-replica"), json.loads(r.read())]
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        out["metrics"] = [l for l in r.read().decode().splitlines() if l.startswith("flidec_replica_answers")]
    print("RESULT " + json.dumps(out))
finally:
    serve.shutdown()
    ray.shutdown()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_serve_run_application_answers_like_one_process(systemone_cpu_artifact: Path) -> None:
    import torch

    from flidec.runtime.program import load

    body = {"model": "flidec-tiny", "state": "A ticket about a double charge and a refund. " * 30,
            "questions": {"refund": {"type": "noul", "instructions": "Does the customer want a refund?"}}}
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(systemone_cpu_artifact), str(_free_port()),
                          json.dumps(body)], capture_output=True, text=True, timeout=400, check=False)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT "):])
    assert out["/health"] == [200, {"status": "ready"}]
    assert [m["name"] for m in out["/v1/models"][1]["models"]] == ["flidec-tiny"]
    status, replica, answer = out["answer"]
    torch.set_num_threads(1)
    program = load(systemone_cpu_artifact, "cpu", served_name="flidec-tiny", saved_states=False)
    assert status == 200 and replica and answer == program.run([body], "systemone")[0]
    assert out["metrics"] == [f'flidec_replica_answers_total{{replica="{replica}"}} 1.0']
