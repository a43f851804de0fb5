"""Shared states across requests (runtime/sharing.py): the radix tree of a run's roots keeps every read's
path ids, positions and owner; groups are cut only at MIN_SHARED common ids, by saved point, and where a
saved point would lie past the shared root; on the cpu artifacts, requests about one state computed
together give every answer bitwise equal to the request run alone (E1), with fewer rows computed, resumed
requests too."""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flidec.ir.program import Bucket
from flidec.runtime.binder import Plan
from flidec.runtime.packing import Piece
from flidec.runtime.program import load
from flidec.runtime.sharing import MIN_SHARED, share
from flidec.runtime.split import plan_sizes

BIG = Bucket("big", 1 << 20, 4096, 64, 4096, 255)


@dataclass(frozen=True)
class Label:
    labels: tuple[int, ...] = (1, 2)


def plan_of(root: list[int], questions: list[list[int]]) -> Plan:
    """A root and one question segment under it per entry (a read at each question's end)."""
    plan = Plan()
    plan.segment(root, -1)
    for k, q in enumerate(questions):
        plan.reads.append((plan.segment(q, 0), Label(), f"q{k}"))
    return plan


def piece_of(k: int, plan: Plan) -> Piece:
    return Piece(plan, plan_sizes(plan), tuple((k, r) for r in range(len(plan.reads))), whole=True)


def reads_of(pieces: list[Piece]) -> dict[tuple[int, int], list[int]]:
    """(request, read) -> the read's path ids, over every piece."""
    out = {}
    for p in pieces:
        for (seg, _, _), owner in zip(p.plan.reads, p.owners, strict=True):
            out[owner] = p.plan.path_ids(seg)
    return out


def test_requests_about_one_state_become_one_root_with_their_questions_below() -> None:
    state = list(range(100, 300))
    pieces = [piece_of(k, plan_of(state + [7, k], [[k, k + 1]])) for k in range(3)]
    merged = share(list(pieces), BIG, counted := {})
    assert len(merged) == 1
    (m,) = merged
    assert m.plan.ids[0] == state + [7] and m.plan.parents[0] == -1  # the common prefix, once
    assert sum(map(len, m.plan.ids)) == len(state) + 1 + 3 * 3
    assert reads_of(merged) == reads_of(pieces)
    assert counted == {0: len(state) + 1, 1: len(state) + 1, 2: len(state) + 1}


def test_a_short_common_prefix_is_not_shared_and_unrelated_pieces_stay_as_they_were() -> None:
    a = piece_of(0, plan_of(list(range(MIN_SHARED - 1)) + [1000], [[1]]))
    b = piece_of(1, plan_of(list(range(MIN_SHARED - 1)) + [2000], [[2]]))
    c = piece_of(2, plan_of(list(range(5000, 5100)), [[3]]))
    assert share([a, b, c], BIG) == [a, b, c]


def test_nested_prefixes_fork_at_every_level() -> None:
    system = list(range(1, 81))
    s1, s2 = list(range(1000, 1100)), list(range(2000, 2100))
    roots = [system + s1 + [5], system + s1 + [6], system + s2 + [5], system + s2 + [6], system]
    pieces = [piece_of(k, plan_of(r, [[k]])) for k, r in enumerate(roots)]
    (m,) = share(list(pieces), BIG)
    assert reads_of([m]) == reads_of(pieces)
    assert sum(map(len, m.plan.ids)) == len(system) + len(s1) + len(s2) + 4 + 5
    assert plan_sizes(m.plan).depth == 4  # system, each state, each request's last id, its question


def test_only_pieces_resuming_from_one_saved_point_share() -> None:
    state = list(range(300))
    one, other = SimpleNamespace(length=128), SimpleNamespace(length=128)
    pieces = []
    for k, held in enumerate([one, one, other, None]):
        plan = plan_of(state + [k], [[k]])
        plan.held = held
        pieces.append(piece_of(k, plan))
    merged = share(list(pieces), BIG)
    assert len(merged) == 3 and merged[1:] == pieces[2:]
    assert merged[0].plan.held is one


def test_a_point_past_the_shared_root_runs_apart_and_the_shared_one_is_saved_once() -> None:
    state = list(range(400))
    pieces = []
    for k, save in enumerate([192, 192, 384]):
        plan = plan_of(state[: 256 + 128 * (k == 2)] + [k], [[k]])  # the third's root is longer
        plan.save, plan.save_key = save, f"key{save}"
        pieces.append(Piece(plan, plan_sizes(plan), ((k, 0),), whole=True, saver=k))
    merged = share(list(pieces), BIG)
    assert len(merged) == 2 and merged[1] is pieces[2]
    assert merged[0].plan.save == 192 and merged[0].plan.save_key == "key192" and merged[0].saver in (0, 1)


