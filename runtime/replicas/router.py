"""Which replica answers a request: the one holding its state, unless that one is gone or far busier.

Consumes, per request, its Route (routing.py: session id, state prefix keys) and the replicas' queue
lengths (requests sent and not yet answered: Ray Serve's cache, probed where it has none); produces the
replicas in the order Ray Serve tries them. The rule:
- a request whose session, else whose longest state prefix, was last sent to a replica still running goes
  there first, unless that replica's queue is more than `far` requests longer than the shortest;
- every other request, and those, go next to the replicas by queue length, shortest first (ties broken at
  random, so fresh states spread);
- a replica whose queue is full (max_ongoing_requests) is skipped by Ray Serve for the next one.
Each routed request's session and keys then point to the replica it went to: a continuation follows the
latest step. Affinity is only about speed: a replica that did not save a state resumes it from the shared
checkpoint directory, or computes it, with the same bits (E3). SavedStateRouter plugs the rule into Ray
Serve's request-router extension point (RequestRouter.choose_replicas / on_request_routed).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from flidec.runtime.replicas.routing import Route

FAR = 4  # requests a replica's queue may exceed the shortest by and still keep the states it holds
MAX_ENTRIES = 1 << 18  # sessions and prefix keys remembered (least recently routed forgotten first)


class Affinity:
    """Session ids and state prefix keys -> the replica their latest request was sent to (LRU-bounded)."""

    def __init__(self, max_entries: int = MAX_ENTRIES):
        self.max_entries = max_entries
        self._sessions: OrderedDict[str, str] = OrderedDict()
        self._keys: OrderedDict[str, str] = OrderedDict()

    def holder(self, route: Route) -> str | None:
        """The replica the route's session, else its longest known prefix, last went to."""
        if route.session is not None and route.session in self._sessions:
            return self._sessions[route.session]
        for key in reversed(route.keys):
            replica = self._keys.get(key)
            if replica is not None:
                return replica
        return None

    def record(self, route: Route, replica: str) -> None:
        for table, names in ((self._sessions, (route.session,) if route.session else ()),
                             (self._keys, route.keys)):
            for name in names:
                table[name] = replica
                table.move_to_end(name)
            while len(table) > self.max_entries:
                table.popitem(last=False)

    def forget(self, replica: str) -> None:
        """Drop what pointed to a replica that died (its states are on disk, or gone with it)."""
        for table in (self._sessions, self._keys):
            for name in [n for n, r in table.items() if r == replica]:
                del table[name]

    def __len__(self) -> int:
        return len(self._sessions) + len(self._keys)


def rank(holder: str | None, queues: Mapping[str, int | None], far: int = FAR,
         rng: random.Random | None = None) -> list[str]:
    """The replicas in the order to try them: the holder first while it is running and at most `far`
    requests busier than the least busy, then by queue length (unknown lengths last)."""
    rng = rng or random
    known = sorted((n, rng.random(), r) for r, n in queues.items() if n is not None)
    order = [r for _, _, r in known] + [r for r, n in queues.items() if n is None]
    if holder in queues and queues[holder] is not None and known and queues[holder] - known[0][0] <= far:
        order.remove(holder)
        order.insert(0, holder)
    return order


def route_in(args: Sequence[object], kwargs: Mapping[str, object]) -> Route | None:
    """The Route a Replica.run call carries (its `route` keyword), if any."""
    route = kwargs.get("route")
    return route if isinstance(route, Route) else None


try:  # the request router needs Ray Serve; the rule above does not (tests and the cost measurement)
    from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica
except ImportError:  # pragma: no cover (the `replicas` extra is not installed)
    RequestRouter = object  # type: ignore[assignment,misc]


class SavedStateRouter(RequestRouter):  # type: ignore[misc,valid-type]
    """Ray Serve's request router for Replica: `rank` over the running replicas, Affinity updated as each
    request is routed. Runs in the process holding the deployment handle (the ingress)."""

    def initialize_state(self, far: int = FAR, max_entries: int = MAX_ENTRIES) -> None:
        self.far = far
        self.affinity = Affinity(max_entries)
        self.routed: dict[str, int] = {}  # replica -> requests routed to it, kept by affinity or not

    async def _queues(self, replicas: Sequence[RunningReplica]) -> dict[str, int | None]:
        cache = self.replica_queue_len_cache
        queues = {r.replica_id.unique_id: cache.get(r.replica_id) for r in replicas}
        missing = [r for r in replicas if queues[r.replica_id.unique_id] is None]
        if missing:
            for r, n in await self._probe_queue_lens(missing, 0):
                queues[r.replica_id.unique_id] = n
        return queues

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        by_name = {r.replica_id.unique_id: r for r in candidate_replicas}
        route = None if pending_request is None else route_in(pending_request.args, pending_request.kwargs)
        holder = None if route is None else self.affinity.holder(route)
        order = rank(holder, await self._queues(candidate_replicas), self.far)
        return [[by_name[name]] for name in order]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result) -> None:
        name = replica_id.unique_id
        self.routed[name] = self.routed.get(name, 0) + 1
        route = route_in(pending_request.args, pending_request.kwargs)
        if route is not None:
            self.affinity.record(route, name)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self.affinity.forget(replica_id.unique_id)
