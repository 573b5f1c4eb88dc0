"""The click_rate rule judges a day's rate on evidence (issue 46): a day too small to tell
its rate from the configured bounds' is not failed for it, a day that can tell still is."""
from __future__ import annotations

import dataclasses

import pytest

from components.ctr import feature_config as fc
from components.ctr.validation_rules import (RATE_EVIDENCE, judged_label_rate, label_rate_off,
                                             rules_for, stats_row)


@pytest.mark.parametrize("rows, rate, off", [
    (1, 0.0, False),            # one row, no click: 0.995 chance at the lower bound
    (1, 1.0, False),            # one row, one click: 0.2 chance at the upper bound
    (1378, 0.0, False),         # 0.995^1378 just above 1 in 1,000
    (1379, 0.0, True),          # ... and just below
    (4000, 0.0, True),
    (10, 1.0, True),            # ten clicks in ten rows: 0.2^10
    (4000, 0.1, False),         # inside the bounds: nothing to judge
    (50, 0.3, False),           # 15 of 50 at a 0.2 bound: plausible
    (5000, 0.3, True),
])
def test_a_rate_is_off_only_with_evidence(rows, rate, off):
    assert label_rate_off(rows, rate, 0.005, 0.2) is off


def test_the_bound_of_a_day_without_evidence_is_exact_for_all_or_nothing():
    assert 0.995 ** 1379 < RATE_EVIDENCE < 0.995 ** 1378
    assert not label_rate_off(0, None, 0.005, 0.2) and not label_rate_off(0, 0.0, 0.005, 0.2)
    assert label_rate_off(1, 1.0, 0.0, 0.0)      # a bound of 0: one click is evidence


def test_the_judged_rate_is_the_days_own_unless_it_cannot_tell():
    bounds = (0.005, 0.2)
    assert judged_label_rate(1, 0.0, bounds) == 0.005
    assert judged_label_rate(1, 1.0, bounds) == 0.2
    assert judged_label_rate(4000, 0.0, bounds) == 0.0
    assert judged_label_rate(4000, 0.1, bounds) == 0.1
    assert judged_label_rate(1, 0.0, None) == 0.0 and judged_label_rate(0, None, bounds) is None


def _stats(rows, rate):
    return {"rows": rows, "label_rate": rate, "columns": {}, "parts": []}


def test_the_statistics_row_keeps_the_real_rate_beside_the_judged_one():
    rules = rules_for(fc.default())
    lo = fc.default().validation.threshold("min_label_rate")
    row = stats_row(_stats(1, 0.0), None, [], None, rules)
    assert row["click_rate"] == 0.0 and row["click_rate_judged"] == lo
    row = stats_row(_stats(4000, 0.0), None, [], None, rules)
    assert row["click_rate"] == row["click_rate_judged"] == 0.0


def test_the_suite_judges_the_evidence_column_unless_a_spec_overrides_the_bounds():
    pytest.importorskip("great_expectations")
    from components.ctr.validate import ValidateSpec, with_thresholds
    from components.ctr.validation_rules import STATS_SUITE, build_suites

    rules = rules_for(fc.default())
    spec = with_thresholds(ValidateSpec(span_dir="x", out_dir="y"))

    def column(spec):
        suite = build_suites(spec, None, [], rules)[STATS_SUITE]
        return next(e.column for e in suite.expectations if e.meta["rule"] == "click_rate")
    assert column(spec) == "click_rate_judged"
    assert column(dataclasses.replace(spec, min_click_rate=0.3)) == "click_rate"
