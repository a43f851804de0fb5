"""The held-out metrics on hand-made numbers."""

from __future__ import annotations

import numpy as np
import pytest
from demo_eval import accuracy, expected_calibration_error, order_sensitivity


def test_accuracy():
    probs = np.array([[0.7, 0.3, 0], [0.2, 0.8, 0], [0.1, 0.1, 0.8]])
    assert accuracy(probs, np.array([0, 0, 2])) == pytest.approx(2 / 3)


def test_ece_hand_computed():
    # bin 9: confidences 0.95, 0.95 with one correct -> |1 - 1.9| = 0.9; bin 6: 0.65 correct -> 0.35
    conf = np.array([0.95, 0.95, 0.65])
    correct = np.array([True, False, True])
    assert expected_calibration_error(conf, correct) == pytest.approx((0.9 + 0.35) / 3)


def test_ece_zero_when_confidence_matches_frequency():
    conf = np.full(10, 0.8)
    correct = np.array([True] * 8 + [False] * 2)
    assert expected_calibration_error(conf, correct) == pytest.approx(0.0, abs=1e-12)


def test_ece_confidence_one_lands_in_the_last_bin():
    assert expected_calibration_error(np.array([1.0, 0.05]), np.array([True, False])) == pytest.approx(0.025)


def test_order_sensitivity_follows_the_chosen_option():
    before = np.array([[0.6, 0.3, 0.1], [0.2, 0.8, 0.0]])
    # ask 0: options reversed (0->2, 1->1, 2->0), chosen option 0 now at 2 with 0.5; ask 1: unchanged
    after = np.array([[0.1, 0.4, 0.5], [0.2, 0.8, 0.0]])
    positions = [[2, 1, 0], [0, 1]]
    assert order_sensitivity(before, after, positions) == pytest.approx(100 * (0.1 + 0.0) / 2)
