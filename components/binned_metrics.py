"""Binary-classification metrics as mergeable accumulators, for evaluation that scales out.

`components.metrics` computes AUC, log loss and bootstrap intervals from every row's
score held in memory: fine for a day, not for a window of 10^10 held-out rows. Here each
worker folds its rows into fixed-size arrays and any two accumulators add up, so a Beam
combine (or a loop over shards) gives the same figures in memory bounded by bins x
replicates x slices, never by rows:

- AUC and the ROC curve from per-label score histograms on the logit scale
  (`FINE_BINS`; rows in one bin count as ties, which moves AUC by well under 1e-4);
- log loss, calibration and reliability from sums per bin;
- paired Poisson-bootstrap intervals: row i weighs Poisson(1) draws taken from a hash of
  (its example id, replicate r), so every worker computes its share of replicate r
  without seeing the other rows, and candidate and baseline see the same draws. The
  replicates' AUCs come from coarser histograms, shifted by the fine-minus-coarse AUC of
  the whole sample (the binning bias is common to all replicates);
- per-slice metrics from per-(slice, value) histograms.

Numpy only. `save`/`load` use `.npz` without pickles: the file is safe to read back.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from components.metrics import EPS, base_rate_entropy, percentile_interval, roc_points

FINE_BINS = 1 << 14          # headline AUC / ROC / reliability resolution
SLICE_SHIFT = 2              # slices: FINE_BINS >> 2 bins
REPLICATE_SHIFT = 4          # bootstrap replicates: FINE_BINS >> 4 bins
LOGIT_RANGE = 16.2           # |logit| of probabilities clipped to [EPS, 1 - EPS] is < 16.12
_U64 = np.uint64
_GOLDEN, _MIX1, _MIX2 = _U64(0x9E3779B97F4A7C15), _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
# Rows x replicates drawn at a time: bounds scratch memory (~20 MB) whatever the batch.
_WEIGHT_BLOCK_CELLS = 1 << 21


def _poisson_thresholds(max_k: int = 20) -> np.ndarray:
    """T[k] = P(Poisson(1) <= k) scaled to 2^64: a uniform u draws #{k: u >= T[k]}."""
    cdf, term = [], math.exp(-1.0)
    total = 0.0
    for k in range(max_k):
        total += term
        term /= (k + 1)
        cdf.append(min(total, 1.0))
    return np.array([min(int(c * 2.0 ** 64), (1 << 64) - 1) for c in cdf], dtype=np.uint64)


_POISSON_T = _poisson_thresholds()


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> _U64(30))
    x = x * _MIX1
    x = x ^ (x >> _U64(27))
    x = x * _MIX2
    return x ^ (x >> _U64(31))


def poisson_weights(id_hash: np.ndarray, n_resamples: int, seed: int = 0) -> np.ndarray:
    """(rows, n_resamples) Poisson(1) draws from (row's id hash, replicate, seed) alone:
    the same row gets the same weights in any worker, any batch, any order."""
    h = np.asarray(id_hash, dtype=np.uint64)
    with np.errstate(over="ignore"):
        keys = (np.arange(n_resamples, dtype=np.uint64) + _U64(1)) * _GOLDEN \
            + _U64(seed & ((1 << 64) - 1)) * _MIX2
        u = _splitmix(h[:, None] ^ keys[None, :])
    return np.searchsorted(_POISSON_T, u, side="right").astype(np.float64)


def score_bins(probs: np.ndarray) -> np.ndarray:
    """Fine bin of each probability, by its logit (CTR scores crowd near 0: equal-width
    probability bins would put most rows in the first few)."""
    p = np.clip(np.asarray(probs, dtype=np.float64), EPS, 1.0 - EPS)
    z = np.log(p) - np.log1p(-p)
    b = np.floor((z + LOGIT_RANGE) * (FINE_BINS / (2 * LOGIT_RANGE))).astype(np.int64)
    return np.clip(b, 0, FINE_BINS - 1)


def bin_upper_prob(bins: np.ndarray, n_bins: int = FINE_BINS) -> np.ndarray:
    z = (np.asarray(bins) + 1) * (2 * LOGIT_RANGE / n_bins) - LOGIT_RANGE
    return 1.0 / (1.0 + np.exp(-z))


def _row_loss(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    p = np.clip(p, EPS, 1.0 - EPS)
    return -(y * np.log(p) + (1.0 - y) * np.log1p(-p))


def auc_from_hist(hist: np.ndarray) -> np.ndarray:
    """AUC of histograms [..., 2 (neg, pos), bins], ties within a bin counting one half;
    NaN where one class is missing."""
    neg, pos = hist[..., 0, :], hist[..., 1, :]
    neg_below = np.cumsum(neg, axis=-1) - neg
    u = np.sum(pos * (neg_below + 0.5 * neg), axis=-1)
    denom = pos.sum(axis=-1) * neg.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, u / np.where(denom > 0, denom, 1.0), np.nan)


