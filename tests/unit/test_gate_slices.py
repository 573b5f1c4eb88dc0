"""The gate's per-slice guards: a candidate better on average but worse on a large slice
is rejected with the slice named; small or undefined slices are listed, not judged; by
default a slice's difference is judged on its interval, so noise is not a regression."""
from __future__ import annotations

import json
from statistics import NormalDist

import pytest

from components.gate import Decision, Thresholds, auc_standard_error, decide

# The rule's mechanics on point estimates (the interval judgement: further down).
T = Thresholds(max_slice_auc_drop=0.02, min_slice_rows=1000, min_slice_positives=30,
               regression_test="point")


def m(auc: float | None, n: int = 5000, positives: int = 200) -> dict:
    return {"auc": auc, "n": n, "positives": positives, "log_loss": 0.2}


def with_slices(auc: float, slices: dict) -> dict:
    return {"auc": auc, "log_loss": 0.40, "slices": slices}


BASE = with_slices(0.780, {"device": {"ios": m(0.79), "web": m(0.75, n=1500, positives=60)},
                           "user_type": {"new": m(0.70, n=900), "returning": m(0.80)}})


def test_candidate_worse_on_one_large_slice_is_rejected_with_the_slice_named():
    cand = with_slices(0.785, {"device": {"ios": m(0.80), "web": m(0.72, n=1500, positives=60)},
                               "user_type": {"new": m(0.60, n=900), "returning": m(0.80)}})
    d = decide(cand, BASE, T)
    assert not d.blessed
    assert d.failed_rules == ["max_slice_auc_drop[device=web]"]
    (web,) = [r for r in d.rules if r["name"] == "max_slice_auc_drop[device=web]"]
    assert web == {"name": "max_slice_auc_drop[device=web]", "passed": False,
                   "observed": 0.72, "limit": pytest.approx(0.73), "baseline": 0.75,
                   "slice": "device", "value": "web", "rows": 1500, "test": "point",
                   "delta": pytest.approx(-0.03)}
    assert ("slice device=web (1500 rows): auc 0.7200 >= baseline 0.7500 - "
            "max_slice_auc_drop 0.0200 (= 0.7300): fail") in d.reasons
    # The overall rules still pass: the slice guard alone rejected it.
    assert all(r["passed"] for r in d.rules if not r["name"].startswith("max_slice"))
    # user_type=new dropped 0.10 but has 900 rows < 1000: listed, not judged.
    assert any(line.startswith("slices not guarded:") and "user_type=new (900 rows < 1000)"
               in line for line in d.reasons)
    assert d.reasons[-1] == "not blessed: failed rules max_slice_auc_drop[device=web]"


def test_every_guarded_slice_is_a_recorded_rule_and_the_limit_is_inclusive():
    cand = with_slices(0.78, {"device": {"ios": m(0.77), "web": m(0.75, n=1500, positives=60)},
                              "user_type": {"new": m(0.70, n=900), "returning": m(0.80)}})
    d = decide(cand, BASE, T)
    assert d.blessed  # ios 0.77 == 0.79 - 0.02 exactly: on the limit passes
    names = [r["name"] for r in d.rules]
    assert names == ["min_auc", "max_auc_drop", "max_log_loss_increase",
                     "max_slice_auc_drop[device=ios]", "max_slice_auc_drop[device=web]",
                     "max_slice_auc_drop[user_type=returning]"]
    assert d.reasons[-1] == "blessed: all 6 rules pass"


def test_slices_too_small_or_undefined_are_listed_not_judged():
    base = with_slices(0.78, {"device": {"tv": m(0.9, n=5000, positives=10),
                                         "car": m(None), "new": m(0.7)}})
    cand = with_slices(0.78, {"device": {"tv": m(0.1, n=5000, positives=10),
                                         "car": m(0.2), "boat": m(0.2)}})
    d = decide(cand, base, T)
    assert d.blessed and not any(r["name"].startswith("max_slice") for r in d.rules)
    (line,) = [r for r in d.reasons if r.startswith("slices not guarded:")]
    assert "device=tv (10 positives < 30)" in line
    assert "device=car (auc undefined: one class)" in line
    assert "device=boat (not in the baseline's slices)" in line


def test_no_baseline_or_disabled_or_missing_slices():
    cand = with_slices(0.78, {"device": {"web": m(0.1)}})
    first = decide(cand, None, T)  # first run: absolute thresholds only
    assert first.blessed and [r["name"] for r in first.rules] == ["min_auc"]
    off = decide(cand, BASE, Thresholds(max_slice_auc_drop=None))
    assert off.blessed and not any("slice" in line for line in off.reasons)
    # No slices on either side (older callers): exactly the old behaviour.
    plain = decide({"auc": 0.79, "log_loss": 0.4}, {"auc": 0.78, "log_loss": 0.4}, T)
    assert len(plain.rules) == 3 and not any("slice" in line for line in plain.reasons)
    one_sided = decide(cand, {"auc": 0.78, "log_loss": 0.4}, T)
    assert "slice guards not applied: no slice metrics for the baseline" in one_sided.reasons


