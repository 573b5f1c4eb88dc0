"""Metrics shared by the data generator, the evaluation stage, the gate and the report.

The generator reports Bayes-optimal figures (the true click probability scored against
the drawn labels) and evaluation scores models with the very same functions, so "the
model is within 0.03 AUC of the best possible" compares like with like. Slices,
bootstrap intervals and curves live here too so the gate and the HTML report read one
definition; text-classification metrics serve the text family. Numpy only: no
scikit-learn or TensorFlow, so any step (and its tests) can import it cheaply.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

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


def base_rate_entropy(rate: float) -> float:
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
    return log_loss(labels, probs) / base_rate_entropy(base)


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


# ------------------------------------------------------------------ curves (for the report)

def roc_curve(labels, scores, max_points: int | None = None) -> dict:
    """ROC points (fpr, tpr) from (0, 0) to (1, 1), one per distinct score, descending.

    `max_points` thins a long curve to about that many points (first and last kept), so
    it stays small in eval.json and in a plot. Needs both classes.
    """
    y, s = _as_arrays(labels, scores)
    n_pos = float(y.sum())
    n_neg = float(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        raise ValueError("ROC curve needs both classes")
    order = np.argsort(-s, kind="mergesort")
    s_sorted, y_sorted = s[order], y[order]
    # Last index of each run of equal scores: the curve moves once per distinct score.
    ends = np.r_[np.flatnonzero(s_sorted[1:] != s_sorted[:-1]), s_sorted.size - 1]
    tps = np.cumsum(y_sorted)[ends]
    fps = (ends + 1) - tps
    fpr = np.r_[0.0, fps / n_neg]
    tpr = np.r_[0.0, tps / n_pos]
    thresholds = np.r_[np.inf, s_sorted[ends]]
    return roc_points(fpr, tpr, thresholds, max_points)


def roc_points(fpr, tpr, thresholds, max_points: int | None = None) -> dict:
    """An ROC curve as eval.json holds it, thinned to about `max_points` points (first and
    last kept); an infinite threshold is None."""
    if max_points is not None and fpr.size > max_points:
        keep = np.unique(np.linspace(0, fpr.size - 1, max(int(max_points), 2)).round()
                         .astype(int))
        fpr, tpr, thresholds = fpr[keep], tpr[keep], thresholds[keep]
    return {"fpr": fpr.tolist(), "tpr": tpr.tolist(),
            "thresholds": [None if not math.isfinite(t) else float(t) for t in thresholds]}


def reliability_curve(labels, probs, n_bins: int = 10, strategy: str = "quantile") -> dict:
    """Mean predicted vs observed click rate per bin of predicted probability.

    `quantile` bins hold about equally many rows (CTR scores crowd near 0, so uniform
    bins would leave most of them empty); `uniform` splits [0, 1] evenly. Empty bins
    are dropped.
    """
    y, p = _as_arrays(labels, probs, "probs")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    if strategy == "quantile":
        edges = np.unique(np.quantile(p, np.linspace(0.0, 1.0, n_bins + 1)))
    elif strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
    else:
        raise ValueError(f"strategy must be 'quantile' or 'uniform', got {strategy!r}")
    # Interior edges only: bin k holds edges[k] <= p < edges[k+1]; the top edge is closed.
    bins = np.searchsorted(edges[1:-1], p, side="right") if edges.size > 2 \
        else np.zeros(p.size, dtype=np.int64)
    count = np.bincount(bins, minlength=max(edges.size - 1, 1))
    sum_p = np.bincount(bins, weights=p, minlength=count.size)
    sum_y = np.bincount(bins, weights=y, minlength=count.size)
    full = count > 0
    return {"mean_pred": (sum_p[full] / count[full]).tolist(),
            "observed": (sum_y[full] / count[full]).tolist(),
            "count": count[full].astype(int).tolist(), "strategy": strategy}


# ------------------------------------------------------------------ slices

def slice_metrics(labels, probs, slices: Mapping[str, Sequence[Any]]) -> dict:
    """`binary_metrics` per value of each slicing column.

    `slices` maps a slice name (e.g. "device") to one value per row (e.g. "ios");
    returns {slice: {value: metrics}}, values ordered by row count, largest first
    (ties by name). A value with one class only gets None for AUC and friends.
    """
    y, p = _as_arrays(labels, probs, "probs")
    out: dict = {}
    for name, values in slices.items():
        v = np.asarray(values, dtype=object).astype(str)
        if v.shape != y.shape:
            raise ValueError(f"slice {name!r} has {v.size} values for {y.size} rows")
        uniq, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
        order = sorted(range(uniq.size), key=lambda k: (-counts[k], uniq[k]))
        out[name] = {str(uniq[k]): binary_metrics(y[inverse == k], p[inverse == k])
                     for k in order}
    return out


# ------------------------------------------------------------------ bootstrap

# Resample rows of this many (resample x row) cells at a time: bounds memory to ~tens
# of MB whatever the eval set size, without changing the result.
_BOOTSTRAP_BLOCK_CELLS = 4_000_000


def _bootstrap_weights(n: int, n_resamples: int, seed: int):
    """Yield (b, n) matrices of how often each row is drawn, b resamples at a time.

    Depends only on (n, n_resamples, seed): two calls with the same ones resample the
    same rows, which makes candidate and baseline intervals paired.
    """
    rng = np.random.default_rng(seed)
    block = max(1, min(n_resamples, _BOOTSTRAP_BLOCK_CELLS // max(n, 1)))
    done = 0
    while done < n_resamples:
        b = min(block, n_resamples - done)
        idx = rng.integers(0, n, size=(b, n))
        flat = (idx + (np.arange(b) * n)[:, None]).ravel()
        yield np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)
        done += b


def _weighted_auc(y: np.ndarray, s: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUC of each weighted resample (rows of `weights`), ties counting one half."""
    order = np.argsort(s, kind="mergesort")
    s_sorted, y_sorted = s[order], y[order]
    starts = np.flatnonzero(np.r_[True, s_sorted[1:] != s_sorted[:-1]])
    w = weights[:, order]
    pos = np.add.reduceat(w * y_sorted, starts, axis=1)        # (b, groups of tied scores)
    neg = np.add.reduceat(w * (1.0 - y_sorted), starts, axis=1)
    neg_below = np.cumsum(neg, axis=1) - neg
    u = np.sum(pos * (neg_below + 0.5 * neg), axis=1)
    denom = pos.sum(axis=1) * neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, u / np.where(denom > 0, denom, 1.0), np.nan)


