"""The benchmark's arithmetic: rates, percentiles, model FLOPs, exactness against a reference.

Consumes plain numbers (seconds, token counts), a TextConfig (flidec.models.config) and per-read label
logits (1-D float tensors keyed by read index); produces floats and small frozen records. No timing, no
devices: everything here is checked on hand-made numbers in tests/benchmarks/test_metrics.py.

Model FLOPs, counted per computed token (what an engine actually runs, so an engine that recomputes a
shared state is charged for it): 2 x every projection's weight elements (attention q/k/v/o, Gated DeltaNet
qkv/z/a/b/out, MLP gate/up/down; no embedding lookup), 2 x the conv taps of each GDN channel, per GDN layer
2 * Hv * (3 * Dk * Dv + C * (3 * Dk + 2 * Dv)) for the chunked delta rule (state read, state update and the
WY correction against the state, plus the intra-chunk products over C = 64), and per full-attention layer
4 * heads * head_dim * (p + 1) for a token at logical position p (scores and values over its causal keys).
Each read adds 2 * hidden * labels for the label head.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from flidec.models.config import FULL, LINEAR, TextConfig

GDN_CHUNK = 64


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if not xs:
        raise ValueError("percentile of no values")
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return float(s[lo] + (s[hi] - s[lo]) * (k - lo))


def rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("nan")


def token_flops(cfg: TextConfig) -> float:
    """FLOPs of one token through every layer, position-independent part (see the module docstring)."""
    h, total = cfg.hidden_size, 0.0
    mlp = 3 * h * cfg.intermediate_size
    for kind in cfg.layer_types:
        if kind == LINEAR:
            hv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
            proj = h * (cfg.conv_dim + cfg.linear_value_dim + 2 * hv) + cfg.linear_value_dim * h
            total += 2 * proj + 2 * cfg.conv_dim * cfg.conv_kernel
            total += 2 * hv * (3 * dk * dv + GDN_CHUNK * (3 * dk + 2 * dv))
        else:
            d = cfg.head_dim
            proj = h * (2 * cfg.num_heads * d + 2 * cfg.num_kv_heads * d) + cfg.num_heads * d * h
            total += 2 * proj
        total += 2 * mlp
    return total


def span_flops(cfg: TextConfig, spans: Iterable[tuple[int, int]], reads_labels: int = 0) -> float:
    """FLOPs of computing token spans (first logical position, length), plus `reads_labels` label logits."""
    per_token = token_flops(cfg)
    attn = 4 * cfg.num_heads * cfg.head_dim * sum(k == FULL for k in cfg.layer_types)
    total = 0.0
    for pos0, n in spans:
        # sum over p in [pos0, pos0 + n) of (p + 1)
        total += per_token * n + attn * (n * pos0 + n * (n + 1) / 2)
    return total + 2 * cfg.hidden_size * reads_labels


def sharing_ratio(plain_tokens: int, computed_tokens: int) -> float:
    """Tokens a plain engine computes (every prompt whole) / tokens a forking engine computes."""
    return plain_tokens / computed_tokens if computed_tokens else float("nan")


def probabilities(logits: torch.Tensor) -> torch.Tensor:
    """Softmax over one read's label logits, in float64."""
    return torch.softmax(logits.double(), dim=-1)


@dataclass(frozen=True)
class Exactness:
    reads: int  # reads compared
    max_dp_points: float  # max over reads and labels of |p - p_ref|, in percentage points
    mean_tv: float  # mean over reads of the total-variation distance 0.5 * sum |p - p_ref|
    flips: int  # decisions that differ: argmax for choice/score, p_yes on the other side of 0.5 for noul
    flip_rate: float


def exactness(
    reference: Mapping[int, torch.Tensor], test: Mapping[int, torch.Tensor], kinds: Mapping[int, str]
) -> Exactness | None:
    """Compare `test` with `reference` on the reads both hold; None when they share none."""
    common = sorted(set(reference) & set(test))
    if not common:
        return None
    max_dp, tv_sum, flips = 0.0, 0.0, 0
    for r in common:
        p, q = probabilities(test[r]), probabilities(reference[r])
        diff = (p - q).abs()
        max_dp = max(max_dp, float(diff.max()) * 100)
        tv_sum += 0.5 * float(diff.sum())
        if kinds[r] == "noul":
            flips += (float(p[0]) > 0.5) != (float(q[0]) > 0.5)
        else:
            flips += int(torch.argmax(p)) != int(torch.argmax(q))
    return Exactness(len(common), max_dp, tv_sum / len(common), flips, flips / len(common))


def bitwise_equal(a: Mapping[int, torch.Tensor], b: Mapping[int, torch.Tensor]) -> tuple[int, int]:
    """(reads whose logits are bit for bit equal, reads compared) over the reads both hold."""
    common = sorted(set(a) & set(b))
    return sum(torch.equal(a[r], b[r]) for r in common), len(common)
