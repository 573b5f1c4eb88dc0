"""Text evaluation metrics and how the shared gate reads them (no TensorFlow needed)."""
from __future__ import annotations

import numpy as np
import pytest

from components.gate import Thresholds, decide
from components import metrics as MX
from components.text import config as C
from components.text import task_config as T
from components.text.evaluate import model_metrics, task_metrics
from components.text.config import balanced_class_weights


def test_sentiment_metrics_with_pos_vs_neg_and_majority_baseline():
    y = np.array([0, 0, 1, 2, 2, 2, C.UNLABELLED])
    p = np.array([[.8, .1, .1], [.3, .3, .4], [.2, .5, .3], [.1, .2, .7], [.1, .1, .8],
                  [.6, .2, .2], [.9, .05, .05]])
    m = task_metrics(list(C.SENTIMENT_LABELS), y, p)
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

    cfg = T.default()
    good = model_metrics(rows, {C.SENTIMENT: probs(rows[C.SENTIMENT], 3, 3.0),
                                C.TOPIC: probs(rows[C.TOPIC], 6, 3.0)}, cfg)
    # Much better sentiment, much worse topic: the average can still look fine.
    lopsided = model_metrics(rows, {C.SENTIMENT: probs(rows[C.SENTIMENT], 3, 8.0),
                                    C.TOPIC: probs(rows[C.TOPIC], 6, 1.0)}, cfg)
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


def test_binary_task_metrics_equal_scikit_learn():
    """A 2-label task is scored as binary: macro-F1 over its two classes and the AUC of the
    positive class, equal to scikit-learn's on the same predictions (unlabelled rows out)."""
    from sklearn.metrics import accuracy_score, f1_score, log_loss, roc_auc_score

    rng = np.random.default_rng(3)
    n = 300
    y = rng.integers(0, 2, n)
    p1 = np.clip(0.5 + 0.35 * (2 * y - 1) * rng.random(n) + rng.normal(0, 0.2, n), 0.01, 0.99)
    probs = np.stack([1 - p1, p1], axis=1)
    y_with_gaps = y.copy()
    y_with_gaps[:20] = C.UNLABELLED
    m = task_metrics(["spam", "ham"], y_with_gaps, probs, positive=1)
    keep = slice(20, None)
    pred = probs[keep].argmax(axis=1)
    assert m["n"] == n - 20 and m["positive_class"] == "ham"
    assert m["macro_f1"] == pytest.approx(f1_score(y[keep], pred, average="macro"))
    assert m["accuracy"] == pytest.approx(accuracy_score(y[keep], pred))
    assert m["auc"] == pytest.approx(roc_auc_score(y[keep], probs[keep, 1]))
    assert m["log_loss"] == pytest.approx(log_loss(y[keep], probs[keep]), rel=1e-6)
    assert len(m["per_class"]) == 2                      # no phantom third class
    # The positive class can be the first label too (config `positive:`).
    m0 = task_metrics(["spam", "ham"], y, probs, positive=0)
    assert m0["auc"] == pytest.approx(roc_auc_score(1 - y, probs[:, 0]))
    assert MX.macro_f1(y, probs.argmax(axis=1), 2) == pytest.approx(
        f1_score(y, probs.argmax(axis=1), average="macro"))


def test_text_rules_demand_the_classical_baseline_and_config_limits():
    from components.text.evaluate import task_rules

    cfg = T.from_dict({"example_id": "id", "text": "t", "tasks": {
        "queue": {"labels": ["a", "b"], "min_macro_f1": 0.7, "max_macro_f1_drop": 0.02}}})
    # Enough evidence (the gate's default minimums: 200 labelled texts, 5 of each class).
    cand = {"tasks": {"queue": {"macro_f1": 0.80, "n": 400,
                                "per_class": {"a": {"support": 150}, "b": {"support": 250}}}}}
    rules = {r["name"]: r for r in task_rules(cfg, cand, {"tasks": {"queue": {"macro_f1": 0.81}}},
                                              {"tasks": {"queue": {"macro_f1": 0.85}}})}
    assert rules["min_macro_f1[queue]"]["passed"] is True
    assert rules["max_macro_f1_drop[queue]"]["passed"] is True     # 0.80 >= 0.81 - 0.02
    assert rules["beats_classical_baseline[queue]"]["passed"] is False
    decision = decide({"auc": 0.9, "log_loss": 0.3}, None, Thresholds(min_auc=0.5),
                      extra_rules=list(rules.values()))
    assert not decision.blessed
    assert decision.failed_rules == ["beats_classical_baseline[queue]"]
    assert any("TF-IDF" in r for r in decision.reasons)