def _row_log_loss(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    p = np.clip(p, EPS, 1.0 - EPS)
    return -(y * np.log(p) + (1.0 - y) * np.log1p(-p))


def percentile_interval(values: np.ndarray, estimate: float, level: float) -> dict:
    valid = values[np.isfinite(values)]
    if valid.size == 0:
        return {"estimate": estimate, "low": None, "high": None, "std": None, "valid": 0}
    lo, hi = np.percentile(valid, [50.0 * (1.0 - level), 50.0 * (1.0 + level)])
    return {"estimate": estimate, "low": float(lo), "high": float(hi),
            "std": float(valid.std(ddof=1)) if valid.size > 1 else 0.0,
            "valid": int(valid.size)}


def _check_bootstrap_args(n_resamples, level) -> None:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 2:
        raise ValueError(f"n_resamples must be an integer >= 2, got {n_resamples!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")


def bootstrap_ci(labels, probs, *, baseline_probs=None, n_resamples: int = 200,
                 seed: int = 0, level: float = 0.95) -> dict:
    """Percentile bootstrap intervals for AUC and log loss (rows resampled with replacement).

    Vectorised: each resample is a row-count vector, so all resamples are scored with a
    handful of array operations (about 0.1 s for 200 x 10k rows). With `baseline_probs`
    the same resamples also score the baseline, and the result holds intervals of the
    paired differences `auc_delta` and `log_loss_delta` (candidate - baseline), which are
    much tighter than comparing two separate intervals. Resamples with one class only
    (possible on tiny sets) are left out of the AUC interval; `valid` counts the rest.
    """
    y, p = _as_arrays(labels, probs, "probs")
    if baseline_probs is not None:
        _, q = _as_arrays(labels, baseline_probs, "baseline_probs")
    _check_bootstrap_args(n_resamples, level)
    n = y.size
    loss_p = _row_log_loss(y, p)
    loss_q = _row_log_loss(y, q) if baseline_probs is not None else None
    aucs, lls, base_aucs, base_lls = [], [], [], []
    for w in _bootstrap_weights(n, n_resamples, seed):
        aucs.append(_weighted_auc(y, p, w))
        lls.append(w @ loss_p / n)
        if loss_q is not None:
            base_aucs.append(_weighted_auc(y, q, w))
            base_lls.append(w @ loss_q / n)
    aucs_a, lls_a = np.concatenate(aucs), np.concatenate(lls)
    try:
        point_auc: float | None = auc(y, p)
    except ValueError:
        point_auc = None
    out = {"method": "percentile bootstrap", "n_resamples": n_resamples, "seed": seed,
           "level": level, "rows": int(n),
           "auc": percentile_interval(aucs_a, point_auc, level),
           "log_loss": percentile_interval(lls_a, float(loss_p.mean()), level)}
    if loss_q is not None:
        try:
            delta: float | None = auc(y, p) - auc(y, q)
        except ValueError:
            delta = None
        out["auc_delta"] = percentile_interval(aucs_a - np.concatenate(base_aucs), delta, level)
        out["log_loss_delta"] = percentile_interval(lls_a - np.concatenate(base_lls),
                                          float(loss_p.mean() - loss_q.mean()), level)
    return out


# ------------------------------------------------------------------ text classification

def _class_arrays(y_true, y_pred, n_classes: int | None) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
    t = np.asarray(y_true)
    pr = np.asarray(y_pred)
    if pr.ndim == 2:  # scores / probabilities per class: predict the arg max
        if n_classes is not None and pr.shape[1] != n_classes:
            raise ValueError(f"y_pred has {pr.shape[1]} score columns for {n_classes} classes")
        if n_classes is None:
            n_classes = pr.shape[1]
        pr = pr.argmax(axis=1)
    if t.ndim != 1 or pr.ndim != 1:
        raise ValueError(f"y_true and y_pred must be 1-D labels (or y_pred 2-D scores), "
                         f"got shapes {t.shape} and {pr.shape}")
    if t.shape != pr.shape:
        raise ValueError(f"y_true and y_pred differ in length: {t.size} vs {pr.size}")
    if t.size == 0:
        raise ValueError("no examples")
    for name, a in (("y_true", t), ("y_pred", pr)):
        if not np.issubdtype(a.dtype, np.integer) or (a < 0).any():
            raise ValueError(f"{name} must hold class indices (integers >= 0)")
    if n_classes is not None:
        if max(t.max(), pr.max()) >= n_classes:
            raise ValueError(f"class index {max(t.max(), pr.max())} >= n_classes {n_classes}")
        classes = np.arange(n_classes)
    else:
        classes = np.union1d(t, pr)  # like scikit-learn: classes seen in either array
    return t.astype(np.int64), pr.astype(np.int64), classes


def accuracy(y_true, y_pred) -> float:
    """Share of rows whose predicted class is the true one (y_pred: labels or 2-D scores)."""
    t, pr, _ = _class_arrays(y_true, y_pred, None)
    return float(np.mean(t == pr))


def confusion_matrix(y_true, y_pred, n_classes: int | None = None) -> np.ndarray:
    """Counts[i, j] = rows of true class i predicted as class j.

    With `n_classes`, rows/columns are classes 0..n_classes-1; without it, the classes
    seen in either array, in increasing order.
    """
    t, pr, classes = _class_arrays(y_true, y_pred, n_classes)
    index = np.full(int(classes.max()) + 1, -1, dtype=np.int64)
    index[classes] = np.arange(classes.size)
    k = classes.size
    return np.bincount(index[t] * k + index[pr], minlength=k * k).reshape(k, k)


def precision_recall_f1(y_true, y_pred, n_classes: int | None = None) -> dict:
    """Per-class precision, recall, F1 and support (true rows), as lists over `classes`.

    A ratio with a zero denominator (class never predicted, or absent) is 0.0, as
    scikit-learn's `zero_division=0`.
    """
    t, pr, classes = _class_arrays(y_true, y_pred, n_classes)
    cm = confusion_matrix(t, pr, n_classes)  # rows/columns in the order of `classes`
    tp = np.diag(cm).astype(np.float64)
    predicted = cm.sum(axis=0).astype(np.float64)
    support = cm.sum(axis=1).astype(np.float64)

    def ratio(a, b):
        return np.divide(a, b, out=np.zeros_like(a), where=b > 0)

    precision = ratio(tp, predicted)
    recall = ratio(tp, support)
    f1 = ratio(2 * precision * recall, precision + recall)
    return {"classes": classes.tolist(), "precision": precision.tolist(),
            "recall": recall.tolist(), "f1": f1.tolist(),
            "support": support.astype(int).tolist()}


def macro_f1(y_true, y_pred, n_classes: int | None = None) -> float:
    """Unweighted mean of the per-class F1 (every class counts the same, rare or not)."""
    return float(np.mean(precision_recall_f1(y_true, y_pred, n_classes)["f1"]))


def classification_metrics(y_true, y_pred, class_names: Sequence[str] | None = None) -> dict:
    """Accuracy, macro-F1, per-class precision/recall/F1 and the confusion matrix, as
    a JSON-friendly dict. With `class_names`, class i is named class_names[i] and every
    class is reported even if absent from both arrays."""
    n_classes = None if class_names is None else len(class_names)
    per = precision_recall_f1(y_true, y_pred, n_classes)
    names = [str(class_names[c]) if class_names is not None else str(c)
             for c in per["classes"]]
    cm = confusion_matrix(y_true, y_pred, n_classes)
    return {
        "n": int(cm.sum()),
        "accuracy": accuracy(y_true, y_pred),
        "macro_f1": float(np.mean(per["f1"])),
        "classes": names,
        "per_class": {name: {"precision": per["precision"][i], "recall": per["recall"][i],
                             "f1": per["f1"][i], "support": per["support"][i]}
                      for i, name in enumerate(names)},
        "confusion_matrix": cm.tolist(),
    }


def macro_f1_from_confusion(confusion) -> np.ndarray:
    """Macro-F1 of confusion matrices [..., k, k] (rows = true class): per class
    2 tp / (true + predicted), 0 for a class never true nor predicted, then the mean.
    Vectorised over leading axes, for the bootstrap and the calibration grid search."""
    cm = np.asarray(confusion, dtype=np.float64)
    tp = np.diagonal(cm, axis1=-2, axis2=-1)
    denom = cm.sum(axis=-1) + cm.sum(axis=-2)
    return np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0).mean(axis=-1)


