"""The harness's arithmetic on hand-made numbers: percentiles, rates, model FLOPs, sharing, exactness."""

import math

import pytest
import torch

from benchmarks import metrics
from flidec.models.config import FULL, LINEAR, TextConfig


def test_median_and_percentiles():
    assert metrics.median([3.0, 1.0, 2.0]) == 2.0
    assert metrics.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    xs = [1.0, 2.0, 3.0, 4.0]
    assert metrics.percentile(xs, 50) == 2.5
    assert metrics.percentile(xs, 90) == pytest.approx(3.7)
    assert metrics.percentile([7.0], 90) == 7.0
    with pytest.raises(ValueError):
        metrics.percentile([], 50)


def test_rate_and_sharing():
    assert metrics.rate(216, 0.5) == 432
    assert math.isnan(metrics.rate(1, 0.0))
    assert metrics.sharing_ratio(1000, 250) == 4.0


def _cfg() -> TextConfig:
    return TextConfig(
        hidden_size=4,
        num_layers=2,
        layer_types=(LINEAR, FULL),
        num_heads=2,
        num_kv_heads=1,
        head_dim=2,
        partial_rotary_factor=0.25,
        rope_theta=1e4,
        linear_num_key_heads=1,
        linear_num_value_heads=2,
        linear_key_head_dim=2,
        linear_value_head_dim=3,
        conv_kernel=4,
        intermediate_size=8,
        vocab_size=10,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        nested=False,
    )


def test_flops_from_config_by_hand():
    cfg = _cfg()
    # GDN layer: conv_dim = 2*2 + 6 = 10;
    # projections qkv 4x10, z 4x6, a 4x2, b 4x2, out 6x4 = 40+24+8+8+24 = 104
    gdn = 2 * 104 + 2 * 10 * 4 + 2 * 2 * (3 * 2 * 3 + 64 * (3 * 2 + 2 * 3))
    # attention layer: q 4x(2*2*2)=32, k 4x2=8, v 8, o 4x4=16 -> 64
    attn = 2 * 64
    mlp = 2 * 3 * 4 * 8
    assert metrics.token_flops(cfg) == gdn + attn + 2 * mlp
    per_attn_key = 4 * 2 * 2  # one full layer, 2 heads of 2
    # spans: positions 0..2 (keys 1+2+3) and positions 5..6 (keys 6+7), plus 3 label logits
    expected = 5 * metrics.token_flops(cfg) + per_attn_key * (6 + 13) + 2 * 4 * 3
    assert metrics.span_flops(cfg, [(0, 3), (5, 2)], reads_labels=3) == expected


def test_exactness_dp_tv_and_flips():
    ref = {0: torch.tensor([0.0, 0.0]), 1: torch.tensor([0.0, math.log(2), 0.0]), 2: torch.tensor([1.0, 0.0])}
    test = {
        0: torch.tensor([math.log(3), 0.0]),
        1: torch.tensor([0.0, math.log(2), 0.0]),
        3: torch.tensor([0.0]),
    }
    kinds = {0: "noul", 1: "choice", 2: "noul", 3: "score"}
    ex = metrics.exactness(ref, test, kinds)
    # read 0: p = (.75, .25) vs (.5, .5): 25 points, TV .25, p_yes crosses 0.5; read 1 identical
    assert ex.reads == 2
    assert ex.max_dp_points == pytest.approx(25.0)
    assert ex.mean_tv == pytest.approx(0.125)
    assert ex.flips == 1 and ex.flip_rate == 0.5
    assert metrics.exactness(ref, {5: torch.tensor([0.0])}, kinds) is None


def test_argmax_flip_for_choice():
    ref = {0: torch.tensor([2.0, 1.0, 0.0])}
    test = {0: torch.tensor([1.0, 2.0, 0.0])}
    ex = metrics.exactness(ref, test, {0: "score"})
    assert ex.flips == 1


def test_bitwise_equal_counts_common_reads():
    a = {0: torch.tensor([1.0, 2.0]), 1: torch.tensor([0.5]), 2: torch.tensor([3.0])}
    b = {0: torch.tensor([1.0, 2.0]), 1: torch.tensor([0.5000001]), 4: torch.tensor([3.0])}
    assert metrics.bitwise_equal(a, b) == (1, 2)
