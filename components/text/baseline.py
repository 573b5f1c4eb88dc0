"""The classical baseline fitted beside every fine-tuned text model: TF-IDF + logistic regression.

Why: a fine-tuned Transformer that does not clearly beat a bag-of-n-grams model is not
worth its cost, and a regression of the fine-tuning (bad checkpoint, broken tokenizer,
collapsed head) shows up at once as "below baseline". The baseline must be cheap,
deterministic and language-agnostic: word 1-2-grams catch the spaced languages, character
2-4-grams (`char_wb`) catch the unspaced ones (Chinese) and misspellings.

The vectorizer is fitted once on all training texts and shared by the tasks; one
LogisticRegression is fitted per task on that task's labelled rows (label -1 = unlabelled).
The output always has `n_classes[task]` columns in class-index order: a class absent from
the training labels gets probability 0, and a task with fewer than two labelled classes
gets its empirical class distribution (uniform if nothing is labelled) for every row.
"""
from __future__ import annotations

import logging

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

log = logging.getLogger("retrain.text.baseline")

MODEL_NAME = "tfidf_word1-2_char2-4_logreg"
WORD_NGRAMS = (1, 2)
CHAR_NGRAMS = (2, 4)
C = 4.0          # TF-IDF rows are L2-normalised: the signal n-grams get small values
MIN_DF = 2
MIN_DF_FROM_N_TEXTS = 20  # smaller corpora keep every n-gram (min_df=1)
MAX_ITER = 2000
RANDOM_STATE = 0
CLASS_WEIGHTS = ("balanced", None)


def describe(*, class_weight: str | None = "balanced", max_features: int = 200_000) -> dict:
    """A JSON-able description of the baseline for reports."""
    return {"model": MODEL_NAME, "word_ngrams": list(WORD_NGRAMS),
            "char_ngrams": list(CHAR_NGRAMS), "char_analyzer": "char_wb",
            "sublinear_tf": True, "min_df": MIN_DF, "max_features": max_features, "C": C,
            "class_weight": class_weight, "max_iter": MAX_ITER,
            "random_state": RANDOM_STATE}


def _vectorizers(max_features: int, min_df: int) -> list[TfidfVectorizer]:
    """Word and char TF-IDF, each capped at half of `max_features` (the total stays under it)."""
    common = {"sublinear_tf": True, "min_df": min_df, "max_features": max(1, max_features // 2)}
    return [TfidfVectorizer(analyzer="word", ngram_range=WORD_NGRAMS,
                            token_pattern=r"(?u)\b\w+\b", **common),
            TfidfVectorizer(analyzer="char_wb", ngram_range=CHAR_NGRAMS, **common)]


def _fit_block(vec: TfidfVectorizer, train_texts: list[str], eval_texts: list[str]):
    """(X_train, X_eval) of one vectorizer, or None when its vocabulary is empty."""
    try:
        X_train = vec.fit_transform(train_texts)
    except ValueError:  # empty vocabulary (no tokens, or none left after min_df)
        return None
    return X_train, vec.transform(eval_texts)


def _featurize(train_texts: list[str], eval_texts: list[str], max_features: int):
    """Word and char blocks side by side, fitted on the training texts. N-grams seen in a
    single text are left out (min_df=2): in unspaced text a whole sentence is one "word",
    and such one-off features let the regression memorise the training rows instead of
    weighting the shared n-grams. A tiny corpus (mostly one-offs) keeps them all."""
    min_df = MIN_DF if len(train_texts) >= MIN_DF_FROM_N_TEXTS else 1
    blocks = [b for vec in _vectorizers(max_features, min_df)
              if (b := _fit_block(vec, train_texts, eval_texts)) is not None]
    if not blocks:
        raise ValueError("baseline: the training texts have no word or character n-grams")
    return (sparse.hstack([b[0] for b in blocks]).tocsr(),
            sparse.hstack([b[1] for b in blocks]).tocsr())


def _class_distribution(y: np.ndarray, k: int) -> np.ndarray:
    """Empirical distribution of the labels over k classes; uniform when there are none."""
    counts = np.bincount(y, minlength=k).astype(np.float64)
    return counts / counts.sum() if counts.sum() else np.full(k, 1.0 / k)


def _fit_task(X_train, y: np.ndarray, X_eval, k: int, task: str,
              class_weight: str | None) -> np.ndarray:
    """Probabilities (n_eval, k) for one task, fitted on its labelled rows only."""
    labelled = y >= 0
    y_l = y[labelled]
    if np.any(y_l >= k):
        raise ValueError(f"baseline: task {task!r} has a label >= n_classes={k}")
    present = np.unique(y_l)
    if present.size < 2:
        log.warning("baseline: task %r has %d labelled class(es) in %d labelled rows; "
                    "predicting the class distribution", task, present.size, y_l.size)
        return np.tile(_class_distribution(y_l, k), (X_eval.shape[0], 1))
    clf = LogisticRegression(C=C, class_weight=class_weight, max_iter=MAX_ITER,
                             random_state=RANDOM_STATE)
    clf.fit(X_train[labelled], y_l)
    out = np.zeros((X_eval.shape[0], k))
    out[:, clf.classes_] = clf.predict_proba(X_eval)
    return out


def fit_predict(train_texts: list[str], train_labels: dict[str, list[int]], eval_texts: list[str],
                n_classes: dict[str, int], *, class_weight: str | None = "balanced",
                max_features: int = 200_000) -> dict[str, np.ndarray]:
    """Per task: probabilities of shape (len(eval_texts), n_classes[task]), columns in
    class-index order, rows summing to 1. Labels are class indices, -1 = unlabelled for
    that task (left out of its fit); a class absent from training gets a column of zeros."""
    if class_weight not in CLASS_WEIGHTS:
        raise ValueError(f"baseline: class_weight must be one of {CLASS_WEIGHTS}, "
                         f"got {class_weight!r}")
    for task, labels in train_labels.items():
        if len(labels) != len(train_texts):
            raise ValueError(f"baseline: task {task!r} has {len(labels)} labels for "
                             f"{len(train_texts)} texts")
    if not eval_texts:
        return {task: np.zeros((0, n_classes[task])) for task in train_labels}
    X_train, X_eval = _featurize(list(train_texts), list(eval_texts), max_features)
    return {task: _fit_task(X_train, np.asarray(labels, dtype=np.int64), X_eval,
                            n_classes[task], task, class_weight)
            for task, labels in train_labels.items()}
