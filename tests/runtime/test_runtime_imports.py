"""The runtime imports no compiler: with Triton, lark, transformers and flidec's codegen, passes, formats and
frontend packages blocked, flidec.runtime.program loads a cpu artifact and answers, and so does the HTTP
server (flidec.runtime.http: its app, its uvicorn runner) on a System One request driven through ASGI."""

from __future__ import annotations

import json
import subprocess
import sys

BLOCKED = ("triton", "lark", "transformers", "flidec.codegen", "flidec.passes", "flidec.formats",
           "flidec.frontend", "cuda")

SCRIPT = """
import importlib.abc, json, sys
BLOCKED = %r

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"blocked: {name}")
        return None

sys.meta_path.insert(0, Blocker())
from flidec.runtime.program import load
program = load(sys.argv[1], "cpu", served_name="jev")
result = program.run([{"state": "The sky is green.",
                       "questions": {"q": {"type": "noul", "instructions": "Sky green?"}}}])

import asyncio
import flidec.runtime.http.main  # the uvicorn runner flidec serve uses
from flidec.runtime.http.app import create_app
from flidec.runtime.http.service import Service, ServiceOptions

service = Service(lambda: program, ServiceOptions(threads=1))
service.start()
service.loaded.wait()
app = create_app(service)
body = json.dumps({"model": "jev-latest", "state": "The sky is green.",
                   "questions": {"q": {"type": "noul", "instructions": "Sky green?"}}}).encode()
sent = []

async def call():
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}
    async def send(message):
        sent.append(message)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/v1/systemone", "raw_path": b"/v1/systemone", "query_string": b"",
             "root_path": "", "headers": [(b"content-type", b"application/json")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    await app(scope, receive, send)

asyncio.run(call())
service.close()
served = {"status": sent[0]["status"], "body": json.loads(b"".join(m.get("body", b"") for m in sent[1:]))}
loaded = sorted(m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in BLOCKED))
print(json.dumps({"result": result, "served": served, "loaded": loaded}))
"""


def test_runtime_loads_and_answers_without_the_compiler(systemone_cpu_artifact) -> None:
    run = subprocess.run([sys.executable, "-c", SCRIPT % (BLOCKED,), str(systemone_cpu_artifact)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []
    (answer,) = out["result"]
    assert answer["model"] == "jev" and answer["answers"]["q"]["type"] == "noul"
    assert out["served"] == {"status": 200, "body": answer}  # the server's answer is the Program's
