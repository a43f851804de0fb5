"""The training curriculum: verbatim choices (2-4 options, the answer written in the state), the easy-then-
full schedule, per-type loss rows, determinism, and a held-out set the curriculum leaves alone."""

from __future__ import annotations

import hashlib
import json
import random

import numpy as np
import pytest
import torch
import train_demo
from demo_data import KINDS, example, generate, names_in, state_text
from demo_loop import Schedule, chance_losses, phase_at, train
from demo_model import SIZES, build_model, text_config
from demo_render import encode_examples, encode_set, set_examples

from flidec.frontend import load_spec
from flidec.ir.instance import validate_instance
from flidec.models.tokenizer import load_tokenizer

# sha256 of the first 2,000 held-out requests (seed 2000), taken before the curriculum existed
HELD_OUT_2000 = "c35082271201094c3232f163aac5c0eac4159dd2f5cf992bea0d29f2f36fed07"


def _digest(examples) -> str:
    h = hashlib.sha256()
    for x in examples:
        h.update(json.dumps([x.domain, x.state, x.question, x.answer, x.label]).encode())
    return h.hexdigest()


def test_verbatim_choices_name_their_answer_and_no_other_option_in_the_state():
    choices = [x for x in generate(21, 1500, verbatim=True) if x.kind == "choice"]
    assert len(choices) > 500
    assert {x.options for x in choices} == {2, 3, 4}
    assert {x.domain for x in choices} == {"ticket", "log", "review", "agent", "record"}
    for x in choices:
        names = list(x.question["criteria"])
        text = state_text(x.state)
        assert names_in(text, names[x.answer]), (names[x.answer], text)
        others = [n for i, n in enumerate(names) if i != x.answer and n.lower() in text.lower()]
        assert not others, (names, text)
        assert all(d is None for d in x.question["criteria"].values())


def test_normal_choices_are_not_verbatim():
    """The check above can fail: most choices of the normal mix do not name their answer alone."""
    choices = [x for x in generate(21, 600) if x.kind == "choice"]
    alone = [x for x in choices
             if names_in(state_text(x.state), list(x.question["criteria"])[x.answer]) and 2 <= x.options <= 4
             and not any(n.lower() in state_text(x.state).lower()
                         for i, n in enumerate(x.question["criteria"]) if i != x.answer)]
    assert len(alone) < 0.3 * len(choices)


def test_verbatim_mix_keeps_noul_and_score_asks_and_the_choice_question():
    kinds = set()
    for seed in range(300):
        normal, easy = example(random.Random(seed)), example(random.Random(seed), verbatim=True)
        kinds.add(normal.kind)
        assert (easy.domain, easy.kind) == (normal.domain, normal.kind)
        if normal.kind == "choice":
            assert easy.question.get("instructions") == normal.question.get("instructions")
        else:
            assert easy == normal
    assert kinds == set(KINDS)


def test_verbatim_requests_are_valid_and_encode(render):
    spec, _ = load_spec("examples/systemone.flide")
    tree = spec.tree("systemone")
    examples = set_examples(22, 300, verbatim=True)
    for x in examples:
        validate_instance(tree, x.request())
    enc = encode_examples(render, examples)
    choice = enc.kinds == KINDS.index("choice")
    assert ((enc.option_ends[choice] >= 0).sum(1) == (enc.label_ids[choice] >= 0).sum(1)).all()
    assert chance_losses(enc)["choice"] < np.log(4)


def test_verbatim_sets_are_deterministic(demo_dir):
    assert list(generate(23, 400, verbatim=True)) == list(generate(23, 400, verbatim=True))
    assert list(generate(23, 400, verbatim=True)) != list(generate(24, 400, verbatim=True))
    one = encode_set(demo_dir, 25, 2300, workers=1, verbatim=True)
    two = encode_set(demo_dir, 25, 2300, workers=2, verbatim=True)
    for field in ("ids", "offsets", "label_ids", "option_ends", "answers", "labels", "kinds", "domains"):
        assert np.array_equal(getattr(one, field), getattr(two, field)), field
    assert set_examples(25, 300) != set_examples(25, 300, verbatim=True)


