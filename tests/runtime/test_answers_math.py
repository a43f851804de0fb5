"""Answer objects and TypeSafe's confidence formulas, against hand-computed values."""

from __future__ import annotations

import json
import math

import pytest

from flidec.runtime.answers_math import choice_answer, noul_answer, score_answer, softmax

LN2, LN3, LN4 = math.log(2), math.log(3), math.log(4)


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-12, abs=1e-15)


def test_softmax_is_over_the_given_labels_only() -> None:
    assert softmax([0.0, LN3]) == [approx(0.25), approx(0.75)]
    assert softmax([1000.0, 1000.0]) == [0.5, 0.5]  # no overflow


def test_noul_reports_p_yes_without_confidence() -> None:
    a = noul_answer([LN3, 0.0])
    assert a == {"type": "noul", "noul": approx(0.75)}
    assert type(a["noul"]) is float


def test_choice_three_options() -> None:
    a = choice_answer(["red", "green", "blue"], [0.0, LN2, 0.0])
    assert list(a) == ["type", "choice", "probabilities", "confidence"]
    assert a["type"] == "choice" and a["choice"] == "green"
    assert a["probabilities"] == {"red": approx(0.25), "green": approx(0.5), "blue": approx(0.25)}
    assert a["confidence"] == approx(0.25)  # (1/2 - 1/3) / (1 - 1/3)


def test_choice_tie_goes_to_the_first_and_one_option_is_certain() -> None:
    a = choice_answer(["x", "y"], [1.5, 1.5])
    assert a["choice"] == "x" and a["confidence"] == approx(0.0)
    one = choice_answer(["only"], [-3.0])
    assert one["probabilities"] == {"only": 1.0} and one["confidence"] == 1.0


def test_choice_names_round_trip_byte_for_byte() -> None:
    names = ["한국어 옵션", "🙂", "a.b c", "e\u0301"]  # NFD stays NFD in the answer
    a = choice_answer(names, [0.0, 1.0, 2.0, 3.0])
    assert list(a["probabilities"]) == names and a["choice"] == "e\u0301"


def test_score_three_levels() -> None:
    a = score_answer(["low", "mid", "high"], [0.0, LN2, 0.0])
    assert a["type"] == "score"
    assert a["score"] == approx(1.0)
    assert a["legend"] == {"0": "low", "1": "mid", "2": "high"}
    assert a["probabilities"] == {"0": approx(0.25), "1": approx(0.5), "2": approx(0.25)}
    # mode 1, D = (1 + 0 + 1) / 3, sum p|i-k| = 0.5 -> 1 - 0.5 / (2/3)
    assert a["confidence"] == approx(0.25)


def test_score_two_levels() -> None:
    a = score_answer(["no", "yes"], [0.0, LN4])
    assert a["score"] == approx(0.8)
    assert a["confidence"] == approx(0.6)  # D = 1/2, sum = 0.2


def test_score_confidence_is_clamped_at_zero_and_mode_ties_go_low() -> None:
    a = score_answer(["a", "b", "c", "d"], [LN4, 0.0, 0.0, LN4])  # p = .4 .1 .1 .4, mode 0
    assert a["score"] == approx(1.5)
    assert a["confidence"] == 0.0  # 1 - (0.1 + 0.2 + 1.2) / 1


def test_score_legend_echoes_levels_unchanged_and_answers_are_json() -> None:
    levels = [{"label": "bad", "weight": 1}, ["ok", 2], "great"]
    a = score_answer(levels, [0.5, 0.25, 0.125])
    assert a["legend"] == {"0": levels[0], "1": levels[1], "2": levels[2]}
    assert json.loads(json.dumps(a)) == a
    assert all(type(p) is float for p in a["probabilities"].values())
