"""The ingress's Service: the single-process app's routes, limits, keys and metrics over N Replicas.

Consumes ServeOptions and a way to reach the Replica deployment (a DeploymentHandle: the one `serve.run`
returns, or the one Serve binds into the Ingress); produces what runtime/http/app.py asks of a Service:
the artifact's trees and served name (ArtifactView: the trees from the artifact's tree.json, the name
from a replica), and each request's results through `run`, sent to one replica with its Route
(routing.py), which SavedStateRouter matches to the replica holding its state. A request whose replica
dies before answering (Ray's actor errors) is sent again, to another replica, until its deadline: it is
answered once, by the replica that finished it. Each answer names its replica in the `x-flidec-replica`
header (the middleware `attach` adds), and /metrics gains the answers per replica and the resends; the
queue and Program counters are summed over the replicas' snapshots, as of each one's latest answer.
`serve_replicas` is `flidec serve --replicas N`: a local Ray cluster pinned to 127.0.0.1 without a
dashboard (or `--ray-address` for an existing one), the Replicas deployed without Serve's HTTP proxy, and
the app on uvicorn in this process.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from flidec.ir.errors import FlideError
from flidec.ir.serde import spec_from_json
from flidec.ir.tree import Tree
from flidec.runtime.http.errors import ApiError, retry_headers
from flidec.runtime.http.main import ServeOptions
from flidec.runtime.http.service import Service
from flidec.runtime.replicas.routing import Route, route_of, session_of
from flidec.runtime.request import Result

log = logging.getLogger("uvicorn.error")
ATTEMPTS = 4  # sends of one request while replicas die under it
HEADER = "x-flidec-replica"
_answered: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("flidec_replicas", default=None)


@dataclass(frozen=True, slots=True)
class TreeView:
    tree: Tree


@dataclass(frozen=True, slots=True)
class ArtifactView:
    """What the routes read of a Program: its trees by name and its served name."""

    trees: dict[str, TreeView]
    served_name: str


def _summed(values: Sequence[Any]) -> Any:
    """Counters of several replicas added up: numbers, dicts of numbers, dataclasses of those."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    first = values[0]
    if dataclasses.is_dataclass(first):
        return type(first)(**{f.name: _summed([getattr(v, f.name) for v in values])
                              for f in dataclasses.fields(first)})
    if isinstance(first, dict):
        keys = {k for v in values for k in v}
        return {k: _summed([v.get(k) for v in values]) for k in keys}
    if isinstance(first, (int, float)):
        return sum(values)
    return first


class RoutedService(Service):
    def __init__(self, o: ServeOptions, connect: Callable[[], Any]):
        from flidec.runtime.replicas.deployment import service_options

        super().__init__(lambda: None, service_options(o))  # _load below connects instead of loading
        self.serve_options = o
        self._connect = connect
        self.handle: Any = None
        self.on_close: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self.snapshots: dict[str, dict] = {}  # replica -> its counters as of its latest answer
        self.answers: Counter[str] = Counter()  # replica -> requests it answered
        self.resent = 0  # sends repeated because a replica died under them

    def _load(self) -> None:
        try:
            directory = Path(self.serve_options.artifact)
            spec = spec_from_json(json.loads((directory / "tree.json").read_text(encoding="utf-8")))
            try:
                handle = self._connect()
                about = handle.describe.remote().result()
            except Exception as e:  # noqa: BLE001 (Ray's deploy errors: the replica logs hold the cause)
                raise FlideError(f"the replicas did not start: {e} (the first replica's error is in Ray's "
                                 "serve logs, /tmp/ray/session_latest/logs/serve/replica_*)") from None
            by_name = {t.name: t for t in spec.trees}
            self.handle = handle
            trees = {n: TreeView(by_name[n]) for n in about["trees"]}
            self.program = ArtifactView(trees, about["served_name"])
            log.info("flidec serve: the replicas of %s are ready, serving %s as %r", directory,
                     ", ".join(about["trees"]), about["served_name"])
        except BaseException as e:  # noqa: BLE001 (reported by the CLI, which stops the server)
            self.error = e
            if self.on_failure is not None:
                self.on_failure(e)
        finally:
            self.loaded.set()

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
        done, self.on_close = self.on_close, None
        if done is not None:
            done()

    def live(self) -> dict | None:
        if self.program is None:
            return None
        with self._lock:
            snaps = list(self.snapshots.values())
        if not snaps:
            from flidec.runtime.program import Stats
            from flidec.runtime.scheduler import SchedulerStats

            return {"queue": SchedulerStats(0, 0, 0, 0, 0, 0, 0, 0, 0, {}), "program": Stats(), "buckets": {},
                    "cuda": None}
        return {"queue": _summed([s["queue"] for s in snaps]),
                "program": _summed([s["program"] for s in snaps]),
                "buckets": _summed([s["buckets"] for s in snaps]) or {}, "cuda": None}

    async def run(self, instances: Sequence[Any], tree: str | None, arrived: float,
                  disconnected: Any = None) -> list[Result]:
        """Each instance's result from one replica (the request's instances share a state: they go
        together), by `arrived + deadline_s`; a send that a dying replica drops is sent again."""
        from ray.exceptions import RayActorError

        view = self.ready_program()
        assert isinstance(view, ArtifactView) and self.handle is not None
        name = tree if tree is not None else next(iter(view.trees))
        first = instances[0] if instances else None
        session = session_of(first)  # a session decides alone; else the state text's block keys
        route = Route(session) if session is not None else route_of(first, view.trees[name].tree)
        deadline_s = self.options.deadline_s
        for attempt in range(ATTEMPTS):
            left = deadline_s - (time.monotonic() - arrived)
            if left <= 0:
                break
            response = self.handle.run.remote(list(instances), tree, left, route=route)
            try:
                replica, out, snapshot = await asyncio.wait_for(_awaited(response), left + 5.0)
            except RayActorError as e:
                with self._lock:
                    self.resent += 1
                log.warning("flidec serve: a replica died under a request (%s); sending it again (%d)",
                            type(e).__name__, attempt + 1)
                continue
            except TimeoutError:
                response.cancel()
                break
            with self._lock:
                self.answers[replica] += 1
                if snapshot is not None:
                    self.snapshots[replica] = snapshot
            holder = _answered.get()
            if holder is not None:
                holder.append(replica)
            if isinstance(out, tuple):
                _, status, error_type, message, headers = out
                raise ApiError(status, error_type, message, headers)
            return [Result(record, reused=reused) for record, reused in out]
        raise ApiError(503, "overloaded_error", f"no answer within the request deadline of {deadline_s:g} s: "
                       "retry later or with fewer questions", retry_headers(1.0))

    def attach(self, app: Any) -> None:
        """The x-flidec-replica header on every answer and the per-replica counters on /metrics."""
        app.add_middleware(_ReplicaHeader)
        app.state.metrics.registry.register(_ReplicaMetrics(self))


