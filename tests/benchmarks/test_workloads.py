"""Workloads are deterministic by seed, have the shapes issue 5 states (at a reduced scale, with the real
Qwen3.5 tokenizer), bind through the example specs, and their token accounting adds up."""

import json

import pytest

from benchmarks.prose import corpus_sha256, paragraphs
from benchmarks.work import prepare_work
from benchmarks.workloads import build_workload, instances_jsonl
from flidec.formats import make_format
from flidec.frontend import load_spec


@pytest.fixture(scope="module")
def count(qwen_tokenizer):
    return lambda s: len(qwen_tokenizer.encode(s))


def _work(workload, tokenizer):
    spec, _ = load_spec(workload.spec)
    tree = next(t for t in spec.trees if t.name == workload.tree)
    return prepare_work(workload, tree, make_format(spec.format, tokenizer))


def test_prose_is_english_paragraphs():
    ps = paragraphs()
    assert len(ps) > 300 and all(p.endswith((".", "?", "!")) and "\n" not in p for p in ps)
    assert len(corpus_sha256()) == 64


@pytest.mark.parametrize("name", ["quality", "race", "mixed", "planner", "lookahead", "independent", "demo"])
def test_same_seed_same_instances(count, name):
    a = build_workload(name, count, seed=3, scale=0.05)
    b = build_workload(name, count, seed=3, scale=0.05)
    c = build_workload(name, count, seed=4, scale=0.05)
    assert instances_jsonl(a) == instances_jsonl(b)
    assert instances_jsonl(a) != instances_jsonl(c)


def test_reading_shapes(count):
    quality = build_workload("quality", count, scale=0.1)  # 24 -> 2 states of ~500 tokens
    assert len(quality.instances) == 2
    for inst in quality.instances:
        assert 0.9 * 500 <= count(inst["state"]) <= 1.1 * 500
        qs = inst["questions"]
        assert len(qs) == 9
        assert all(q["type"] == "choice" and len(q["criteria"]) == 4 for q in qs.values())
    race = build_workload("race", count, scale=0.1)  # 96 -> 10 states of ~45 tokens
    assert len(race.instances) == 10
    assert all(len(i["questions"]) == 4 for i in race.instances)
    assert all(0.8 * 45 <= count(i["state"]) <= 1.3 * 45 for i in race.instances)


def test_mixed_shapes(count):
    mixed = build_workload("mixed", count, scale=0.25)
    assert len(mixed.instances) == 24
    kinds, options, objects = set(), [], 0
    for inst in mixed.instances:
        qs = inst["questions"]
        assert 1 <= len(qs) <= 12
        objects += isinstance(inst["state"], dict)
        for q in qs.values():
            kinds.add(q["type"])
            if q["type"] == "choice":
                options.append(len(q["criteria"]))
        n = count(inst["state"] if isinstance(inst["state"], str) else json.dumps(inst["state"]))
        assert n <= 3000 * 0.25 + 80
    assert kinds == {"noul", "choice", "score"}
    assert max(options) == 151 and min(options) >= 2
    assert objects > 0
    assert any(inst["state"] == "" for inst in mixed.instances)


def test_tree_shapes(count):
    planner = build_workload("planner", count, scale=0.05)
    for inst in planner.instances:
        assert len(inst["action"]) == 16 and all(len(a["outcome"]) == 2 for a in inst["action"])
    lookahead = build_workload("lookahead", count, scale=0.05)

    def depth(branches, d=1):
        assert len(branches) == 2
        key = f"step{d + 1}"
        return max(depth(b[key], d + 1) if key in b else d for b in branches)

    assert all(depth(inst["step1"]) == 6 for inst in lookahead.instances)
    independent = build_workload("independent", count, scale=0.05)
    assert len(independent.instances) == 13 and all(len(i["questions"]) == 1 for i in independent.instances)


def test_work_token_accounting(count, qwen_tokenizer):
    work = _work(build_workload("planner", count, scale=0.02), qwen_tokenizer)
    assert work.instances == 1 and len(work.reads) == 1 + 16 * 3 + 32
    every = [0]
    plain, one, tree = (work.tokens(every, c) for c in ("solo", "one-level", "tree"))
    assert plain == sum(len(r.path) for r in work.reads)
    assert tree == sum(len(ids) for _, ids in work.forests[0])
    assert plain > one > tree  # the planner has a second fork level: flattening recomputes the actions
    for read in work.reads:  # each read's path is its forest path, and starts with the shared state piece
        assert read.path[: read.root] == work.forests[0][0][1]
    sysone = _work(build_workload("race", count, scale=0.02), qwen_tokenizer)
    ids = list(range(sysone.instances))
    assert sysone.tokens(ids, "one-level") == sysone.tokens(ids, "tree") < sysone.tokens(ids, "solo")


def test_demo_requests_bind_through_the_demo_spec_with_the_demo_tokenizer(count) -> None:
    """The demo workload: in-domain System One requests of examples/demo.flide, one question each, that the
    embedded demo model's own tokenizer binds."""
    from flidec.models import DEMO_MODEL
    from flidec.models.tokenizer import load_tokenizer

    demo = build_workload("demo", count, scale=0.25)
    assert demo.spec.name == "demo.flide" and len(demo.instances) == 24
    assert all(len(i["questions"]) == 1 for i in demo.instances)
    assert {q["type"] for i in demo.instances for q in i["questions"].values()} == {"noul", "choice", "score"}
    work = _work(demo, load_tokenizer(DEMO_MODEL))
    assert work.instances == 24 and len(work.reads) == 24
