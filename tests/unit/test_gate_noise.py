"""The gate on real scores and a real paired bootstrap (`components.ctr.evaluate.assess`):
a difference inside the noise of the eval rows is not a regression, one outside it is."""
from __future__ import annotations

import numpy as np
import pytest

from components.ctr.evaluate import assess
from components.gate import Thresholds


def _world(n: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    logit = rng.normal(-2.0, 1.2, n)
    truth = 1 / (1 + np.exp(-logit))
    labels = (rng.random(n) < truth).astype(int)
    return rng, logit, truth, labels


def _model(rng, logit, noise: float):
    return 1 / (1 + np.exp(-(logit + rng.normal(0, noise, logit.size))))


def test_a_slightly_worse_candidate_inside_the_noise_is_blessed_and_a_bad_one_is_not():
    rng, logit, truth, labels = _world(3000)
    baseline = _model(rng, logit, 0.5)
    similar = _model(rng, logit, 0.7)      # a little noisier: slightly lower AUC
    bad = _model(rng, logit, 2.5)          # much noisier: clearly lower AUC
    th = Thresholds(min_auc=0.5)

    near = assess(labels, {"candidate": similar, "baseline": baseline}, {}, th)
    delta = near["candidate"]["ci"]["auc_delta"]
    assert delta["estimate"] < -0.002                      # the point rule would reject it
    assert delta["low"] < -0.002 < delta["high"]           # ... but it is inside the noise
    assert near["decision"]["blessed"], near["decision"]["reasons"]
    point = assess(labels, {"candidate": similar, "baseline": baseline}, {},
                   Thresholds(min_auc=0.5, regression_test="point"))
    assert not point["decision"]["blessed"]

    far = assess(labels, {"candidate": bad, "baseline": baseline}, {}, th)
    assert far["candidate"]["ci"]["auc_delta"]["high"] < -0.002
    assert not far["decision"]["blessed"]
    assert "max_auc_drop" in [r["name"] for r in far["decision"]["rules"] if not r["passed"]]


def _slice_rule(report: dict, label: str) -> dict:
    (rule,) = [r for r in report["decision"]["rules"]
               if r["name"] == f"max_slice_auc_drop[{label}]"]
    return rule


def test_a_slices_interval_is_as_wide_as_a_real_paired_bootstrap_of_its_rows():
    """The gate sizes a slice's noise from its class counts and the overall pairing
    (`components.gate.slice_delta_interval`), not from per-slice replicates: on real
    scores its width matches a paired bootstrap of the slice's own rows."""
    from components.metrics import bootstrap_ci
    th = Thresholds(min_auc=0.5, min_slice_rows=2000, min_slice_positives=50)
    for seed, (noise_c, noise_b) in enumerate([(0.5, 0.5), (0.4, 0.9), (1.0, 0.3)]):
        rng, logit, _, labels = _world(20_000, seed)
        device = np.where(np.arange(labels.size) < 2500, "small", "large")
        cand, base = _model(rng, logit, noise_c), _model(rng, logit, noise_b)
        report = assess(labels, {"candidate": cand, "baseline": base}, {"device": device}, th)
        rule = _slice_rule(report, "device=small")
        rows = device == "small"
        real = bootstrap_ci(labels[rows], cand[rows], baseline_probs=base[rows],
                            n_resamples=1000)["auc_delta"]
        assert rule["delta"] == pytest.approx(real["estimate"], abs=2e-4)
        ratio = (rule["delta_high"] - rule["delta_low"]) / (real["high"] - real["low"])
        assert 0.8 < ratio < 1.35, (seed, ratio)


def test_a_candidate_much_worse_on_one_slice_only_is_rejected_for_that_slice():
    rng, logit, _, labels = _world(20_000, 7)
    device = np.where(np.arange(labels.size) < 2500, "small", "large")
    base = _model(rng, logit, 0.5)
    cand = np.where(device == "small", _model(rng, logit, 2.5), _model(rng, logit, 0.5))
    th = Thresholds(min_auc=0.5, min_slice_rows=2000, min_slice_positives=50)
    report = assess(labels, {"candidate": cand, "baseline": base}, {"device": device}, th)
    assert not report["decision"]["blessed"]
    assert _slice_rule(report, "device=small")["delta_high"] < -0.03
    assert _slice_rule(report, "device=large")["passed"]
