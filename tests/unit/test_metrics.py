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


# ------------------------------------------------------------------ curves

def test_roc_curve_matches_scikit_learn_and_its_area_is_the_auc():
    from sklearn.metrics import roc_curve as sk_roc
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 500)
    s = np.round(rng.random(500) + 0.4 * y, 2)  # ties
    curve = metrics.roc_curve(y, s)
    fpr, tpr, _ = sk_roc(y, s, drop_intermediate=False)
    np.testing.assert_allclose(curve["fpr"], fpr)
    np.testing.assert_allclose(curve["tpr"], tpr)
    assert np.trapezoid(curve["tpr"], curve["fpr"]) == pytest.approx(metrics.auc(y, s))
    thin = metrics.roc_curve(y, s, max_points=20)
    assert len(thin["fpr"]) <= 20
    assert (thin["fpr"][0], thin["tpr"][0]) == (0.0, 0.0)
    assert (thin["fpr"][-1], thin["tpr"][-1]) == (1.0, 1.0)
    with pytest.raises(ValueError, match="both classes"):
        metrics.roc_curve([1, 1], [0.2, 0.3])


def test_reliability_curve_bins():
    y = np.array([0, 0, 1, 0, 1, 1, 0, 1])
    p = np.array([0.1, 0.1, 0.2, 0.2, 0.7, 0.8, 0.8, 0.9])
    q = metrics.reliability_curve(y, p, n_bins=2)  # quantile: 4 rows per bin
    assert q["count"] == [4, 4]
    assert q["mean_pred"] == pytest.approx([0.15, 0.8])
    assert q["observed"] == pytest.approx([0.25, 0.75])
    u = metrics.reliability_curve(y, p, n_bins=10, strategy="uniform")
    assert sum(u["count"]) == 8 and 0 not in u["count"]  # empty bins dropped
    assert u["mean_pred"] == sorted(u["mean_pred"])
    with pytest.raises(ValueError, match="strategy"):
        metrics.reliability_curve(y, p, strategy="bogus")


# ------------------------------------------------------------------ slices

def test_slice_metrics_per_value_largest_first():
    y = [1, 0, 1, 0, 0, 0]
    p = [0.9, 0.1, 0.4, 0.6, 0.2, 0.3]
    out = metrics.slice_metrics(y, p, {"device": ["ios", "ios", "web", "web", "web", "tv"]})
    assert list(out["device"]) == ["web", "ios", "tv"]
    assert out["device"]["web"]["n"] == 3 and out["device"]["web"]["auc"] == 0.5
    assert out["device"]["ios"]["auc"] == 1.0
    assert out["device"]["tv"]["auc"] is None  # one class: undefined, not an error
    with pytest.raises(ValueError, match="slice 'x'"):
        metrics.slice_metrics(y, p, {"x": ["a"]})


# ------------------------------------------------------------------ bootstrap