def test_held_out_set_is_the_normal_mix_whatever_the_curriculum():
    args = ["--out=/nonexistent", "--eval-examples=2000"]
    plain = train_demo.held_out_examples(train_demo.parse_args([*args, "--curriculum-frac=0"]))
    curriculum = train_demo.held_out_examples(train_demo.parse_args([*args, "--curriculum-frac=0.5"]))
    assert _digest(plain) == _digest(curriculum) == HELD_OUT_2000
    assert train_demo.parse_args(args).curriculum_frac == 0.3
    seeds = train_demo.seeds(train_demo.parse_args(args))
    assert len(set(seeds.values())) == 4


def test_phase_switches_from_easy_to_full_at_the_fraction():
    s = Schedule(curriculum_frac=0.3)
    assert [phase_at(p, s) for p in (0.0, 0.1, 0.299, 0.3, 0.5, 1.0)] == ["easy"] * 3 + ["full"] * 3
    assert {phase_at(p, Schedule()) for p in (0.0, 0.2, 1.0)} == {"full"}


@pytest.fixture(scope="module")
def small_sets(demo_dir, render):
    """An easy set of noul asks only and a full set of choices only, so a row's per-type losses tell
    which set its steps drew from."""
    tok = load_tokenizer(demo_dir)
    config = text_config(SIZES["micro"], -(-tok.vocab_size // 64) * 64, tok.pad_id, tok.eos_id)
    examples = set_examples(26, 120)
    easy = encode_examples(render, [x for x in examples if x.kind == "noul"])
    full = encode_examples(render, [x for x in examples if x.kind == "choice"])
    mixed = encode_examples(render, examples)
    return tok, config, easy, full, mixed


def test_train_draws_from_the_easy_set_before_the_switch_and_the_full_set_after(small_sets):
    tok, config, easy, full, _ = small_sets
    s = Schedule(warmup_frac=0.0, batch_tokens=4000, max_steps=10, curriculum_frac=0.3)
    log = train(build_model(config, seed=0), full, tok.pad_id, s, torch.device("cpu"), log=lambda _: None,
                log_every=1, easy=easy)
    assert log.easy_steps == 3
    assert [row["phase"] for row in log.history] == ["easy"] * 3 + ["full"] * 7
    for row in log.history:
        drew = {k for k in KINDS if row[f"loss_{k}"] is not None}
        assert drew == ({"noul"} if row["phase"] == "easy" else {"choice"}), row


def test_no_curriculum_never_draws_the_easy_set_and_a_curriculum_needs_one(small_sets):
    tok, config, easy, full, _ = small_sets
    s = Schedule(warmup_frac=0.0, batch_tokens=4000, max_steps=4)
    log = train(build_model(config, seed=0), full, tok.pad_id, s, torch.device("cpu"), log=lambda _: None,
                log_every=1, easy=easy)
    assert log.easy_steps == 0 and {row["loss_noul"] for row in log.history} == {None}
    with pytest.raises(ValueError, match="easy set"):
        train(build_model(config, seed=0), full, tok.pad_id, Schedule(max_steps=1, curriculum_frac=0.5),
              torch.device("cpu"), log=lambda _: None)


def test_log_rows_average_the_label_loss_per_type(small_sets):
    tok, config, _, _, mixed = small_sets
    s = Schedule(lr=0.0, warmup_frac=0.0, noise=0.0, batch_tokens=100_000, max_steps=2)
    log = train(build_model(config, seed=0), mixed, tok.pad_id, s, torch.device("cpu"), log=lambda _: None,
                log_every=1)
    counts = [int((mixed.kinds == i).sum()) for i in range(len(KINDS))]
    for row in log.history:  # lr 0 and the whole set in each batch: the rows agree with each other
        per = [row[f"loss_{k}"] for k in KINDS]
        assert all(v is not None for v in per)
        assert row["label_loss"] == pytest.approx(np.dot(per, counts) / sum(counts), rel=1e-3)
        assert per != [per[0]] * 3
