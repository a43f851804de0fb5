"""The Replica deployment: one Program behind the single-process server's queue, on one GPU or CPU process.

Consumes ServeOptions (runtime/http/main.py, the CLI's flags); produces, per Replica.run call (a request's
instances, its tree, the seconds left of its deadline and its Route, which only the router reads), the
replica's name, each instance's result and state tokens resumed, or the ApiError to answer, and a snapshot of
the replica's counters for the ingress's /metrics. Ray Serve marks a replica healthy once its Program has
loaded (the constructor loads it), restarts one that dies, and the ingress sends a request that was on it
to another (service.py). `app(args)` is the `serve run` application for a Ray cluster: an Ingress replica
holding the same FastAPI app as `flidec serve` in front of the Replicas.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from ray import serve
from ray.serve.config import RequestRouterConfig

from flidec.runtime.http.errors import ApiError
from flidec.runtime.http.main import ServeOptions, loader
from flidec.runtime.http.service import Service, ServiceOptions
from flidec.runtime.replicas.router import FAR, SavedStateRouter
from flidec.runtime.replicas.routing import Route

APP = "flidec"


def service_options(o: ServeOptions) -> ServiceOptions:
    return ServiceOptions(max_queue=o.max_queue, max_batch=o.max_batch, deadline_s=o.deadline_s,
                          threads=o.threads)


class Replica:
    """One Program (loaded in the constructor) and the queue batching onto it."""

    def __init__(self, o: ServeOptions):
        import torch

        if o.threads is not None:
            torch.set_num_threads(o.threads)
        self.options = o
        self.service = Service(loader(o), service_options(o))
        self.service._load()  # here, not in a thread: Ray Serve routes to the replica once this returns
        if self.service.error is not None:
            raise self.service.error
        try:
            self.name = serve.get_replica_context().replica_id.unique_id
        except Exception:  # noqa: BLE001 (constructed outside Serve: a test)
            self.name = "local"

    def describe(self) -> dict[str, Any]:
        program = self.service.ready_program()
        return {"served_name": program.served_name, "trees": list(program.trees), "replica": self.name}

    def snapshot(self) -> dict[str, Any] | None:
        live = self.service.live()
        return None if live is None else {**live, "cuda": None}

    async def run(self, instances: list, tree: str | None, left_s: float, route: Route | None = None
                  ) -> tuple[str, Any, dict | None]:
        """(name, [(result, reused), ...] or ("error", status, error_type, message, headers), snapshot)."""
        arrived = time.monotonic() - (self.options.deadline_s - left_s)
        try:
            ran = await self.service.run(instances, tree, arrived)
            out: Any = [(r.record, r.reused) for r in ran]
        except ApiError as e:
            out = ("error", e.status, e.error_type, e.message, e.headers)
        return self.name, out, self.snapshot()

    def check_health(self) -> None:
        queue = self.service.queue
        if queue is None or queue.closed:
            raise RuntimeError("the replica's queue has stopped")


def replica_deployment(o: ServeOptions, replicas: int, far: int = FAR):
    """The Replica deployment of `replicas` copies, one GPU each on cuda (a CPU process each on cpu), routed
    by SavedStateRouter."""
    actor = {"num_gpus": 1} if o.device.startswith("cuda") else {"num_cpus": 1}
    return serve.deployment(Replica, name="Replica").options(
        num_replicas=replicas, ray_actor_options=actor, max_ongoing_requests=max(1, o.max_queue),
        health_check_period_s=2.0, health_check_timeout_s=30.0,
        graceful_shutdown_timeout_s=max(1.0, o.deadline_s),
        request_router_config=RequestRouterConfig(request_router_class=SavedStateRouter,
                                                  request_router_kwargs={"far": far}))


@serve.ingress()
class Ingress:
    """The single-process server's FastAPI app (routes, limits, keys, metrics), built in this replica over a
    RoutedService whose handle reaches the Replicas; Serve's HTTP proxy sends every request to it."""

    def __init__(self, replicas: Any, o: ServeOptions):
        from flidec.runtime.replicas.service import RoutedService

        self.options = o
        self.service = RoutedService(o, lambda: replicas)

    def __serve_build_asgi_app__(self):
        from flidec.runtime.http.main import build

        _, app = build(self.options, service=self.service)
        self.service.attach(app)
        return app


def options_of(args: dict[str, Any]) -> tuple[ServeOptions, int]:
    """ServeOptions and the replica count from `serve run` arguments (key=value: artifact=DIR replicas=N and
    any ServeOptions field, e.g. device=cuda checkpoints=/shared/ck deadline_s=60)."""
    fields = {f.name: f for f in dataclasses.fields(ServeOptions)}
    given = dict(args)
    replicas = int(given.pop("replicas", 1))
    unknown = set(given) - set(fields)
    if "artifact" not in given or unknown:
        raise ValueError(f"serve run arguments: artifact=DIR is required; unknown {sorted(unknown)}; the "
                         f"others are {', '.join(sorted(fields))}")
    values: dict[str, Any] = {}
    for name, value in given.items():
        default = fields[name].default
        if name == "artifact":
            values[name] = Path(value)
        elif isinstance(default, bool):
            values[name] = str(value).lower() in ("1", "true", "yes")
        elif isinstance(default, (int, float)) and not isinstance(value, (int, float)):
            values[name] = type(default)(value)
        elif name in ("api_keys", "api_key_files"):
            values[name] = tuple(str(value).split(","))
        elif name == "threads":
            values[name] = int(value)
        else:
            values[name] = value
    return ServeOptions(**values), replicas


def app(args: dict[str, Any]):
    """`serve run flidec.runtime.replicas.deployment:app artifact=DIR replicas=N [device=cuda ...]`."""
    o, replicas = options_of(args)
    ingress = serve.deployment(Ingress, name="Ingress").options(
        num_replicas=1, ray_actor_options={"num_cpus": 1}, max_ongoing_requests=max(1, o.max_queue))
    return ingress.bind(replica_deployment(o, replicas).bind(o), o)
