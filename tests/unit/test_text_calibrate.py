"""Decision calibration of the text heads (per-class logit offsets) on synthetic scores.

No TensorFlow: the fitting is numpy; the serving graph's twin is tested in
tests/integration/test_text_model.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from components import metrics as MX
from components.text.calibrate import apply_offsets, fit_offsets, macro_f1
from components.text.config import balanced_class_weights, class_weights_for


def _biased_scores(n: int, k: int, bias, seed: int):
    """Scores of a decent classifier whose decisions lean towards `bias` (what class
    weighting does): true-class logit +2, noise, plus a per-class shift."""
    rng = np.random.default_rng(seed)
    y = rng.choice(k, size=n, p=np.linspace(1, 3, k) / np.linspace(1, 3, k).sum())
    logits = rng.normal(0, 1.0, (n, k))
    logits[np.arange(n), y] += 2.0
    logits += np.asarray(bias)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True), y


def test_offsets_undo_a_decision_bias_and_generalise():
    bias = [1.5, 0.0, -0.5]
    p_dev, y_dev = _biased_scores(1500, 3, bias, seed=0)
    p_test, y_test = _biased_scores(1500, 3, bias, seed=1)
    fit = fit_offsets(p_dev, y_dev)
    b = np.asarray(fit["offsets"])
    assert b.shape == (3,) and b[0] == 0.0
    assert fit["n"] == 1500 and fit["macro_f1_after"] > fit["macro_f1_before"] + 0.03
    # the bias is pushed back (only differences matter): class 0 was favoured most and
    # class 2 least, so 0 = b[0] < b[1] < b[2] (not exactly -bias: macro-F1 also weighs
    # the classes' unequal frequencies)
    assert 0.5 < b[1] < b[2]
    before = macro_f1(y_test, p_test.argmax(1), 3)
    after = macro_f1(y_test, apply_offsets(p_test, b).argmax(1), 3)
    assert after > before + 0.03                      # on rows it never saw


def test_apply_offsets_is_a_softmax_of_shifted_log_probs():
    p, _ = _biased_scores(50, 3, [0, 0, 0], seed=2)
    b = [0.0, 0.7, -0.1]
    q = apply_offsets(p, b)
    np.testing.assert_allclose(q.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(q.argmax(1), (np.log(p) + b).argmax(1))
    np.testing.assert_allclose(apply_offsets(p, [0, 0, 0]), p, atol=1e-12)
    np.testing.assert_allclose(apply_offsets(p, [2, 2, 2]), p, atol=1e-12)  # only differences


def test_coordinate_ascent_for_many_classes_and_unlabelled_rows():
    p, y = _biased_scores(1200, 6, [1.0, 0, 0, -1.0, 0, 0.5], seed=3)
    y = y.copy()
    y[:100] = -1                                     # unlabelled rows are ignored
    fit = fit_offsets(p, y)
    assert fit["n"] == 1100 and len(fit["offsets"]) == 6
    assert fit["macro_f1_after"] >= fit["macro_f1_before"]
    keep = y >= 0
    assert fit["macro_f1_after"] == pytest.approx(
        macro_f1(y[keep], apply_offsets(p[keep], fit["offsets"]).argmax(1), 6))


def test_a_model_already_right_keeps_zero_offsets():
    y = np.array([0, 1, 2, 2, 1, 0])
    p = np.full((6, 3), 0.1)
    p[np.arange(6), y] = 0.8
    fit = fit_offsets(p, y)
    assert fit["offsets"] == [0.0, 0.0, 0.0] and fit["macro_f1_after"] == 1.0


def test_macro_f1_matches_the_shared_metric():
    rng = np.random.default_rng(4)
    y, pred = rng.integers(0, 4, 300), rng.integers(0, 4, 300)
    assert macro_f1(y, pred, 4) == pytest.approx(MX.macro_f1(y, pred, 4))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="no labelled rows"):
        fit_offsets(np.full((2, 3), 1 / 3), [-1, -1])
    with pytest.raises(ValueError, match=r"\[n, k\]"):
        fit_offsets(np.full((2, 3), 1 / 3), [0, 1, 2])
    with pytest.raises(ValueError, match="out of range"):
        fit_offsets(np.full((2, 3), 1 / 3), [0, 3])


def test_sqrt_class_weighting_is_softer_than_balanced():
    counts = {"sentiment": [10, 30, 60]}
    bal = balanced_class_weights(counts)["sentiment"]
    sq = class_weights_for(counts, "sqrt")["sentiment"]
    np.testing.assert_allclose(sq, np.sqrt(bal))
    assert class_weights_for(counts, True) == balanced_class_weights(counts)
    assert class_weights_for(counts, "none") is None and class_weights_for(counts, False) is None
    with pytest.raises(ValueError, match="class_weighting"):
        class_weights_for(counts, "inverse")
