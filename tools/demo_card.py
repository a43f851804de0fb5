"""MODEL_CARD.md of the demo model, written from the training run's results (eval.json's contents)."""

from __future__ import annotations

from math import gcd
from pathlib import Path

from demo_data import KINDS


def card(results: dict) -> str:
    ev, run, bars = results["eval"], results["run"], results["eval"]["bars"]
    per_kind = ", ".join(f"{k} {100 * ev[f'accuracy_{k}']:.1f}% (n={ev[f'count_{k}']})" for k in KINDS)
    verdict = "meets" if ev["passed"] else "does NOT meet"
    lm = f" plus {run['lm_weight']} x next-token loss on the prompt" if run['lm_weight'] else ''
    accuracy_bar = f">= {100 * bars['accuracy_min']:.0f}% per type"
    ece = "expected calibration error (10 bins, top probability vs noisy labels)"
    order = "option-order sensitivity (mean abs change of the chosen option, points)"
    return f"""# flidec demo model (a demo, not a general-purpose model)

A {run['parameters'] / 1e6:.1f}M-parameter Qwen3.5-architecture decision model ({layers(run)}; hidden
{run['size']['hidden']}, {run['size']['layers']} layers, tied embeddings, bf16 weights) with
its own {run['vocab_size']}-token byte-level BPE tokenizer, trained from scratch by `tools/train_demo.py` so
that flidec works out of the box with no network and no GPU. It answers System One questions (yes/no
"noul", choice among 2-26 options, score on 3-10 levels) about five kinds of synthetic state only: support
tickets, log excerpts, product reviews, agent trajectories and JSON order records. Outside that world its
answers mean nothing.

## Data
Seeded synthetic requests from templates with varied wording, sentence order, names, numbers and noise
sentences (tools/demo_domains.py); the answers follow fixed rules stated there (a refund ticket asks for a
refund, a job failed when an ERROR-or-worse line names the failed service, the next tool is the one the last
thought asks for, score levels scale the state's cue, ...). Choice options are a random subset of a pool, in
random order. Training labels carry {100 * run['noise']:.0f}% uniform label noise, redrawn every step, so the
probabilities are calibrated instead of all 0 or 1. Every prompt is rendered by flidec's own next_token
format (`examples/systemone.flide`), exactly as flidec reads the model.

## Training
{run['train_examples']} distinct training requests (seed {run['train_seed']}), {run['steps']} steps
({run['examples_seen']} requests seen) in {run['train_seconds']:.0f} s on {run['device_name']}, AdamW with
a time-based cosine schedule, loss: cross-entropy of the label token over the ask's labels
plus {run['pointer_weight']} x a training-only option pointer (not shipped){lm}; transformers'
torch path for the recurrent layers, bf16 autocast.{curriculum(run)}{mix(results)}

## Held-out scores ({ev['examples']} requests, seed {run['eval_seed']}, bf16 weights read in float32)
| metric | value | bar |
| --- | --- | --- |
| accuracy vs the rules' answers | {100 * ev['accuracy']:.1f}% ({per_kind}) | {accuracy_bar} |
| {ece} | {ev['ece']:.3f} | <= {bars['ece_max']} |
| {order} | {ev['order_points']:.2f} | < {bars['order_points_max']} |

Accuracy vs the noisy labels: {100 * ev['accuracy_vs_noisy_labels']:.1f}%; ECE vs the rules' answers:
{ev['ece_vs_rule_answers']:.3f}; mean top probability {ev['mean_top_probability']:.3f}; the top option
changed under reshuffling on {100 * ev['order_flips']:.1f}% of choices. The model {verdict} the bars.

Reproduce: `{run['command']}`
"""


def layers(run: dict) -> str:
    """The layer mix, from the layer_types the run saved (runs before --layer-pattern: the 3:1 pattern)."""
    types = run.get("layer_types")
    pattern = run.get("layer_pattern", "lllf")
    if types is None:
        return "Gated DeltaNet + gated attention, 3:1"
    linear, full = types.count("linear_attention"), types.count("full_attention")
    what = ("gated attention only" if not linear else "Gated DeltaNet only" if not full
            else f"Gated DeltaNet + gated attention, {linear // gcd(linear, full)}:"
                 f"{full // gcd(linear, full)}")
    note = "" if pattern == "lllf" else "; a diagnostic layer pattern, not the shipped 3:1 shape"
    return f"{what}, layer pattern {pattern}{note}"


def mix(results: dict) -> str:
    """The training mix when it is not the normal one (--asks, --verbatim-only) and its own held-out score."""
    run = results["run"]
    asks, verbatim = run.get("asks", list(KINDS)), run.get("verbatim_only", False)
    if list(asks) == list(KINDS) and not verbatim:
        return ""
    text = (f" Diagnostic training mix: only {', '.join(asks)} asks"
            + (", every choice a verbatim one (2-4 options, the answer written in the state)"
               if verbatim else "")
            + "; the held-out scores below are the normal all-types mix.")
    if "eval_mix" in results:
        m = results["eval_mix"]
        per = ", ".join(f"{k} {100 * m[f'accuracy_{k}']:.1f}% (n={m[f'count_{k}']})" for k in asks)
        text += f" On {m['examples']} held-out requests drawn like the training set: {per}."
    return text


def curriculum(run: dict) -> str:
    if not run.get("curriculum_frac"):
        return ""
    return (f" Curriculum: the first {100 * run['curriculum_frac']:.0f}% of the training time "
            f"({run['easy_steps']} steps) drew from {run['easy_examples']} easy requests "
            f"(seed {run['easy_seed']}) whose choices have 2-4 options and the answer written in the state; "
            "the held-out set is the normal mix only.")


def write_card(out: Path, results: dict) -> None:
    (out / "MODEL_CARD.md").write_text(card(results), encoding="utf-8")
