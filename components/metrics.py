"""Binary-classification metrics shared by the data generator and the evaluation stage.

The generator reports Bayes-optimal figures (the true click probability scored against
the drawn labels) and evaluation scores models with the very same functions, so "the
model is within 0.03 AUC of the best possible" compares like with like. Numpy only:
no scikit-learn or TensorFlow, so any step (and its tests) can import it cheaply.
"""
from __future__ import annotations

import math

import numpy as np

EPS = 1e-7


def _as_arrays(labels, scores, what: str = "scores") -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels)
    s = np.asarray(scores, dtype=np.float64)
    if y.ndim != 1 or s.ndim != 1:
        raise ValueError(f"labels and {what} must be 1-D, got shapes {y.shape} and {s.shape}")
    if y.shape != s.shape:
        raise ValueError(f"labels and {what} differ in length: {y.shape[0]} vs {s.shape[0]}")
    if y.size == 0:
        raise ValueError("no examples")
    if y.dtype == bool:
        y = y.astype(np.int8)
    bad = ~np.isin(y, (0, 1))
    if bad.any():
        raise ValueError(f"labels must be 0/1, got e.g. {y[bad][0]!r}")
    if np.isnan(s).any():
        raise ValueError(f"{what} contain NaN")
    return y.astype(np.float64), s


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks; tied values share the mean of the ranks they occupy."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    n = ordered.size
    # Start index of each run of equal values, and the run lengths.
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    lengths = np.diff(np.r_[starts, n])
    # Ranks start+1 .. start+length; their mean is start + (length + 1) / 2.
    run_rank = starts + (lengths + 1) / 2.0
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.repeat(run_rank, lengths)
    return ranks


def auc(labels, scores) -> float:
    """Area under the ROC curve (Mann-Whitney U); ties count one half.

    Raises ValueError if the labels hold only one class (the AUC is undefined).
    """
    y, s = _as_arrays(labels, scores)
    n_pos = float(y.sum())
    n_neg = float(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"AUC needs both classes, got {int(n_pos)} positives and "
                         f"{int(n_neg)} negatives")
    ranks = _average_ranks(s)
    u = float(ranks[y == 1].sum()) - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


def log_loss(labels, probs) -> float:
    """Mean binary cross-entropy in nats, probabilities clipped to [1e-7, 1 - 1e-7]."""
    y, p = _as_arrays(labels, probs, "probs")
    p = np.clip(p, EPS, 1.0 - EPS)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def calibration(labels, probs) -> float:
    """mean(prob) / mean(label): 1.0 is calibrated on average, > 1 over-predicts.

    Raises ValueError if there are no positives (the ratio is undefined).
    """
    y, p = _as_arrays(labels, probs, "probs")
    base = float(y.mean())
    if base == 0.0:
        raise ValueError("calibration needs at least one positive label")
    return float(p.mean()) / base


def _entropy(rate: float) -> float:
    return -(rate * math.log(rate) + (1.0 - rate) * math.log(1.0 - rate))


def normalized_entropy(labels, probs) -> float:
    """Log loss divided by the entropy of the base rate (predicting the mean CTR).

    Below 1.0 the model beats the constant predictor. Raises ValueError if the labels
    hold only one class (the base-rate entropy is zero).
    """
    y, _ = _as_arrays(labels, probs, "probs")
    base = float(y.mean())
    if base in (0.0, 1.0):
        raise ValueError("normalized entropy needs both classes")
    return log_loss(labels, probs) / _entropy(base)


def binary_metrics(labels, probs) -> dict:
    """All of the above plus counts, as a JSON-friendly dict.

    A metric that is undefined on these labels (for example AUC with one class) is
    None rather than an exception, so a small evaluation slice can still be reported.
    """
    y, p = _as_arrays(labels, probs, "probs")
    out: dict = {"n": int(y.size), "positives": int(y.sum()), "ctr": float(y.mean()),
                 "mean_prob": float(p.mean())}
    out["log_loss"] = log_loss(y, p)
    for name, fn in (("auc", auc), ("calibration", calibration),
                     ("normalized_entropy", normalized_entropy)):
        try:
            out[name] = fn(y, p)
        except ValueError:
            out[name] = None
    return out