def test_a_group_too_large_for_the_bucket_is_halved() -> None:
    state = list(range(200))
    pieces = [piece_of(k, plan_of(state + [k], [[k] * 50])) for k in range(8)]
    small = Bucket("small", 600, 64, 8, 64, 255)
    merged = share(list(pieces), small)
    assert len(merged) > 1 and all(plan_sizes(p.plan).rows <= 600 for p in merged if not p.whole)
    assert reads_of(merged) == reads_of(pieces)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 150), st.integers(1, 3)), min_size=1,
                max_size=12), st.integers(0, 10**6))
def test_every_read_keeps_its_path_and_owner(drawn: list[tuple[int, int, int]], seed: int) -> None:
    rng = random.Random(seed)
    bases = [[rng.randrange(50) for _ in range(rng.randrange(60, 200))] for _ in range(4)]
    pieces = []
    for k, (b, cut, n) in enumerate(drawn):
        root = bases[b][: max(1, len(bases[b]) - cut)] + [rng.randrange(50) for _ in range(rng.randrange(3))]
        pieces.append(piece_of(k, plan_of(root, [[rng.randrange(50)] for _ in range(n)])))
    merged = share(list(pieces), BIG)
    assert reads_of(merged) == reads_of(pieces)
    assert sorted(o for p in merged for o in p.owners) == sorted(o for p in pieces for o in p.owners)
    assert sum(sum(map(len, p.plan.ids)) for p in merged) <= sum(sum(map(len, p.plan.ids)) for p in pieces)


# -- on the cpu artifacts ------------------------------------------------------------------------------------

STATE = ("Ticket 4411. The customer was charged twice for one order, wrote three times, and says the refund "
         "promised last week never came; the order shipped late and one item was broken on arrival. ") * 2


def asked(i: int, state: str = STATE) -> dict:
    kinds = [{"type": "noul", "instructions": f"Refund now? ({i})"},
             {"type": "choice", "instructions": "Which team?",
              "criteria": {"billing": None, "shipping": None}},
             {"type": "score", "instructions": "How upset?", "criteria": ["calm", "annoyed", "furious"]}]
    return {"state": state, "questions": {f"q{i}": kinds[i % 3]}}


@pytest.fixture(scope="module")
def program(systemone_cpu_artifact):
    return load(systemone_cpu_artifact, "cpu", dtype="fp32", served_name="jev")


def test_requests_about_one_state_are_computed_once_and_answer_as_alone(program) -> None:
    other = "A different ticket about a lost password, a locked account and a second device. " * 8
    instances = [asked(i) for i in range(5)] + [asked(7, other), asked(8, other), asked(9, "short")]
    alone = [program.answer([inst])[0] for inst in instances]
    before = program.stats
    together = program.answer(instances)
    after = program.stats
    for a, t in zip(alone, together, strict=True):
        assert torch.equal(a.logits, t.logits), "a shared state changed an answer's bits"
        assert a.record == t.record
    assert [t.shared > 0 for t in together] == [True] * 7 + [False]
    assert after.shared - before.shared == 7
    rows_alone = sum(a.input_tokens for a in alone)
    assert after.stream_tokens - before.stream_tokens < rows_alone * 0.5  # each state computed once
    assert together[0].input_tokens == alone[0].input_tokens  # each request's own prompt, shared or not


def planner(step: int) -> dict:
    """An agent's planner step on examples/planner.flide: a history that grows by four lines a step."""
    history = "\n".join(f"Step {k}: ran the build, read the log, edited module {k}; the tests failed in part "
                        f"{k * 7 % 5}." for k in range(4 + 4 * step))
    return {"history": history,
            "next_tool": {"instructions": "Which tool next?", "criteria": {"shell": None, "editor": None}},
            "action": [{"text": f"run the tests of step {step}", "outcome": [{"text": "they pass"},
                                                                           {"text": "one fails"}]}]}


def test_resumed_requests_share_their_root_and_answer_as_fresh(planner_cpu_artifact) -> None:
    fresh = load(planner_cpu_artifact, "cpu", saved_states=False)
    program = load(planner_cpu_artifact, "cpu")
    program.answer([planner(1)])  # saves a point the next steps resume from
    instances = [planner(2), planner(2), planner(3)]
    got = program.answer(instances)
    want = fresh.label_logits(instances)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g.logits, w), "a resumed, shared answer differs from its fresh computation"
    assert all(g.reused > 0 for g in got) and got[0].shared > 0 and got[1].shared > 0
