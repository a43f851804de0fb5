"""What routing a request to a replica costs the ingress (issue 29), measured on the CPU.

    python benchmarks/router_cost.py --out router.json [--tokens 512,2048,5000,8000] [--repeats 200]
        [--replicas 2,8] [--dispatch 2000] [--concurrency 64] [--commit HASH]

Three parts of what `flidec serve --replicas N`'s ingress does for each request beside the single-process
server's own work (runtime/replicas):
- the route (routing.py route_of): a keyless state's text chain-hashed in whole blocks, at each `--tokens`
  length (prose of that many Qwen3.5 ids, counted with a tiny make_checkpoint's real tokenizer); beside it
  what tokenizing that state costs, which routing by token ids would add; a request naming a session skips
  both;
- the rule (router.py): the holder looked up, the replicas ranked by queue length, the route recorded, with
  `--replicas` replicas and an Affinity already holding ~64k sessions and keys;
- the dispatch: Ray Serve's handle sending `--dispatch` calls, `--concurrency` at a time, through
  SavedStateRouter to a deployment of 2 replicas that answer at once (a local Ray cluster on 127.0.0.1, no
  dashboard): the requests/s one ingress can hand to replicas, whatever they compute. The replicas share
  this machine's cores with the ingress, so it is a lower bound.
Writes {cpu, commit, route: {tokens: ms}, tokenize: {tokens: ms}, rule: {replicas: ms}, dispatch:
{requests, concurrency, s, requests_per_s, ms_each}}; BENCHMARKS.md (benchmarks/report.py --router) turns
it and the single-GPU server's numbers into the expected scaling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
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

from flidec.ir.tree import State, Tree
from flidec.runtime.replicas.router import Affinity, rank
from flidec.runtime.replicas.routing import Route, route_of

TREE = Tree("systemone", State("state", None), ())  # type: ignore[arg-type]
PROSE = ("The agent opened the ticket, read the invoice log line by line and asked the billing tool for "
         "the refund status of order {i}; the tool said it was pending since {j} days. ")


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores)"
    return platform.processor() or platform.machine()


def state_of(encode, tokens: int, seed: int) -> str:
    """A prose state of about `tokens` ids, distinct per seed."""
    text, i = "", seed * 1000
    while len(encode(text)) < tokens:
        text += "".join(PROSE.format(i=i + k, j=(i + k) % 17) for k in range(16))
        i += 16
    return text


def median_ms(fn, repeats: int) -> float:
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def route_cost(encode, lengths: list[int], repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """(ms to route a state, ms to tokenize it) by its length in tokens."""
    route, tokenize = {}, {}
    for tokens in lengths:
        states = [state_of(encode, tokens, s) for s in range(8)]
        route[str(tokens)] = median_ms(lambda i, st=states: route_of({"state": st[i % 8]}, TREE), repeats)
        tokenize[str(tokens)] = median_ms(lambda i, st=states: encode(st[i % 8]), repeats)
    return route, tokenize


def rule_cost(counts: list[int], repeats: int) -> dict[str, float]:
    out = {}
    rng = random.Random(0)
    for n in counts:
        affinity = Affinity()
        for s in range(1 << 12):  # a busy ingress: 4,096 sessions of 16 keys each remembered
            affinity.record(Route(f"s{s}", tuple(f"k{s}-{b}" for b in range(16))), f"r{s % n}")
        queues = {f"r{i}": rng.randrange(8) for i in range(n)}
        routes = [Route(None, tuple(f"k{rng.randrange(1 << 12)}-{b}" for b in range(16))) for _ in range(64)]

        def one(i: int, routes=routes, affinity=affinity, queues=queues) -> None:
            route = routes[i % 64]
            order = rank(affinity.holder(route), queues)
            affinity.record(route, order[0])
        out[str(n)] = median_ms(one, repeats)
    return out


class Answerer:
    """A replica that answers at once: what is left is the dispatch."""

    async def run(self, instances: list, tree: str | None, left_s: float, route: Route | None = None):
        return "r", [], None


def dispatch_cost(requests: int, concurrency: int) -> dict[str, float]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from flidec.runtime.replicas.router import SavedStateRouter

    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=max(os.cpu_count() or 1, 3),
             log_to_driver=False, configure_logging=False)
    try:
        serve.start(proxy_location="Disabled")
        deployment = serve.deployment(Answerer, name="Answerer").options(
            num_replicas=2, ray_actor_options={"num_cpus": 1}, max_ongoing_requests=concurrency,
            request_router_config=RequestRouterConfig(request_router_class=SavedStateRouter))
        handle = serve.run(deployment.bind(), name="router-cost", route_prefix=None)
        routes = [Route(f"s{i % 256}", (f"k{i % 256}",)) for i in range(requests)]

        async def drive(n: int) -> float:
            sem = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                async with sem:
                    await handle.run.remote([], None, 60.0, route=routes[i])
            start = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(n)))
            return time.perf_counter() - start

        asyncio.run(drive(min(requests, 200)))  # warm: the router's queue-length cache, the actors
        seconds = asyncio.run(drive(requests))
    finally:
        serve.shutdown()
        ray.shutdown()
    return {"requests": requests, "concurrency": concurrency, "s": seconds,
            "requests_per_s": requests / seconds, "ms_each": seconds / requests * 1e3}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python benchmarks/router_cost.py", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tokens", default="512,2048,5000,8000", help="state lengths for the route's cost")
    p.add_argument("--repeats", type=int, default=200, help="timed calls per length and per replica count")
    p.add_argument("--replicas", default="2,8", help="replica counts for the rule's cost")
    p.add_argument("--dispatch", type=int, default=2000, help="calls through the handle (0: skip Ray)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--commit", default="", help="the commit measured (for the results file)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from flidec.models.tokenizer import load_tokenizer
    from flidec.testing.make_checkpoint import make_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        encode = load_tokenizer(make_checkpoint(Path(tmp), "tiny", seed=0, dtype="bf16").path).encode
        route, tokenize = route_cost(encode, [int(t) for t in args.tokens.split(",")], args.repeats)
        out = {"cpu": cpu_name(), "commit": args.commit, "route": route, "tokenize": tokenize,
               "rule": rule_cost([int(n) for n in args.replicas.split(",")], args.repeats)}
    print(json.dumps(out))
    if args.dispatch:
        out["dispatch"] = dispatch_cost(args.dispatch, args.concurrency)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