def _fold(hist: np.ndarray, shift: int) -> np.ndarray:
    """Histograms on bins >> shift (adjacent fine bins summed)."""
    return hist.reshape(*hist.shape[:-1], hist.shape[-1] >> shift, 1 << shift).sum(axis=-1)


class _Model:
    """One model's accumulators over all rows (and its bootstrap replicates)."""

    def __init__(self, n_resamples: int):
        self.hist = np.zeros((2, FINE_BINS))             # rows per (label, bin)
        self.sum_p = np.zeros(FINE_BINS)                 # sum of probabilities per bin
        self.sum_loss = 0.0
        c = FINE_BINS >> REPLICATE_SHIFT
        self.rep_hist = np.zeros((n_resamples, 2, c))
        self.rep_loss = np.zeros(n_resamples)
        self.rep_weight = np.zeros(n_resamples)

    def merge(self, other: "_Model") -> None:
        for k in ("hist", "sum_p", "rep_hist", "rep_loss", "rep_weight"):
            getattr(self, k).__iadd__(getattr(other, k))
        self.sum_loss += other.sum_loss


class _Slice:
    """One model's rows of one slice value: counts, sums, histogram."""

    def __init__(self):
        self.hist = np.zeros((2, FINE_BINS >> SLICE_SHIFT))
        self.stats = np.zeros(2)                         # sum of p, sum of loss

    def merge(self, other: "_Slice") -> None:
        self.hist += other.hist
        self.stats += other.stats