def macro_f1_interval(confusion, *, n_resamples: int = 2000, seed: int = 0,
                      level: float = 0.95) -> dict:
    """Percentile bootstrap interval of macro-F1 from a confusion matrix.

    Macro-F1 depends on the rows only through their (true, predicted) cell, so drawing n
    rows with replacement is one multinomial draw over the cells: exactly the row
    bootstrap, from the k x k counts a report already holds, in milliseconds. Says how
    far a figure on a few thousand held-out rows can move by the luck of the sample.
    """
    cm = np.asarray(confusion, dtype=np.int64)
    if cm.ndim != 2 or cm.shape[0] != cm.shape[1] or cm.shape[0] < 1 or (cm < 0).any():
        raise ValueError(f"confusion must be a square matrix of counts, got shape {cm.shape}")
    n = int(cm.sum())
    if n == 0:
        raise ValueError("empty confusion matrix")
    _check_bootstrap_args(n_resamples, level)
    k = cm.shape[0]
    draws = np.random.default_rng(seed).multinomial(n, cm.ravel() / n, size=n_resamples)
    resampled = macro_f1_from_confusion(draws.reshape(n_resamples, k, k))
    return {"method": "percentile bootstrap (multinomial over the confusion matrix)",
            "n_resamples": n_resamples, "seed": seed, "level": level, "rows": n,
            **percentile_interval(resampled, float(macro_f1_from_confusion(cm)), level)}