def _data(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    s = np.clip(0.5 + 0.25 * (y - 0.5) + rng.normal(0, 0.2, n), 0.01, 0.99)
    return y, np.round(s, 2)


def test_weighted_auc_equals_auc_of_the_explicit_resample():
    y, s = _data(300)
    weights = next(metrics._bootstrap_weights(y.size, 5, seed=1))
    got = metrics._weighted_auc(y.astype(float), s, weights)
    for row, value in zip(weights, got):
        idx = np.repeat(np.arange(y.size), row.astype(int))
        assert value == pytest.approx(metrics.auc(y[idx], s[idx]), abs=1e-12)


def test_bootstrap_ci_is_seeded_and_brackets_the_estimate():
    y, s = _data()
    a = metrics.bootstrap_ci(y, s, n_resamples=200, seed=5)
    assert a == metrics.bootstrap_ci(y, s, n_resamples=200, seed=5)
    assert a != metrics.bootstrap_ci(y, s, n_resamples=200, seed=6)
    for key in ("auc", "log_loss"):
        ci = a[key]
        assert ci["low"] < ci["estimate"] < ci["high"] and ci["valid"] == 200
    assert a["auc"]["estimate"] == pytest.approx(metrics.auc(y, s))
    assert a["log_loss"]["estimate"] == pytest.approx(metrics.log_loss(y, s))
    # Width shrinks like 1/sqrt(n): 4x the rows, about half the width.
    y4, s4 = _data(8000)
    b = metrics.bootstrap_ci(y4, s4, n_resamples=200, seed=5)
    ratio = (b["auc"]["high"] - b["auc"]["low"]) / (a["auc"]["high"] - a["auc"]["low"])
    assert 0.35 < ratio < 0.7


def test_bootstrap_result_does_not_depend_on_the_block_size(monkeypatch):
    y, s = _data(1000)
    whole = metrics.bootstrap_ci(y, s, n_resamples=50, seed=2)
    monkeypatch.setattr(metrics, "_BOOTSTRAP_BLOCK_CELLS", 3000)  # 3 resamples per block
    # Same random stream, consumed in smaller blocks: the same resamples.
    blocked = metrics.bootstrap_ci(y, s, n_resamples=50, seed=2)
    assert blocked["auc"] == pytest.approx(whole["auc"])


def test_paired_bootstrap_delta():
    y, s = _data()
    same = metrics.bootstrap_ci(y, s, baseline_probs=s, n_resamples=100)
    assert same["auc_delta"]["low"] == same["auc_delta"]["high"] == 0.0
    worse = np.clip(s + np.random.default_rng(9).normal(0, 0.3, s.size), 0.01, 0.99)
    d = metrics.bootstrap_ci(y, s, baseline_probs=worse, n_resamples=100)
    assert d["auc_delta"]["low"] > 0  # candidate clearly better than this baseline
    assert d["auc_delta"]["estimate"] == pytest.approx(metrics.auc(y, s) - metrics.auc(y, worse))
    # Paired intervals are tighter than the naive difference of two intervals.
    width = d["auc_delta"]["high"] - d["auc_delta"]["low"]
    base = metrics.bootstrap_ci(y, worse, n_resamples=100)
    assert width < (d["auc"]["high"] - d["auc"]["low"]) + (base["auc"]["high"] - base["auc"]["low"])


def test_bootstrap_tiny_sets_and_bad_arguments():
    ci = metrics.bootstrap_ci([1, 0], [0.9, 0.1], n_resamples=50)
    assert 0 < ci["auc"]["valid"] < 50  # one-class resamples left out of the AUC interval
    one_class = metrics.bootstrap_ci([0, 0, 0], [0.1, 0.2, 0.3], n_resamples=10)
    assert one_class["auc"]["low"] is None and one_class["auc"]["estimate"] is None
    with pytest.raises(ValueError, match="n_resamples"):
        metrics.bootstrap_ci([0, 1], [0.1, 0.9], n_resamples=1)
    with pytest.raises(ValueError, match="level"):
        metrics.bootstrap_ci([0, 1], [0.1, 0.9], level=1.5)


# ------------------------------------------------------------------ text classification

def test_text_metrics_match_scikit_learn():
    from sklearn import metrics as sk
    rng = np.random.default_rng(4)
    t = rng.integers(0, 4, 400)
    p = np.where(rng.random(400) < 0.6, t, rng.integers(0, 4, 400))
    assert metrics.accuracy(t, p) == pytest.approx(sk.accuracy_score(t, p))
    assert metrics.macro_f1(t, p) == pytest.approx(sk.f1_score(t, p, average="macro"))
    np.testing.assert_array_equal(metrics.confusion_matrix(t, p), sk.confusion_matrix(t, p))
    per = metrics.precision_recall_f1(t, p)
    np.testing.assert_allclose(per["precision"], sk.precision_score(t, p, average=None))
    np.testing.assert_allclose(per["recall"], sk.recall_score(t, p, average=None))
    assert per["support"] == np.bincount(t).tolist()


def test_text_metrics_absent_classes_scores_and_names():
    t = [0, 0, 1, 1]
    p = [0, 1, 1, 1]
    m = metrics.classification_metrics(t, p, class_names=["neg", "pos", "neutral"])
    assert m["classes"] == ["neg", "pos", "neutral"]
    assert m["accuracy"] == 0.75
    assert m["confusion_matrix"] == [[1, 1, 0], [0, 2, 0], [0, 0, 0]]
    assert m["per_class"]["neg"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3),
                                     "support": 2}
    assert m["per_class"]["neutral"]["f1"] == 0.0  # never true, never predicted: 0, no error
    assert m["macro_f1"] == pytest.approx((2 / 3 + 0.8 + 0.0) / 3)
    # 2-D scores: the arg max is the prediction.
    scores = np.array([[0.9, 0.1], [0.4, 0.6], [0.2, 0.8], [0.3, 0.7]])
    assert metrics.accuracy(t, scores) == 0.75
    assert metrics.confusion_matrix(t, scores, n_classes=2).tolist() == [[1, 1], [0, 2]]
    with pytest.raises(ValueError, match="class indices"):
        metrics.accuracy([0.5, 1.0], [0, 1])
    with pytest.raises(ValueError, match="n_classes"):
        metrics.confusion_matrix([0, 3], [0, 1], n_classes=2)
    with pytest.raises(ValueError, match="length"):
        metrics.accuracy([0, 1], [0])


def test_macro_f1_interval_is_the_row_bootstrap_of_the_confusion_matrix():
    rng = np.random.default_rng(5)
    t = rng.integers(0, 3, 3000)
    p = np.where(rng.random(3000) < 0.7, t, rng.integers(0, 3, 3000))
    cm = metrics.confusion_matrix(t, p, n_classes=3)
    ci = metrics.macro_f1_interval(cm, n_resamples=1000, seed=1)
    assert ci["estimate"] == pytest.approx(metrics.macro_f1(t, p))
    assert ci["rows"] == 3000 and ci["low"] < ci["estimate"] < ci["high"]
    # Same spread as resampling the rows themselves (the slow way).
    slow = []
    for _ in range(300):
        i = rng.integers(0, 3000, 3000)
        slow.append(metrics.macro_f1(t[i], p[i], n_classes=3))
    assert ci["std"] == pytest.approx(np.std(slow, ddof=1), rel=0.25)
    # 4x the rows: about half the width.
    wide = ci["high"] - ci["low"]
    ci4 = metrics.macro_f1_interval(cm * 4, n_resamples=1000, seed=1)
    assert (ci4["high"] - ci4["low"]) == pytest.approx(wide / 2, rel=0.25)
    with pytest.raises(ValueError, match="square"):
        metrics.macro_f1_interval([[1, 2, 3]])
    with pytest.raises(ValueError, match="empty"):
        metrics.macro_f1_interval([[0, 0], [0, 0]])