def test_force_overrides_a_failed_slice_guard_and_says_so():
    cand = with_slices(0.78, {"device": {"ios": m(0.60)}})
    d = decide(cand, BASE, T, force_reason="INC-7: web traffic mislabelled")
    assert d.blessed and d.forced
    assert d.failed_rules == ["max_slice_auc_drop[device=ios]"]
    assert "max_slice_auc_drop[device=ios]" in d.reasons[-1]


def test_slice_thresholds_validate_and_roundtrip():
    with pytest.raises(ValueError):
        Thresholds(max_slice_auc_drop=-0.1)
    with pytest.raises(ValueError, match="min_slice_rows"):
        Thresholds(min_slice_rows=-1)
    with pytest.raises(ValueError, match="min_slice_positives"):
        Thresholds(min_slice_positives=2.5)
    assert Thresholds.from_dict(T.to_dict()) == T
    d = decide(with_slices(0.78, {"device": {"ios": m(0.60)}}), BASE, T)
    assert Decision.from_dict(json.loads(json.dumps(d.to_dict()))) == d


def _slice_rule(d, label: str) -> dict:
    (rule,) = [r for r in d.rules if r["name"] == f"max_slice_auc_drop[{label}]"]
    return rule


def test_by_default_a_slice_is_judged_on_its_interval_so_noise_is_not_a_regression():
    interval = Thresholds(max_slice_auc_drop=0.02, min_slice_rows=1000, min_slice_positives=30)
    cand = with_slices(0.785, {"device": {"ios": m(0.80), "web": m(0.72, n=1500, positives=60)},
                               "user_type": {"new": m(0.60, n=900), "returning": m(0.80)}})
    # web lost 0.03 (> 0.02) on 1,500 rows and 60 clicks: the point rule rejects it ...
    assert not decide(cand, BASE, T).blessed
    # ... but a slice AUC on 60 clicks moves by several hundredths by chance.
    d = decide(cand, BASE, interval)
    web = _slice_rule(d, "device=web")
    assert d.blessed and web["passed"] and web["test"] == "slice_interval"
    assert web["delta_low"] < -0.02 < web["delta_high"]
    assert web["delta"] == pytest.approx(-0.03)
    assert any(line.startswith("slice device=web (1500 rows, 60 positives): auc 0.7200 vs "
                               "baseline 0.7500, difference -0.0300, 95% interval [")
               and line.endswith(": pass") for line in d.reasons)
    # A slice that lost far more than its noise still fails, and is named.
    worse = with_slices(0.785, {"device": {"ios": m(0.70), "web": m(0.75, n=1500, positives=60)}})
    d = decide(worse, BASE, interval)
    assert not d.blessed and d.failed_rules == ["max_slice_auc_drop[device=ios]"]
    assert _slice_rule(d, "device=ios")["delta_high"] < -0.02


def test_the_overall_pairing_narrows_a_slices_interval():
    """Two models scored on the same rows err together; the overall paired bootstrap says
    how much (var(delta) against the two variances), and each slice's interval uses it."""
    interval = Thresholds(max_slice_auc_drop=0.02, min_slice_rows=1000, min_slice_positives=30)
    cand = with_slices(0.78, {"device": {"ios": m(0.74)}})
    unpaired = _slice_rule(decide(cand, BASE, interval), "device=ios")

    def ci(std_auc, std_delta=None):
        out = {"auc": {"std": std_auc}}
        if std_delta is not None:
            out["auc_delta"] = {"std": std_delta}
        return out
    paired_cand = {**cand, "ci": ci(0.01, 0.006)}     # rho = (1 + 1 - 0.36) / 2 = 0.82
    paired = _slice_rule(decide(paired_cand, {**BASE, "ci": ci(0.01)}, interval), "device=ios")
    se_c, se_b = auc_standard_error(0.74, 200, 4800), auc_standard_error(0.79, 200, 4800)
    for rule, rho in ((unpaired, 0.0), (paired, 0.82)):
        half = NormalDist().inv_cdf(0.975) * (se_c**2 + se_b**2 - 2 * rho * se_c * se_b) ** 0.5
        assert (rule["delta_low"], rule["delta_high"]) == pytest.approx(
            (-0.05 - half, -0.05 + half), rel=1e-9)
    assert not paired["passed"] and unpaired["passed"]   # -0.05: beyond the paired one


def test_a_slice_without_class_counts_is_judged_on_its_point_estimate():
    """A multi-class task's slice (the text family's `task=topic`) has an AUC but no
    clicks to size its noise from: the point rule, said so in the rule."""
    interval = Thresholds(max_slice_auc_drop=0.02, min_slice_rows=10, min_slice_positives=0)
    base = with_slices(0.8, {"task": {"topic": {"n": 500, "auc": 0.80}}})
    cand = with_slices(0.8, {"task": {"topic": {"n": 500, "auc": 0.77}}})
    d = decide(cand, base, interval)
    rule = _slice_rule(d, "task=topic")
    assert not d.blessed and rule["test"] == "point" and rule["limit"] == pytest.approx(0.78)