async def _awaited(response: Any) -> Any:
    return await response


class _ReplicaHeader:
    """ASGI middleware: `x-flidec-replica: NAME` names the replica that answered (absent when none did)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replicas: list[str] = []
        token = _answered.set(replicas)

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start" and replicas:
                message["headers"] = [*message.get("headers", []),
                                      (HEADER.encode(), ",".join(dict.fromkeys(replicas)).encode())]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            _answered.reset(token)


class _ReplicaMetrics(Collector):
    def __init__(self, service: RoutedService):
        self.service = service

    def collect(self) -> Iterator[Any]:
        s = self.service
        with s._lock:
            answers, resent = dict(s.answers), s.resent
        per = CounterMetricFamily("flidec_replica_answers", "requests each replica answered",
                                  labels=["replica"])
        for name, n in sorted(answers.items()):
            per.add_metric([name], n)
        yield per
        yield CounterMetricFamily("flidec_replica_resent", "requests sent again: their replica died under "
                                  "them", value=resent)
        yield GaugeMetricFamily("flidec_replicas_seen", "replicas that have answered", value=len(answers))


# -- flidec serve --replicas N ----------------------------------------------------------------------


def start_cluster(o: ServeOptions, replicas: int, address: str | None = None) -> Callable[[], None]:
    """Ray for the replicas: an existing cluster at `address`, else a local one on 127.0.0.1 (no dashboard,
    no usage report), with Serve's HTTP proxy off; returns its shutdown."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray import serve

    if address:
        ray.init(address=address, namespace="flidec", log_to_driver=False)
    else:
        # every Ray process takes 127.0.0.1 as its node's address (not the address a route out resolves)
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        cpus = max(os.cpu_count() or 1, replicas + 1) if not o.device.startswith("cuda") else None
        ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, namespace="flidec", num_cpus=cpus,
                 log_to_driver=False, configure_logging=False)
    serve.start(proxy_location="Disabled")

    def shutdown() -> None:
        from flidec.runtime.replicas.deployment import APP

        try:
            if address:  # another's cluster: take down this app only
                serve.delete(APP)
        finally:
            ray.shutdown()  # a local cluster: its processes end with it (the ingress has drained)
    return shutdown


def deploy(o: ServeOptions, replicas: int) -> Any:
    """The Replicas deployed (returns once every one has loaded) and their handle."""
    from ray import serve

    from flidec.runtime.replicas.deployment import APP, replica_deployment

    return serve.run(replica_deployment(o, replicas).bind(o), name=APP, route_prefix=None)


def serve_replicas(o: ServeOptions, replicas: int, address: str | None = None) -> None:
    """`flidec serve ARTIFACT --replicas N`: until SIGINT or SIGTERM, like the single-process server."""
    from flidec.runtime.http.main import serve

    if replicas < 1:
        raise ValueError(f"--replicas {replicas}: it must be at least 1")
    shutdown = start_cluster(o, replicas, address)
    service = RoutedService(o, lambda: deploy(o, replicas))
    service.on_close = shutdown
    try:
        serve(o, service=service, extend=service.attach)
    finally:
        service.close()  # the cluster's shutdown, unless the app's lifespan has run it