class EvalAccumulator:
    """Mergeable evaluation state of named models over the same rows.

    `add` folds a batch; `merge` adds another accumulator; `binary_metrics`,
    `bootstrap_ci`, `slice_metrics`, `roc_curve` and `reliability_curve` answer in the
    shapes of `components.metrics`' functions of the same names, so the gate and the
    report read them unchanged.
    """

    def __init__(self, n_resamples: int = 200, seed: int = 0):
        self.n_resamples, self.seed = int(n_resamples), int(seed)
        self.models: dict[str, _Model] = {}
        self.slices: dict[tuple[str, str], dict[str, _Slice]] = {}
        self.counts: dict[str, int] = {}

    # -------------------------------------------------------------- folding rows

    def add(self, labels, scores: dict, id_hash, slice_values: dict | None = None,
            count_as: str | None = None) -> None:
        """Fold one batch: labels 0/1, each model's probabilities, each row's 64-bit id
        hash (bootstrap weights), {slice name: value per row}; `count_as` names a counter
        of rows (e.g. the day the batch came from)."""
        y = np.asarray(labels, dtype=np.float64)
        n = y.size
        if count_as is not None:
            self.counts[count_as] = self.counts.get(count_as, 0) + n
        if n == 0:
            return
        if not np.isin(y, (0.0, 1.0)).all():
            raise ValueError("labels must be 0/1")
        yi = y.astype(np.int64)
        prepared = {}
        for name, s in scores.items():
            p = np.asarray(s, dtype=np.float64)
            if p.shape != y.shape:
                raise ValueError(f"{name}: {p.size} scores for {n} labels")
            if np.isnan(p).any():
                raise ValueError(f"{name}: scores contain NaN")
            prepared[name] = (p, score_bins(p), _row_loss(y, p))
        for name, (p, bins, loss) in prepared.items():
            m = self.models.setdefault(name, _Model(self.n_resamples))
            m.hist += np.bincount(yi * FINE_BINS + bins, minlength=2 * FINE_BINS).reshape(2, -1)
            m.sum_p += np.bincount(bins, weights=p, minlength=FINE_BINS)
            m.sum_loss += float(loss.sum())
        self._add_replicates(yi, prepared, np.asarray(id_hash, dtype=np.uint64))
        for slice_name, values in (slice_values or {}).items():
            self._add_slice(slice_name, np.asarray(values, dtype=object).astype(str), yi,
                            prepared)

    def _add_replicates(self, yi, prepared, id_hash) -> None:
        r_count, c = self.n_resamples, FINE_BINS >> REPLICATE_SHIFT
        step = max(1, _WEIGHT_BLOCK_CELLS // max(r_count, 1))
        offsets = (np.arange(r_count) * 2 * c)[None, :]
        for start in range(0, yi.size, step):
            sl = slice(start, start + step)
            w = poisson_weights(id_hash[sl], r_count, self.seed)        # (rows, R)
            for name, (_, bins, loss) in prepared.items():
                m = self.models[name]
                cell = (yi[sl] * c + (bins[sl] >> REPLICATE_SHIFT))[:, None] + offsets
                m.rep_hist += np.bincount(cell.ravel(), weights=w.ravel(),
                                          minlength=r_count * 2 * c).reshape(r_count, 2, c)
                m.rep_loss += loss[sl] @ w
                m.rep_weight += w.sum(axis=0)

    def _add_slice(self, slice_name, values, yi, prepared) -> None:
        uniq, inverse = np.unique(values, return_inverse=True)
        b = FINE_BINS >> SLICE_SHIFT
        for name, (p, bins, loss) in prepared.items():
            hist = np.bincount((inverse * 2 + yi) * b + (bins >> SLICE_SHIFT),
                               minlength=uniq.size * 2 * b).reshape(uniq.size, 2, b)
            sum_p = np.bincount(inverse, weights=p, minlength=uniq.size)
            sum_loss = np.bincount(inverse, weights=loss, minlength=uniq.size)
            for k, value in enumerate(uniq.tolist()):
                acc = self.slices.setdefault((slice_name, value), {}).setdefault(name, _Slice())
                acc.hist += hist[k]
                acc.stats += (sum_p[k], sum_loss[k])

    def merge(self, other: "EvalAccumulator") -> "EvalAccumulator":
        if (other.n_resamples, other.seed) != (self.n_resamples, self.seed):
            raise ValueError("cannot merge accumulators of different bootstrap settings")
        for name, m in other.models.items():
            if name in self.models:
                self.models[name].merge(m)
            else:
                self.models[name] = m
        for key, per_model in other.slices.items():
            mine = self.slices.setdefault(key, {})
            for name, s in per_model.items():
                if name in mine:
                    mine[name].merge(s)
                else:
                    mine[name] = s
        for k, v in other.counts.items():
            self.counts[k] = self.counts.get(k, 0) + v
        return self

    # -------------------------------------------------------------- answers

    @property
    def rows(self) -> int:
        m = next(iter(self.models.values()), None)
        return 0 if m is None else int(m.hist.sum())

    def binary_metrics(self, name: str) -> dict:
        m = self.models[name]
        return _metrics(m.hist, float(m.sum_p.sum()), m.sum_loss)

    def bootstrap_ci(self, name: str, baseline: str | None = None, level: float = 0.95) -> dict:
        """`components.metrics.bootstrap_ci`'s answer, from the replicates (paired with
        `baseline`'s: the same weights fold both models)."""
        m = self.models[name]
        n = self.rows
        aucs = self._replicate_aucs(m)
        lls = np.divide(m.rep_loss, m.rep_weight, out=np.full(self.n_resamples, np.nan),
                        where=m.rep_weight > 0)
        point = _nan_to_none(auc_from_hist(m.hist))
        out = {"method": "Poisson bootstrap (weights hashed from example id and replicate), "
                         "AUC from score histograms",
               "n_resamples": self.n_resamples, "seed": self.seed, "level": level,
               "rows": n, "auc": percentile_interval(aucs, point, level),
               "log_loss": percentile_interval(lls, m.sum_loss / n if n else None, level)}
        if baseline is not None:
            b = self.models[baseline]
            base_lls = np.divide(b.rep_loss, b.rep_weight, out=np.full(self.n_resamples, np.nan),
                                 where=b.rep_weight > 0)
            base_point = _nan_to_none(auc_from_hist(b.hist))
            delta = None if point is None or base_point is None else point - base_point
            out["auc_delta"] = percentile_interval(aucs - self._replicate_aucs(b), delta, level)
            out["log_loss_delta"] = percentile_interval(
                lls - base_lls, (m.sum_loss - b.sum_loss) / n if n else None, level)
        return out

    @staticmethod
    def _replicate_aucs(m: _Model) -> np.ndarray:
        """Each replicate's AUC on coarse bins, moved by the whole sample's fine - coarse
        AUC: the binning's bias is removed, the replicates' spread kept."""
        shift = auc_from_hist(m.hist) - auc_from_hist(_fold(m.hist, REPLICATE_SHIFT))
        return auc_from_hist(m.rep_hist) + shift

    def slice_metrics(self, name: str, slice_names) -> dict:
        """{slice: {value: binary_metrics}}, values by rows (largest first, ties by name)."""
        out: dict = {}
        for slice_name in slice_names:
            rows = []
            for (s, value), per_model in self.slices.items():
                if s == slice_name and name in per_model:
                    acc = per_model[name]
                    rows.append((value, _metrics(acc.hist, *acc.stats)))
            rows.sort(key=lambda kv: (-kv[1]["n"], kv[0]))
            out[slice_name] = dict(rows)
        return out

    def roc_curve(self, name: str, max_points: int | None = None) -> dict:
        """ROC points from (0, 0) to (1, 1), one per non-empty bin, descending scores."""
        hist = self.models[name].hist
        full = np.flatnonzero(hist.sum(axis=0) > 0)[::-1]
        neg, pos = hist[0, full], hist[1, full]
        n_pos, n_neg = pos.sum(), neg.sum()
        if n_pos == 0 or n_neg == 0:
            raise ValueError("ROC curve needs both classes")
        fpr = np.r_[0.0, np.cumsum(neg) / n_neg]
        tpr = np.r_[0.0, np.cumsum(pos) / n_pos]
        thresholds = np.r_[np.inf, bin_upper_prob(full)]
        return roc_points(fpr, tpr, thresholds, max_points)

    def reliability_curve(self, name: str, n_bins: int = 10) -> dict:
        """Mean predicted vs observed rate in `n_bins` groups of about equal rows (fine
        bins grouped by their cumulative count: `components.metrics`' quantile bins)."""
        m = self.models[name]
        count = m.hist.sum(axis=0)
        total = count.sum()
        group = np.minimum((np.cumsum(count) - count) * n_bins // max(total, 1),
                           n_bins - 1).astype(np.int64)
        c = np.bincount(group, weights=count, minlength=n_bins)
        sp = np.bincount(group, weights=m.sum_p, minlength=n_bins)
        sy = np.bincount(group, weights=m.hist[1], minlength=n_bins)
        full = c > 0
        return {"mean_pred": (sp[full] / c[full]).tolist(),
                "observed": (sy[full] / c[full]).tolist(),
                "count": c[full].astype(int).tolist(), "strategy": "quantile"}

    # -------------------------------------------------------------- files

    def save(self, path: str | Path) -> None:
        """`.npz` (no pickles) at `path`; the caller makes the write atomic."""
        arrays: dict[str, np.ndarray] = {
            "settings": np.array([self.n_resamples, self.seed], dtype=np.int64),
            "models": np.array(list(self.models), dtype=str),
            "count_keys": np.array(list(self.counts), dtype=str),
            "count_values": np.array(list(self.counts.values()), dtype=np.int64)}
        for i, m in enumerate(self.models.values()):
            for k in ("hist", "sum_p", "rep_hist", "rep_loss", "rep_weight"):
                arrays[f"m{i}.{k}"] = getattr(m, k)
            arrays[f"m{i}.sum_loss"] = np.array([m.sum_loss])
        keys = list(self.slices)
        arrays["slice_keys"] = np.array(keys, dtype=str).reshape(len(keys), 2)
        for j, key in enumerate(keys):
            per_model = self.slices[key]
            arrays[f"s{j}.models"] = np.array(list(per_model), dtype=str)
            arrays[f"s{j}.hist"] = np.stack([s.hist for s in per_model.values()])
            arrays[f"s{j}.stats"] = np.stack([s.stats for s in per_model.values()])
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> "EvalAccumulator":
        with np.load(path, allow_pickle=False) as z:
            n_resamples, seed = (int(x) for x in z["settings"])
            acc = cls(n_resamples, seed)
            for i, name in enumerate(z["models"].tolist()):
                m = _Model(n_resamples)
                for k in ("hist", "sum_p", "rep_hist", "rep_loss", "rep_weight"):
                    setattr(m, k, z[f"m{i}.{k}"].astype(np.float64))
                m.sum_loss = float(z[f"m{i}.sum_loss"][0])
                acc.models[name] = m
            acc.counts = dict(zip(z["count_keys"].tolist(),
                                  (int(v) for v in z["count_values"])))
            for j, (slice_name, value) in enumerate(z["slice_keys"].tolist()):
                per_model = acc.slices.setdefault((slice_name, value), {})
                for name, hist, stats in zip(z[f"s{j}.models"].tolist(), z[f"s{j}.hist"],
                                             z[f"s{j}.stats"]):
                    s = _Slice()
                    s.hist, s.stats = hist.astype(np.float64), stats.astype(np.float64)
                    per_model[name] = s
        return acc


def _nan_to_none(x) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


def _metrics(hist: np.ndarray, sum_p: float, sum_loss: float) -> dict:
    """`components.metrics.binary_metrics`' dict from a histogram and sums."""
    sum_p, sum_loss = float(sum_p), float(sum_loss)
    n = float(hist.sum())
    positives = float(hist[1].sum())
    if n == 0:
        raise ValueError("no examples")
    ctr = positives / n
    out: dict = {"n": int(n), "positives": int(positives), "ctr": ctr, "mean_prob": sum_p / n,
                 "log_loss": sum_loss / n, "auc": _nan_to_none(auc_from_hist(hist))}
    out["calibration"] = (sum_p / n) / ctr if positives else None
    out["normalized_entropy"] = (sum_loss / n) / base_rate_entropy(ctr) if 0 < positives < n else None
    return out
