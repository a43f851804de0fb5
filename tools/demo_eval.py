"""Held-out evaluation of the demo model: accuracy per ask type, calibration and option-order sensitivity.

Metric functions take numpy arrays (label probabilities [N, MAX_LABELS] with zeros past an ask's labels,
answer and label indices) and return plain floats. Accuracy compares the top label with the rules' answer;
expected calibration error compares the top probability with how often the top label is the observed
(noisy) label, in 10 equal-width bins: a model that learned the noise rate is calibrated against what
labels actually say. Order sensitivity re-asks each choice with its options reshuffled and reports the mean
|change| of the originally chosen option's probability, in points (x100). `evaluate` reads the model as
flidec does: float32 compute on the given (bf16-rounded, as shipped) weights.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import torch
from demo_data import KINDS, Example, reshuffle
from demo_domains import DOMAINS
from demo_loop import collate
from demo_model import forward, label_logits
from demo_render import Encoded, Renderer, encode_examples

BARS = {"accuracy_min": 0.90, "ece_max": 0.05, "order_points_max": 5.0}


def accuracy(probs: np.ndarray, answers: np.ndarray) -> float:
    return float((probs.argmax(1) == answers).mean()) if len(answers) else float("nan")


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, bins: int = 10) -> float:
    """sum over bins of |sum(correct - confidence)| / N; bin b holds confidences in [b/bins, (b+1)/bins)."""
    which = np.minimum((confidence * bins).astype(np.int64), bins - 1)
    gaps = np.zeros(bins)
    np.add.at(gaps, which, correct.astype(np.float64) - confidence)
    return float(np.abs(gaps).sum() / len(confidence))


def order_sensitivity(before: np.ndarray, after: np.ndarray, positions: Sequence[Sequence[int]]) -> float:
    """Mean |p_before(chosen) - p_after(chosen)| in points; positions[i][j]: where option j of ask i moved."""
    deltas = []
    for p, q, moved in zip(before, after, positions, strict=True):
        chosen = int(p.argmax())
        deltas.append(abs(float(p[chosen]) - float(q[moved[chosen]])))
    return 100.0 * float(np.mean(deltas)) if deltas else float("nan")


@torch.no_grad()
def predict(model: torch.nn.Module, enc: Encoded, pad_id: int, device: torch.device,
            batch_tokens: int = 32768) -> np.ndarray:
    """Label probabilities [N, MAX_LABELS] (softmax over each ask's labels, float32 compute)."""
    out = np.zeros(enc.label_ids.shape, dtype=np.float64)
    order = np.argsort(enc.lengths, kind="stable")
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and int(enc.lengths[order[end]]) * (end + 1 - start) <= batch_tokens:
            end += 1
        index = order[start:end]
        ids, lengths = collate(enc, index, pad_id)
        hidden, _ = forward(model, torch.from_numpy(ids).to(device))
        logits = label_logits(model, hidden, torch.from_numpy(lengths).to(device),
                              torch.from_numpy(enc.label_ids[index].astype(np.int64)).to(device))
        out[index] = torch.softmax(logits, dim=1).double().cpu().numpy()
        start = end
    return out


def evaluate(model, r: Renderer, examples: list[Example], pad_id: int, device: torch.device,
             seed: int = 0) -> dict:
    enc = encode_examples(r, examples)
    probs = predict(model, enc, pad_id, device)
    top = probs.max(1)
    result: dict = {"examples": len(examples), "accuracy": accuracy(probs, enc.answers),
                    "accuracy_vs_noisy_labels": accuracy(probs, enc.labels)}
    for k, kind in enumerate(KINDS):
        sel = enc.kinds == k
        result[f"accuracy_{kind}"] = accuracy(probs[sel], enc.answers[sel])
        result[f"count_{kind}"] = int(sel.sum())
    for d, domain in enumerate(DOMAINS):
        for k, kind in enumerate(KINDS):
            sel = (enc.domains == d) & (enc.kinds == k)
            by_domain = result.setdefault("accuracy_by_domain", {})
            by_domain[f"{domain}/{kind}"] = accuracy(probs[sel], enc.answers[sel])
    result["ece"] = expected_calibration_error(top, probs.argmax(1) == enc.labels)
    result["ece_vs_rule_answers"] = expected_calibration_error(top, probs.argmax(1) == enc.answers)
    result["mean_top_probability"] = float(top.mean())

    rng = random.Random(seed)
    choices = [i for i, ex in enumerate(examples) if ex.kind == "choice"]
    shuffled = [reshuffle(examples[i], rng) for i in choices]
    positions = [[list(new.question["criteria"]).index(name) for name in examples[i].question["criteria"]]
                 for i, new in zip(choices, shuffled, strict=True)]
    after = predict(model, encode_examples(r, shuffled), pad_id, device)
    result["order_points"] = order_sensitivity(probs[choices], after, positions)
    flips = [after[j].argmax() != positions[j][probs[i].argmax()] for j, i in enumerate(choices)]
    result["order_flips"] = float(np.mean(flips)) if flips else float("nan")  # top option changed
    result["bars"] = BARS
    result["passed"] = bool(min(result[f"accuracy_{k}"] for k in KINDS) >= BARS["accuracy_min"]
                            and result["ece"] <= BARS["ece_max"]
                            and result["order_points"] < BARS["order_points_max"])
    return result