def paired_macro_f1_interval(y_true, pred, other_pred, n_classes: int, *,
                             n_resamples: int = 1000, seed: int = 0,
                             level: float = 0.95) -> dict:
    """Paired percentile bootstrap interval of macro-F1(pred) - macro-F1(other_pred): two
    models' predicted classes on the same rows, resampled together.

    `macro_f1_interval`'s trick for a pair: both F1s depend on a row only through its
    (true, predicted, other predicted) cell, so drawing n rows with replacement is one
    multinomial draw over the cells that occur (at most n of them), and every resample
    scores both models on the same rows. The paired difference is much tighter than two
    separate intervals, since the rows both models get right or wrong cancel. `pred` /
    `other_pred`: class indices or score matrices (arg max). Returns the usual bootstrap
    header plus `a`, `b` (each model's macro-F1) and `delta` (a - b) intervals; estimates
    are the full-sample figures (equal to `macro_f1(..., n_classes)`).
    """
    t, a, _ = _class_arrays(y_true, pred, n_classes)
    _, b, _ = _class_arrays(y_true, other_pred, n_classes)
    _check_bootstrap_args(n_resamples, level)
    k, n = int(n_classes), int(t.size)
    joint, counts = np.unique((t * k + a) * k + b, return_counts=True)
    cell_a, cell_b = joint // k, (joint // (k * k)) * k + joint % k
    draws = np.random.default_rng(seed).multinomial(n, counts / n, size=n_resamples)

    def confusions(cells: np.ndarray, weights: np.ndarray) -> np.ndarray:
        flat = (np.arange(weights.shape[0])[:, None] * (k * k) + cells[None, :]).ravel()
        return np.bincount(flat, weights=weights.ravel().astype(np.float64),
                           minlength=weights.shape[0] * k * k).reshape(-1, k, k)

    full = counts[None, :]
    est_a = float(macro_f1_from_confusion(confusions(cell_a, full))[0])
    est_b = float(macro_f1_from_confusion(confusions(cell_b, full))[0])
    f_a = macro_f1_from_confusion(confusions(cell_a, draws))
    f_b = macro_f1_from_confusion(confusions(cell_b, draws))
    return {"method": "paired percentile bootstrap (multinomial over (true, a, b) cells)",
            "n_resamples": n_resamples, "seed": seed, "level": level, "rows": n,
            "a": percentile_interval(f_a, est_a, level), "b": percentile_interval(f_b, est_b, level),
            "delta": percentile_interval(f_a - f_b, est_a - est_b, level)}
