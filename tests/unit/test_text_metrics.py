"""Text evaluation metrics and how the shared gate reads them (no TensorFlow needed)."""
from __future__ import annotations

import numpy as np
import pytest

from components.gate import Thresholds, decide
from components.text import config as C
from components.text.evaluate import model_metrics, task_metrics
from components.text.config import balanced_class_weights


def test_sentiment_metrics_with_pos_vs_neg_and_majority_baseline():
    y = np.array([0, 0, 1, 2, 2, 2, C.UNLABELLED])
    p = np.array([[.8, .1, .1], [.3, .3, .4], [.2, .5, .3], [.1, .2, .7], [.1, .1, .8],
                  [.6, .2, .2], [.9, .05, .05]])
    m = task_metrics(C.SENTIMENT, y, p)
    assert m["n"] == 6                                  # the unlabelled row is skipped
    assert m["accuracy"] == pytest.approx(4 / 6)
    # polar rows: 0,0,2,2,2 -> P(pos) > P(neg)? F,T,T,T,F -> correct: T,F,T,T,F = 3/5
    assert m["pos_vs_neg_accuracy"] == pytest.approx(3 / 5) and m["pos_vs_neg_n"] == 5
    assert m["majority_class"] == "positive"
    assert m["majority_accuracy"] == pytest.approx(3 / 6)
    assert m["majority_macro_f1"] == pytest.approx((0 + 0 + 2 * .5 * 1 / 1.5) / 3)
    assert 0.0 <= m["auc"] <= 1.0 and m["log_loss"] > 0


def test_gate_guards_each_task_separately():
    rng = np.random.default_rng(0)
    n = 200
    rows = {C.SENTIMENT: rng.integers(0, 3, n), C.TOPIC: rng.integers(0, 6, n)}

    def probs(labels, k, skill):
        logits = rng.normal(size=(n, k))
        logits[np.arange(n), labels] += skill
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)

    good = model_metrics(rows, {C.SENTIMENT: probs(rows[C.SENTIMENT], 3, 3.0),
                                C.TOPIC: probs(rows[C.TOPIC], 6, 3.0)})
    # Much better sentiment, much worse topic: the average can still look fine.
    lopsided = model_metrics(rows, {C.SENTIMENT: probs(rows[C.SENTIMENT], 3, 8.0),
                                    C.TOPIC: probs(rows[C.TOPIC], 6, 1.0)})
    assert set(good["slices"]["task"]) == {C.SENTIMENT, C.TOPIC}
    th = Thresholds(min_auc=0.5, max_auc_drop=0.5, max_log_loss_increase=5.0,
                    max_slice_auc_drop=0.02, min_slice_rows=20, min_slice_positives=0)
    d = decide(lopsided, good, th)
    assert not d.blessed and d.failed_rules == ["max_slice_auc_drop[task=topic]"]
    assert decide(good, None, th).blessed


def test_balanced_class_weights():
    w = balanced_class_weights({"sentiment": [10, 30, 60], "topic": [0, 5, 5, 0, 0, 0]})
    assert w["sentiment"] == pytest.approx([100 / 30, 100 / 90, 100 / 180])
    assert w["topic"] == pytest.approx([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
