"""The routing rule without Ray: a state's route keys (a continuation shares its earlier steps' whole
blocks), the holder of a session or prefix, the least busy fallback when the holder is far busier or gone,
fresh states to the least busy; and the rule's own cost per request, which docs/SERVE.md quotes."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from flidec.ir.tree import State, Tree
from flidec.models.tokenizer import load_tokenizer
from flidec.runtime.replicas.router import Affinity, rank
from flidec.runtime.replicas.routing import Route, route_of

TREE = Tree("systemone", State("state", None), ())  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def encode(systemone_cpu_artifact: Path):
    return load_tokenizer(systemone_cpu_artifact / "tokenizer").encode


def test_a_continuation_shares_its_earlier_steps_keys(encode) -> None:
    step1 = "The agent opened the ticket and read the invoice log line by line. " * 20
    step2 = step1 + "It then asked the billing tool for the refund status. " * 10
    r1 = route_of({"state": step1}, TREE, encode)
    r2 = route_of({"state": step2, "x_session": "a"}, TREE, encode)
    assert r1.keys and len(r2.keys) > len(r1.keys) and r2.session == "a"
    assert r2.keys[: len(r1.keys) - 1] == r1.keys[:-1]  # the last block may tokenize differently
    assert route_of({"state": "short"}, TREE, encode).keys == ()
    assert route_of({"state": step1, "x_session": {"id": "b", "drop": True}}, TREE, encode).session == "b"


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


def test_the_rule_costs_little(encode) -> None:
    """What one request costs the ingress: its route (tokenizing a 2,048-token state, hashing its blocks)
    and the rule over 8 replicas; printed for docs/SERVE.md, bounded loosely for a shared CI machine."""
    state = "The agent read the invoice log and asked the billing tool for the refund status. " * 128
    affinity = Affinity()
    queues = {f"r{i}": i % 3 for i in range(8)}
    n = 200
    start = time.perf_counter()
    for i in range(n):
        route = route_of({"state": state + str(i), "x_session": f"s{i % 16}"}, TREE, encode)
        rank(affinity.holder(route), queues)
        affinity.record(route, f"r{i % 8}")
    per = (time.perf_counter() - start) / n
    tokens = len(encode(state))
    print(f"\nrouting a {tokens}-token state over 8 replicas: {per * 1e3:.3f} ms a request")
    assert per < 0.05
