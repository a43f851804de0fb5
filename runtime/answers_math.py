"""Answer objects from label logits, as System One reports them (../shared/API.md): the pure formulas.

Consumes one read's label logits (float32 values, one per label, in label order) and the ask's options;
produces the answer object of its kind with plain Python floats. Probabilities are the softmax over the
labels only, computed in float64 from the float32 logits; confidences follow TypeSafe's reference formulas.
Ties go to the first option (argmax), so an answer never depends on anything but the logits and options.
The one implementation: flidec.runtime.answers_math re-exports it (the runtime imports no compiler package).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

JSONValue = object  # a decoded JSON value: str, int, float, bool, None, list or dict


def softmax(logits: Sequence[float]) -> list[float]:
    xs = [float(x) for x in logits]
    top = max(xs)
    exps = [math.exp(x - top) for x in xs]
    total = math.fsum(exps)
    return [e / total for e in exps]


def argmax(ps: Sequence[float]) -> int:
    return max(range(len(ps)), key=lambda i: (ps[i], -i))


def choice_confidence(ps: Sequence[float]) -> float:
    """(m - 1/n) / (1 - 1/n) for top probability m of n options; 1 for a single option."""
    n = len(ps)
    if n == 1:
        return 1.0
    return (max(ps) - 1.0 / n) / (1.0 - 1.0 / n)


def score_confidence(ps: Sequence[float]) -> float:
    """max(0, 1 - sum_i p_i |i - k| / D) with k the mode and D = (1/n) sum_i |i - (n-1)/2|."""
    n = len(ps)
    k = argmax(ps)
    spread = math.fsum(abs(i - (n - 1) / 2) for i in range(n)) / n
    return max(0.0, 1.0 - math.fsum(p * abs(i - k) for i, p in enumerate(ps)) / spread)


def noul_answer(logits: Sequence[float]) -> dict:
    """Logits in label order (yes, no)."""
    return {"type": "noul", "noul": softmax(logits)[0]}


def choice_answer(names: Sequence[str], logits: Sequence[float]) -> dict:
    ps = softmax(logits)
    return {
        "type": "choice",
        "choice": names[argmax(ps)],
        "probabilities": dict(zip(names, ps, strict=True)),
        "confidence": choice_confidence(ps),
    }


def score_answer(levels: Sequence[JSONValue], logits: Sequence[float]) -> dict:
    """`levels` low to high, echoed unchanged in the legend."""
    ps = softmax(logits)
    return {
        "type": "score",
        "score": math.fsum(i * p for i, p in enumerate(ps)),
        "legend": {str(i): level for i, level in enumerate(levels)},
        "probabilities": {str(i): p for i, p in enumerate(ps)},
        "confidence": score_confidence(ps),
    }
