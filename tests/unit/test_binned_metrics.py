"""Mergeable evaluation accumulators (`components.binned_metrics`) against the exact
in-memory metrics of `components.metrics`, on arrays (no Beam, no TensorFlow)."""
from __future__ import annotations

import numpy as np
import pytest

from components import metrics as M
from components.binned_metrics import EvalAccumulator, poisson_weights


def _data(n=60_000, seed=3):
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.5, 1.2, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(z + rng.normal(0, 1, n))))).astype(np.int64)
    p = 1 / (1 + np.exp(-z))
    q = np.clip(p + rng.normal(0, 0.02, n), 1e-4, 1 - 1e-4)
    ids = rng.integers(0, 2 ** 63, n).astype(np.uint64)
    device = np.where(z > -2.5, "phone", "web").astype(object)
    return y, p, q, ids, device


def _fold(y, p, q, ids, device, chunks, n_resamples=200) -> EvalAccumulator:
    acc = EvalAccumulator(n_resamples)
    for part in np.array_split(np.arange(y.size), chunks):
        a = EvalAccumulator(n_resamples)
        a.add(y[part], {"candidate": p[part], "baseline": q[part]}, ids[part],
              {"device": device[part]}, count_as="day0")
        acc.merge(a)
    return acc


def test_poisson_weights_depend_on_the_id_alone():
    ids = np.arange(1, 20_001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    w = poisson_weights(ids, 50, seed=1)
    np.testing.assert_array_equal(w[5:9], poisson_weights(ids[5:9], 50, seed=1))
    assert not np.array_equal(w, poisson_weights(ids, 50, seed=2))
    assert abs(w.mean() - 1) < 0.01 and abs(w.var() - 1) < 0.02     # Poisson(1)


def test_merging_in_any_split_gives_the_same_state():
    data = _data()
    one, many = _fold(*data, chunks=1), _fold(*data, chunks=7)
    for name in one.models:
        np.testing.assert_allclose(one.models[name].rep_hist, many.models[name].rep_hist)
        np.testing.assert_allclose(one.models[name].hist, many.models[name].hist)
    assert one.counts == many.counts == {"day0": data[0].size}
    assert one.binary_metrics("candidate") == pytest.approx(many.binary_metrics("candidate"))


def test_metrics_match_the_exact_ones():
    y, p, q, ids, device = _data()
    acc = _fold(y, p, q, ids, device, chunks=4)
    exact, binned = M.binary_metrics(y, p), acc.binary_metrics("candidate")
    assert binned["n"] == exact["n"] and binned["positives"] == exact["positives"]
    assert abs(binned["auc"] - exact["auc"]) < 1e-4
    for key in ("log_loss", "calibration", "normalized_entropy", "mean_prob"):
        assert binned[key] == pytest.approx(exact[key], rel=1e-9)
    per = acc.slice_metrics("candidate", ["device"])["device"]
    exact_per = M.slice_metrics(y, p, {"device": device})["device"]
    assert list(per) == list(exact_per)
    for value in per:
        assert per[value]["n"] == exact_per[value]["n"]
        assert abs(per[value]["auc"] - exact_per[value]["auc"]) < 1e-3
    rel = acc.reliability_curve("candidate")
    exact_rel = M.reliability_curve(y, p)
    np.testing.assert_allclose(rel["mean_pred"], exact_rel["mean_pred"], rtol=0.02)
    roc = acc.roc_curve("candidate", max_points=200)
    assert roc["fpr"][0] == roc["tpr"][0] == 0 and roc["fpr"][-1] == roc["tpr"][-1] == 1


def test_paired_intervals_match_the_exact_bootstrap():
    """Both bootstraps estimate the same sampling distribution: with 1000 replicates each,
    every bound within a quarter of the exact half-width."""
    y, p, q, ids, device = _data()
    acc = _fold(y, p, q, ids, device, chunks=3, n_resamples=1000)
    binned = acc.bootstrap_ci("candidate", baseline="baseline")
    exact = M.bootstrap_ci(y, p, baseline_probs=q, n_resamples=1000)
    for key in ("auc", "log_loss", "auc_delta", "log_loss_delta"):
        half = (exact[key]["high"] - exact[key]["low"]) / 2
        for bound in ("low", "high"):
            assert abs(binned[key][bound] - exact[key][bound]) <= 0.25 * half, (key, bound)
    same = acc.bootstrap_ci("candidate", baseline="candidate")
    assert same["auc_delta"]["low"] == same["auc_delta"]["high"] == 0.0


def test_saved_state_reads_back_without_pickles(tmp_path):
    acc = _fold(*_data(5000), chunks=2)
    acc.save(tmp_path / "state.npz")
    back = EvalAccumulator.load(tmp_path / "state.npz")
    assert back.binary_metrics("baseline") == acc.binary_metrics("baseline")
    assert back.slice_metrics("candidate", ["device"]) == acc.slice_metrics("candidate",
                                                                            ["device"])
    assert back.bootstrap_ci("candidate", "baseline") == acc.bootstrap_ci("candidate",
                                                                          "baseline")
    assert back.counts == acc.counts


def test_bad_input_is_refused():
    acc = EvalAccumulator(10)
    with pytest.raises(ValueError, match="0/1"):
        acc.add([0, 2], {"m": [0.1, 0.2]}, np.array([1, 2], dtype=np.uint64))
    with pytest.raises(ValueError, match="NaN"):
        acc.add([0, 1], {"m": [0.1, np.nan]}, np.array([1, 2], dtype=np.uint64))
    with pytest.raises(ValueError, match="bootstrap settings"):
        acc.merge(EvalAccumulator(20))
