"""The TF-IDF + logistic-regression text baseline on small generated corpora.

Checks that it learns (English-like words and unspaced Chinese characters) and the output
contract: shape, rows summing to 1, zero columns for absent classes, -1 rows ignored,
class distribution for a task with a single class.
"""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from components.text.baseline import describe, fit_predict

NOISE = [f"w{i}" for i in range(60)]
TOPIC_WORDS = [["sport", "match", "goal"], ["price", "market", "stock"], ["film", "actor", "scene"]]
SENTIMENT_WORDS = [["bad", "awful"], ["good", "great"]]
CHINESE = [["喜欢", "很好", "满意"], ["讨厌", "很差", "失望"], ["一般", "还行", "普通"]]
CHINESE_NOISE = "的了是在我有他这中大来上国个到说们为子和你地出道也时年"


def _english(n: int, seed: int):
    """Texts of noise words plus a few class words per task (topic: 3 classes, sentiment: 2)."""
    rng = np.random.default_rng(seed)
    topic = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    sentiment = rng.choice(2, size=n, p=[0.3, 0.7])
    texts = []
    for t, s in zip(topic, sentiment):
        words = list(rng.choice(NOISE, size=8))
        words += list(rng.choice(TOPIC_WORDS[t], size=2)) + [rng.choice(SENTIMENT_WORDS[s])]
        rng.shuffle(words)
        texts.append(" ".join(words))
    return texts, {"topic": topic.tolist(), "sentiment": sentiment.tolist()}


def _chinese(n: int, seed: int):
    """Unspaced texts: noise characters with one two-character class word mixed in (as a
    whole-text token the word analyzer sees nothing; only char n-grams can separate them)."""
    rng = np.random.default_rng(seed)
    y = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    texts = []
    for c in y:
        pieces = list(rng.choice(list(CHINESE_NOISE), size=12)) + [rng.choice(CHINESE[c])]
        rng.shuffle(pieces)
        texts.append("".join(pieces))
    return texts, {"sentiment": y.tolist()}


def _accuracy(probs: np.ndarray, y) -> float:
    return float(np.mean(probs.argmax(1) == np.asarray(y)))


def _majority(y) -> float:
    return float(np.bincount(y).max() / len(y))


N_CLASSES = {"topic": 3, "sentiment": 2}


def test_english_two_tasks_beat_majority_class():
    train_x, train_y = _english(400, seed=0)
    eval_x, eval_y = _english(200, seed=1)
    probs = fit_predict(train_x, train_y, eval_x, N_CLASSES)
    for task in N_CLASSES:
        assert probs[task].shape == (200, N_CLASSES[task])
        assert np.allclose(probs[task].sum(1), 1.0)
        assert _accuracy(probs[task], eval_y[task]) > _majority(eval_y[task]) + 0.2


def test_unspaced_chinese_is_separable_by_char_ngrams():
    train_x, train_y = _chinese(300, seed=2)
    eval_x, eval_y = _chinese(150, seed=3)
    probs = fit_predict(train_x, train_y, eval_x, {"sentiment": 3}, class_weight=None)
    assert _accuracy(probs["sentiment"], eval_y["sentiment"]) > _majority(eval_y["sentiment"]) + 0.3


def test_deterministic():
    train_x, train_y = _english(200, seed=4)
    eval_x, _ = _english(50, seed=5)
    a = fit_predict(train_x, train_y, eval_x, N_CLASSES)
    b = fit_predict(train_x, train_y, eval_x, N_CLASSES)
    assert all(np.array_equal(a[t], b[t]) for t in N_CLASSES)


def test_absent_class_gets_a_zero_column():
    train_x, train_y = _english(300, seed=6)
    keep = [i for i, t in enumerate(train_y["topic"]) if t != 1]
    texts = [train_x[i] for i in keep]
    labels = {"topic": [train_y["topic"][i] for i in keep]}
    eval_x, _ = _english(60, seed=7)
    probs = fit_predict(texts, labels, eval_x, {"topic": 3})["topic"]
    assert probs.shape == (60, 3)
    assert np.all(probs[:, 1] == 0.0)
    assert np.allclose(probs.sum(1), 1.0)


def test_unlabelled_rows_are_left_out_of_the_fit():
    """A second copy of the corpus with every sentiment label flipped: fitted, it cancels
    the signal; marked -1 (unlabelled), it must change nothing that matters."""
    train_x, train_y = _english(300, seed=8)
    eval_x, eval_y = _english(100, seed=9)
    y = train_y["sentiment"]
    clean = fit_predict(train_x, {"sentiment": y}, eval_x, N_CLASSES)["sentiment"]

    def doubled(copy_labels):
        return fit_predict(train_x + train_x, {"sentiment": y + copy_labels}, eval_x,
                           N_CLASSES)["sentiment"]

    ignored, flipped = doubled([-1] * len(y)), doubled([1 - v for v in y])
    assert ignored.shape == (100, 2) and np.allclose(ignored.sum(1), 1.0)
    assert np.array_equal(ignored.argmax(1), clean.argmax(1))
    assert np.allclose(ignored, clean, atol=0.05)
    assert not np.allclose(flipped, clean, atol=0.05)     # the check can tell


def test_only_unlabelled_rows_change_nothing_for_other_tasks():
    train_x, train_y = _english(200, seed=10)
    eval_x, _ = _english(40, seed=11)
    labels = {"topic": train_y["topic"], "sentiment": [-1] * 200}
    probs = fit_predict(train_x, labels, eval_x, N_CLASSES)
    assert np.allclose(probs["sentiment"], 0.5)          # nothing labelled: uniform
    assert probs["topic"].shape == (40, 3)


def test_single_class_task_returns_the_class_distribution(caplog):
    train_x, _ = _english(100, seed=12)
    eval_x, _ = _english(30, seed=13)
    labels = {"sentiment": [1] * 60 + [-1] * 40}
    with caplog.at_level(logging.WARNING, logger="retrain.text.baseline"):
        probs = fit_predict(train_x, labels, eval_x, {"sentiment": 2})["sentiment"]
    assert np.array_equal(probs, np.tile([0.0, 1.0], (30, 1)))
    assert any("sentiment" in r.getMessage() for r in caplog.records)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="class_weight"):
        fit_predict(["a b"], {"t": [0]}, ["a"], {"t": 2}, class_weight="auto")
    with pytest.raises(ValueError, match="labels"):
        fit_predict(["a b", "c d"], {"t": [0]}, ["a"], {"t": 2})


def test_describe_is_json_able():
    d = describe()
    assert d["model"] == "tfidf_word1-2_char2-4_logreg"
    assert json.loads(json.dumps(d)) == d


def test_a_tiny_corpus_falls_back_to_all_ngrams():
    """Every n-gram is seen once here (no min_df=2 vocabulary): the fit must still work."""
    probs = fit_predict(["sport match", "price market"], {"topic": [0, 1]},
                        ["sport", "market"], {"topic": 3})["topic"]
    assert probs.shape == (2, 3) and np.all(probs[:, 2] == 0.0)
    assert list(probs.argmax(1)) == [0, 1]


def test_no_eval_texts_gives_empty_arrays():
    probs = fit_predict(["a b", "c d"], {"t": [0, 1]}, [], {"t": 3})
    assert probs["t"].shape == (0, 3)
