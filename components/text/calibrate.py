"""Decision calibration of the text heads: per-class logit offsets fitted on a dev slice.

Why: class-weighted training moves the decision boundaries towards the rare classes (the
weights say "a neutral review costs 3x a positive one"), and how far is not what
maximises macro-F1 on real data: with fully balanced weights the 3-class sentiment head
sent most neutral reviews to "negative". A per-class additive offset on the log
probabilities (prior correction) moves the boundaries back without retraining. The
offsets are fitted to maximise macro-F1 on a *dev* slice of the eval split (texts never
trained on, disjoint from the early-stopping texts and from the texts the quality figures
are computed on), stored in the model's `labels.json`, and applied inside the exported
serving signature, so the served probabilities are softmax(log p + offsets) and the
argmax decisions are the ones that were measured.

Numpy only (macro-F1 from components.metrics); the fitting is a grid search: exhaustive
over the free offsets for up to three classes (the first class's offset is pinned to 0,
only differences matter), coordinate ascent for more. Ties keep the offsets closest to
0, so a flat optimum does not drift.
"""
from __future__ import annotations

import itertools

import numpy as np

from components.metrics import macro_f1_from_confusion

LOG_FLOOR = 1e-30     # probabilities are floored before the log (float32 softmax may give 0)
DEFAULT_GRID = tuple(np.round(np.arange(-3.0, 3.0001, 0.1), 2).tolist())


def log_probs(probs) -> np.ndarray:
    return np.log(np.maximum(np.asarray(probs, dtype=np.float64), LOG_FLOOR))


def apply_offsets(probs, offsets) -> np.ndarray:
    """softmax(log p + offsets), row-wise (numpy twin of the serving graph's op)."""
    z = log_probs(probs) + np.asarray(offsets, dtype=np.float64)
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def macro_f1(y, pred, k: int) -> float:
    """Unweighted mean F1 over the k classes (a class with no true and no predicted rows
    scores 0, like components.metrics.macro_f1); fast path for the grid search."""
    y, pred = np.asarray(y, dtype=np.int64), np.asarray(pred, dtype=np.int64)
    return float(macro_f1_from_confusion(np.bincount(y * k + pred, minlength=k * k)
                                         .reshape(k, k)))


def _score(lp: np.ndarray, y: np.ndarray, b: np.ndarray, k: int) -> float:
    return macro_f1(y, np.argmax(lp + b, axis=1), k)


def fit_offsets(probs, y, grid=DEFAULT_GRID, passes: int = 3) -> dict:
    """Offsets (one per class, the first 0) maximising macro-F1 of argmax(log p + b).

    `probs`: [n, k] probabilities; `y`: [n] class indices (rows with y < 0 are ignored).
    Returns {"offsets", "macro_f1_before", "macro_f1_after", "n"}.
    """
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    if p.ndim != 2 or p.shape[0] != y.shape[0]:
        raise ValueError(f"probs must be [n, k] with n = len(y); got {p.shape} and {y.shape}")
    keep = y >= 0
    p, y = p[keep], y[keep]
    n, k = p.shape
    if n == 0:
        raise ValueError("no labelled rows to fit offsets on")
    if y.max() >= k:
        raise ValueError(f"label {int(y.max())} out of range for {k} classes")
    grid = np.asarray(sorted(set(float(g) for g in grid) | {0.0}), dtype=np.float64)
    lp = log_probs(p)
    zero = np.zeros(k)
    before = _score(lp, y, zero, k)
    best_b, best = zero.copy(), before

    def better(score, b):
        # higher macro-F1 wins; on a tie, the smaller offsets (closer to the raw model)
        return score > best + 1e-12 or (abs(score - best) <= 1e-12
                                        and np.abs(b).sum() < np.abs(best_b).sum() - 1e-12)

    if k <= 3:
        for free in itertools.product(grid, repeat=k - 1):
            b = np.concatenate([[0.0], free])
            s = _score(lp, y, b, k)
            if better(s, b):
                best, best_b = s, b
    else:
        for _ in range(passes):
            changed = False
            for c in range(1, k):
                for g in grid:
                    b = best_b.copy()
                    b[c] = g
                    s = _score(lp, y, b, k)
                    if better(s, b):
                        best, best_b, changed = s, b, True
            if not changed:
                break
    return {"offsets": [round(float(x), 4) for x in best_b], "macro_f1_before": before,
            "macro_f1_after": best, "n": int(n)}
