"""The gate on real scores and a real paired bootstrap (`components.ctr.evaluate.assess`):
a difference inside the noise of the eval rows is not a regression, one outside it is."""
from __future__ import annotations

import numpy as np

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
