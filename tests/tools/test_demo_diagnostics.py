"""Issue 7's diagnostic flags of train_demo.py: --asks (training and held-out mix restricted to some ask
types), --verbatim-only (every training choice verbatim, for the whole run) and --layer-pattern (which
layers are Gated DeltaNet and which full attention, carried into the saved config.json)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
import train_demo
from demo_data import KINDS, generate, names_in, parse_kinds, state_text
from demo_loop import Schedule, chance_losses, train
from demo_model import LAYER_PATTERN, SIZES, build_model, layer_types, text_config
from demo_render import encode_examples, encode_set, set_examples
from test_demo_curriculum import HELD_OUT_2000, _digest

from flidec.models.config import TextConfig
from flidec.models.tokenizer import load_tokenizer

ARGS = ["--out=/nonexistent"]


def _is_verbatim(x) -> bool:
    """A verbatim choice: 2-4 options, the answer named in the state, no other option anywhere in it."""
    names, text = list(x.question["criteria"]), state_text(x.state)
    return (2 <= x.options <= 4 and names_in(text, names[x.answer])
            and not any(n.lower() in text.lower() for i, n in enumerate(names) if i != x.answer))


# --asks


def test_parse_kinds_reads_all_one_type_or_a_comma_list_in_kinds_order():
    assert parse_kinds("all") == KINDS
    assert parse_kinds("choice") == ("choice",)
    assert parse_kinds("score, noul") == ("noul", "score")
    for bad in ("", "choices", "all,noul", "noul,yes"):
        with pytest.raises(ValueError):
            parse_kinds(bad)
    assert train_demo.parse_args(ARGS).asks == KINDS
    assert train_demo.parse_args([*ARGS, "--asks=choice"]).asks == ("choice",)
    with pytest.raises(SystemExit):
        train_demo.parse_args([*ARGS, "--asks=choise"])


@pytest.mark.parametrize("kinds", [("choice",), ("noul",), ("score",), ("noul", "score")])
def test_generated_sets_hold_only_the_asked_types_and_are_deterministic(kinds):
    xs = list(generate(31, 600, kinds=kinds))
    assert len(xs) == 600
    assert {x.kind for x in xs} == set(kinds)
    assert {x.domain for x in xs} == {"ticket", "log", "review", "agent", "record"}
    assert xs == list(generate(31, 600, kinds=kinds))
    assert xs != list(generate(32, 600, kinds=kinds))
    if len(kinds) == 2:  # KIND_WEIGHTS renormalized: noul and score weigh the same
        assert 0.4 < Counter(x.kind for x in xs)["noul"] / len(xs) < 0.6


def test_every_type_is_exactly_the_normal_mix():
    assert list(generate(33, 300, kinds=KINDS)) == list(generate(33, 300))
    assert set_examples(34, 2100, kinds=KINDS) == set_examples(34, 2100)


def test_encoded_filtered_sets_match_across_workers_and_chance_losses_skip_absent_types(demo_dir):
    one = encode_set(demo_dir, 35, 2300, workers=1, kinds=("choice",), verbatim=True)
    two = encode_set(demo_dir, 35, 2300, workers=2, kinds=("choice",), verbatim=True)
    for field in ("ids", "offsets", "label_ids", "option_ends", "answers", "labels", "kinds", "domains"):
        assert np.array_equal(getattr(one, field), getattr(two, field)), field
    assert len(one) == 2300 and set(one.kinds.tolist()) == {KINDS.index("choice")}
    chance = chance_losses(one)
    assert np.isnan(chance["noul"]) and np.isnan(chance["score"])
    options = (one.label_ids >= 0).sum(1)
    assert set(options.tolist()) == {2, 3, 4}
    assert chance["choice"] == pytest.approx(float(np.log(options).mean()))
    assert 0.9 < chance["choice"] < np.log(4)


def test_held_out_sets_normal_one_unchanged_filtered_one_drawn_like_the_training_set():
    args = train_demo.parse_args([*ARGS, "--eval-examples=2000", "--asks=choice", "--verbatim-only"])
    assert _digest(train_demo.held_out_examples(args)) == HELD_OUT_2000  # eval.json's `eval` stays comparable
    mix = train_demo.held_out_mix(args)
    assert len(mix) == 2000 and {x.kind for x in mix} == {"choice"} and all(_is_verbatim(x) for x in mix)
    assert _digest(mix) == _digest(train_demo.held_out_mix(args))
    assert train_demo.mixed(args)
    assert not train_demo.mixed(train_demo.parse_args(ARGS))
    assert train_demo.mixed(train_demo.parse_args([*ARGS, "--asks=noul,score"]))


# --verbatim-only


def test_verbatim_only_trains_on_verbatim_choices_only_and_drops_the_curriculum():
    args = train_demo.parse_args([*ARGS, "--asks=choice", "--verbatim-only"])
    assert args.curriculum_frac == 0.0 and train_demo.parse_args(ARGS).curriculum_frac == 0.3
    xs = set_examples(train_demo.seeds(args)["train"], 1500, **train_demo.train_mix(args))
    assert {x.kind for x in xs} == {"choice"}
    assert all(_is_verbatim(x) for x in xs)
    assert {x.options for x in xs} == {2, 3, 4}
    # without --verbatim-only the same asks are normal choices: most are not verbatim
    plain = set_examples(train_demo.seeds(args)["train"], 1500,
                         **train_demo.train_mix(train_demo.parse_args([*ARGS, "--asks=choice"])))
    assert sum(map(_is_verbatim, plain)) < 0.3 * len(plain)


def test_verbatim_only_with_every_type_keeps_noul_and_score_asks():
    args = train_demo.parse_args([*ARGS, "--verbatim-only"])
    xs = set_examples(train_demo.seeds(args)["train"], 600, **train_demo.train_mix(args))
    assert {x.kind for x in xs} == set(KINDS)
    assert all(_is_verbatim(x) for x in xs if x.kind == "choice")


# --layer-pattern


def test_layer_pattern_repeats_over_the_layers():
    lin, full = "linear_attention", "full_attention"
    assert layer_types(LAYER_PATTERN, 8) == [lin, lin, lin, full] * 2
    assert layer_types("f", 8) == [full] * 8
    assert layer_types("llf", 4) == [lin, lin, full, lin]
    for bad in ("", "lfx", "LLLF"):
        with pytest.raises(ValueError):
            layer_types(bad, 4)
    assert train_demo.LAYER_PATTERN == LAYER_PATTERN
    assert train_demo.parse_args(ARGS).layer_pattern == LAYER_PATTERN
    with pytest.raises(SystemExit):
        train_demo.parse_args([*ARGS, "--layer-pattern=lla"])


@pytest.mark.parametrize("pattern", ["f", "llf"])
def test_layer_pattern_reaches_the_model_a_training_step_and_the_saved_config(pattern, demo_dir, render,
                                                                              tmp_path):
    tok = load_tokenizer(demo_dir)
    config = text_config(SIZES["micro"], -(-tok.vocab_size // 64) * 64, tok.pad_id, tok.eos_id, pattern)
    want = layer_types(pattern, SIZES["micro"].layers)
    assert list(config.layer_types) == want
    model = build_model(config, seed=0)
    built = ["full_attention" if hasattr(layer, "self_attn") else "linear_attention"
             for layer in model.model.layers]
    assert built == want
    before = [p.detach().clone() for p in model.parameters()]
    enc = encode_examples(render, set_examples(36, 12, kinds=("choice",)))
    log = train(model, enc, tok.pad_id, Schedule(warmup_frac=0.0, batch_tokens=100_000, max_steps=1),
                torch.device("cpu"), log=lambda _: None, log_every=1)
    assert log.steps == 1 and np.isfinite(log.history[0]["loss_choice"])
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    model.to(torch.bfloat16).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["layer_types"] == want
    assert list(TextConfig.from_dir(tmp_path).layer_types) == want


# the whole script


def test_script_with_the_diagnostic_flags_writes_what_it_trained(tmp_path):
    out = tmp_path / "demo"
    results = train_demo.main([f"--out={out}", "--device=cpu", "--size=micro", "--max-steps=3",
                               "--train-examples=300", "--eval-examples=60", "--tokenizer-examples=1500",
                               "--batch-tokens=2048", "--workers=1", "--log-every=1", "--time-budget-s=1e9",
                               "--asks=choice", "--verbatim-only", "--layer-pattern=f"])
    run = results["run"]
    assert run["layer_pattern"] == "f" and run["layer_types"] == ["full_attention"] * 4
    assert run["asks"] == ["choice"] and run["verbatim_only"]
    assert run["curriculum_frac"] == 0 and run["easy_steps"] == 0
    for row in run["history"]:
        assert row["loss_noul"] is None and row["loss_score"] is None and row["loss_choice"] is not None
    assert json.loads((out / "config.json").read_text())["layer_types"] == ["full_attention"] * 4
    saved = json.loads((out / "eval.json").read_text())  # strict JSON: absent types' NaNs written as null
    assert saved["run"]["chance_label_loss"]["full"]["noul"] is None
    assert saved["eval"]["examples"] == 60 and saved["eval"]["count_noul"] > 0  # the normal mix, all types
    mix = saved["eval_mix"]
    assert mix["examples"] == mix["count_choice"] == 60 and mix["count_noul"] == mix["count_score"] == 0
    card = (out / "MODEL_CARD.md").read_text()
    assert "layer pattern f" in card and "only choice asks" in card
    summary = train_demo.summary(results)
    assert "layers=f" in summary and "mix[asks=choice verbatim]" in summary
