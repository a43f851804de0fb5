"""The synthetic dataset: deterministic by seed, System One-shaped, and answers that follow from the state."""

from __future__ import annotations

import json
import random
import re

import pytest
from demo_asks import ordinal_level
from demo_data import Example, generate, reshuffle
from demo_domains import log, record, review
from demo_render import systemone_ask
from demo_vocab import ERROR_FROM, POSITIVE_FROM, PRIORITIES, SENTIMENT, SEVERITY_TAGS

from flidec.frontend import load_spec
from flidec.ir.instance import validate_instance


def test_same_seed_same_examples_other_seed_others():
    assert list(generate(5, 60)) == list(generate(5, 60))
    assert list(generate(5, 60)) != list(generate(6, 60))


def test_label_noise_rate():
    xs = list(generate(1, 4000, noise=0.06))
    flipped = sum(x.label != x.answer for x in xs) / len(xs)
    assert 0.045 < flipped < 0.075
    assert all(x.label == x.answer for x in generate(1, 500, noise=0.0))
    assert all(0 <= x.label < x.options for x in xs)


def test_requests_are_valid_systemone_instances_with_the_allowed_counts():
    spec, _ = load_spec("examples/systemone.flide")
    tree = spec.tree("systemone")
    assert tree.body[0] == systemone_ask()
    for x in generate(2, 300):
        validate_instance(tree, x.request())
        if x.kind == "choice":
            assert 2 <= x.options <= 26
            assert len(set(x.question["criteria"])) == x.options
        elif x.kind == "score":
            assert 3 <= x.options <= 10 and isinstance(x.question["criteria"], list)


def test_ordinal_level_hand_values():
    assert [ordinal_level(b, 8, 3) for b in range(8)] == [0, 0, 1, 1, 1, 1, 2, 2]
    assert [ordinal_level(b, 10, 10) for b in range(10)] == list(range(10))
    assert [ordinal_level(b, 6, 4) for b in range(6)] == [0, 1, 1, 2, 2, 3]


def _asks(domain, seed: int):
    state, posed = domain(random.Random(seed))
    return state, {p.question.get("instructions") or json.dumps(p.question.get("criteria")): p for p in posed}


@pytest.mark.parametrize("seed", range(40))
def test_record_answers_follow_the_state(seed):
    state, asks = _asks(record, seed)
    country = next(state[k] for k in ("country", "ship_to", "destination") if k in state)
    for text, p in asks.items():
        q = p.question
        if q["type"] == "choice" and country in q["criteria"]:
            assert list(q["criteria"])[p.answer] in (country, state["status"])
        if text in ("Has the order been delivered?", "Did the order arrive?"):
            assert p.answer == (0 if state["status"] == "delivered" else 1)
        if q["type"] == "score":
            cue = next(b for b, words in enumerate(PRIORITIES) if state["priority"] in words)
            assert p.answer == ordinal_level(cue, len(PRIORITIES), len(q["criteria"]))


@pytest.mark.parametrize("seed", range(40))
def test_log_answers_follow_the_state(seed):
    state, asks = _asks(log, seed)
    bad = {tag for level in SEVERITY_TAGS[ERROR_FROM:] for tag in level}
    lines = [re.match(r"\d\d:\d\d:\d\d (\S+) \[([^\]]+)\]", line) for line in state.splitlines()]
    failing = [m.group(2) for m in lines if m and m.group(1) in bad and m.group(2) != "runner"]
    worst = max(b for m in lines if m for b, tags in enumerate(SEVERITY_TAGS) if m.group(1) in tags)
    for text, p in asks.items():
        q = p.question
        if text in ("Did the job fail?", "Did the run fail?") or text.endswith(" fail?"):
            assert p.answer == (0 if failing else 1)
        if q["type"] == "choice" and text in ("Which service failed?", "Which component caused the failure?",
                                              "Where did the error come from?"):
            assert failing == [list(q["criteria"])[p.answer]]
        if q["type"] == "score":
            assert p.answer == ordinal_level(worst, len(SEVERITY_TAGS), len(q["criteria"]))


@pytest.mark.parametrize("seed", range(40))
def test_review_sentiment_follows_the_state(seed):
    state, asks = _asks(review, seed)
    cue = next(b for b, phrases in enumerate(SENTIMENT) if any(ph in state for ph in phrases))
    assert asks["Is the review positive?" if "Is the review positive?" in asks else
                "Is the reviewer happy with the product?" if "Is the reviewer happy with the product?" in asks
                else "Would the reviewer recommend it?"].answer == (0 if cue >= POSITIVE_FROM else 1)


def test_reshuffle_moves_answer_and_label_with_their_option():
    rng = random.Random(0)
    choices = [x for x in generate(4, 200) if x.kind == "choice"]
    for x in choices:
        y = reshuffle(x, rng)
        names_x, names_y = list(x.question["criteria"]), list(y.question["criteria"])
        assert sorted(names_x) == sorted(names_y) and names_x != names_y
        assert names_y[y.answer] == names_x[x.answer] and names_y[y.label] == names_x[x.label]
        assert all(x.question["criteria"][n] == y.question["criteria"][n] for n in names_x)


def test_example_request_shape():
    x = Example("record", {"a": 1}, {"type": "noul", "instructions": "Is it?"}, 0, 0)
    assert x.request("id 1") == {"state": {"a": 1},
                                 "questions": {"id 1": {"type": "noul", "instructions": "Is it?"}}}
