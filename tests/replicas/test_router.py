"""The routing rule without Ray: a state's route keys (a continuation shares its earlier steps' whole
blocks, and only those), the holder of a session or prefix, the least busy fallback when the holder is far
busier or gone, fresh states to the least busy. What it costs: benchmarks/router_cost.py."""

from __future__ import annotations

import random

from flidec.ir.tree import State, Tree
from flidec.runtime.replicas.router import Affinity, rank
from flidec.runtime.replicas.routing import BLOCK_BYTES, Route, route_of

TREE = Tree("systemone", State("state", None), ())  # type: ignore[arg-type]


def test_a_continuation_shares_its_earlier_steps_keys() -> None:
    step1 = "The agent opened the ticket and read the invoice log line by line, \u00e9t\u00e9 \u2713. " * 40
    step2 = step1 + "It then asked the billing tool for the refund status. " * 30
    r1 = route_of({"state": step1}, TREE)
    r2 = route_of({"state": step2, "x_session": "a"}, TREE)
    assert len(r1.keys) == len(step1.encode()) // BLOCK_BYTES >= 2 and r2.session == "a"
    assert len(r2.keys) > len(r1.keys) and r2.keys[: len(r1.keys)] == r1.keys  # every whole block shared
    other = route_of({"state": "X" + step1[1:]}, TREE)  # one character apart: no key in common
    assert not set(other.keys) & set(r1.keys)
    assert not set(route_of({"state": step1}, Tree("planner", State("state", None), ())).keys) & set(r1.keys)
    assert route_of({"state": "short"}, TREE).keys == ()
    assert route_of({"state": step1, "x_session": {"id": "b", "drop": True}}, TREE).session == "b"
    assert route_of({"state": 3}, TREE) == Route() and route_of(["x"], TREE) == Route()


def test_the_holder_first_unless_far_busier_or_gone() -> None:
    affinity = Affinity()
    route = Route("s1", ("k1", "k2"))
    affinity.record(route, "A")
    assert affinity.holder(Route("s1")) == "A"
    assert affinity.holder(Route(None, ("k1", "k2", "k3"))) == "A"  # the longest known prefix
    assert affinity.holder(Route(None, ("x",))) is None
    holder = affinity.holder(route)
    assert rank(holder, {"A": 3, "B": 0}, far=4)[0] == "A"
    assert rank(holder, {"A": 5, "B": 0}, far=4) == ["B", "A"]  # far busier: the least busy
    assert rank(holder, {"B": 2, "C": 1}, far=4) == ["C", "B"]  # gone: the least busy
    assert rank(None, {"A": 2, "B": 1, "C": None}) == ["B", "A", "C"]  # unknown queue lengths last
    affinity.record(Route("s1", ("k1", "k2", "k3")), "B")  # a step that went elsewhere moves the session
    assert affinity.holder(Route("s1")) == "B" and affinity.holder(Route(None, ("k1",))) == "B"
    affinity.forget("B")
    assert len(affinity) == 0


def test_fresh_states_spread_over_equally_busy_replicas() -> None:
    rng = random.Random(0)
    firsts = {rank(None, {"A": 0, "B": 0}, rng=rng)[0] for _ in range(32)}
    assert firsts == {"A", "B"}
