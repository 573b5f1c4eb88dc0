"""components.metrics against hand-computed values and a slow pairwise reference."""
from __future__ import annotations

import math

import numpy as np
import pytest

from components import metrics


def pairwise_auc(labels, scores) -> float:
    pos = [s for y, s in zip(labels, scores) if y == 1]
    neg = [s for y, s in zip(labels, scores) if y == 0]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def test_auc_perfect_reversed_and_ties():
    assert metrics.auc([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9]) == 1.0
    assert metrics.auc([0, 0, 1, 1], [0.9, 0.8, 0.2, 0.1]) == 0.0
    assert metrics.auc([0, 1, 0, 1], [0.5, 0.5, 0.5, 0.5]) == 0.5
    # One positive above one negative, tied with the other: (1 + 0.5) / 2.
    assert metrics.auc([1, 0, 0], [0.7, 0.7, 0.1]) == pytest.approx(0.75)


def test_auc_matches_pairwise_reference_on_random_data():
    rng = np.random.default_rng(0)
    for _ in range(5):
        y = rng.integers(0, 2, 300)
        s = np.round(rng.random(300) + 0.3 * y, 1)  # rounding makes many ties
        assert metrics.auc(y, s) == pytest.approx(pairwise_auc(y, s), abs=1e-12)


def test_auc_accepts_bools_and_rejects_bad_input():
    assert metrics.auc(np.array([False, True]), [0.2, 0.4]) == 1.0
    with pytest.raises(ValueError, match="both classes"):
        metrics.auc([1, 1, 1], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="length"):
        metrics.auc([0, 1], [0.1])
    with pytest.raises(ValueError, match="0/1"):
        metrics.auc([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="NaN"):
        metrics.auc([0, 1], [0.1, float("nan")])
    with pytest.raises(ValueError, match="no examples"):
        metrics.auc([], [])


def test_log_loss_hand_computed_and_clipped():
    expected = -(math.log(0.8) + math.log(1 - 0.3)) / 2
    assert metrics.log_loss([1, 0], [0.8, 0.3]) == pytest.approx(expected)
    # A confident wrong answer costs -log(1e-7), not infinity.
    assert metrics.log_loss([1], [0.0]) == pytest.approx(-math.log(1e-7))


def test_calibration_and_normalized_entropy():
    y = [1, 0, 0, 0]
    assert metrics.calibration(y, [0.5, 0.5, 0.5, 0.5]) == pytest.approx(2.0)
    # Predicting the base rate everywhere has normalized entropy exactly 1.
    assert metrics.normalized_entropy(y, [0.25] * 4) == pytest.approx(1.0)
    assert metrics.normalized_entropy(y, [0.9, 0.1, 0.1, 0.1]) < 1.0
    with pytest.raises(ValueError):
        metrics.calibration([0, 0], [0.1, 0.2])
    with pytest.raises(ValueError):
        metrics.normalized_entropy([1, 1], [0.1, 0.2])


def test_binary_metrics_dict():
    m = metrics.binary_metrics([1, 0, 0, 1], [0.9, 0.2, 0.4, 0.6])
    assert m["n"] == 4 and m["positives"] == 2 and m["ctr"] == 0.5
    assert m["auc"] == 1.0
    assert m["calibration"] == pytest.approx(1.05 / 1.0)
    assert set(m) >= {"n", "positives", "ctr", "auc", "log_loss", "calibration",
                      "normalized_entropy"}
    # One class only: undefined metrics are None, not an exception.
    m = metrics.binary_metrics([0, 0], [0.1, 0.2])
    assert m["auc"] is None and m["calibration"] is None and m["normalized_entropy"] is None
    assert m["log_loss"] > 0
