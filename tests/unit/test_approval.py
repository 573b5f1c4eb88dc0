"""When a person is asked to approve a candidate (retrain.orchestration.approval)."""
from __future__ import annotations

import json

from retrain.orchestration.approval import borderline_rules, question

# Rules as the CTR gate records them: relative rules carry the baseline.
DROP_WITHIN = {"name": "max_auc_drop", "passed": True, "observed": -0.004, "limit": -0.01,
               "baseline": 0.80}
GAIN = {"name": "max_auc_drop", "passed": True, "observed": 0.003, "limit": -0.01,
        "baseline": 0.80}
LOSS_UP = {"name": "max_log_loss_increase", "passed": True, "observed": 0.002, "limit": 0.005,
           "baseline": 0.15}
ABSOLUTE = {"name": "min_auc", "passed": True, "observed": 0.61, "limit": 0.6}


def test_a_rule_passed_only_within_its_allowance_is_borderline():
    assert borderline_rules({"rules": [DROP_WITHIN, ABSOLUTE]}) == ["max_auc_drop"]
    assert borderline_rules({"rules": [LOSS_UP]}) == ["max_log_loss_increase"]
    # Better than the published model, or an absolute rule however close: not borderline.
    assert borderline_rules({"rules": [GAIN, ABSOLUTE]}) == []
    assert borderline_rules({"rules": [{**DROP_WITHIN, "passed": False}]}) == []


def test_who_is_asked_depends_on_the_mode_and_the_verdict(tmp_path):
    eval_json = tmp_path / "eval.json"
    eval_json.write_text(json.dumps({"decision": {"rules": [DROP_WITHIN]}}))
    blessed = {"blessed": True, "eval_uri": str(eval_json)}
    assert question("never", blessed) is None
    assert "every blessed candidate" in question("always", blessed)
    assert "max_auc_drop" in question("borderline", blessed)
    assert question("always", {**blessed, "blessed": False}) is None   # the gate said no
    eval_json.write_text(json.dumps({"decision": {"rules": [GAIN]}}))
    assert question("borderline", blessed) is None


def test_a_slice_that_lost_auc_within_its_allowance_is_borderline():
    """The gate records a slice's rule as the difference against -max_slice_auc_drop, as
    the overall rules: a slice worse within the allowance asks a person (borderline mode)."""
    from components.gate import Thresholds, decide

    def slices(web_auc: float) -> dict:
        return {"auc": 0.80, "log_loss": 0.3,
                "slices": {"device": {"web": {"n": 5000, "positives": 400, "auc": web_auc}}}}
    th = Thresholds(max_slice_auc_drop=0.03, min_slice_rows=1000, min_slice_positives=50)
    within = decide(slices(0.77), slices(0.79), th).to_dict()
    assert within["blessed"]
    assert borderline_rules(within) == ["max_slice_auc_drop[device=web]"]
    better = decide(slices(0.80), slices(0.79), th).to_dict()
    assert better["blessed"] and borderline_rules(better) == []


def test_rules_judged_on_point_estimates_are_borderline_only_when_worse_within_allowance():
    """Point rules record values, not differences: a better log loss (0.25 against 0.30)
    is not borderline however far below its ceiling; an AUC 0.001 below the published one
    (allowance 0.002) is. The same for a family's headline rules, either direction."""
    from components.gate import MetricLimit, Thresholds, decide, headline_rules

    point = Thresholds(min_auc=0.5, regression_test="point")
    base = {"auc": 0.800, "log_loss": 0.30}
    better = decide({"auc": 0.801, "log_loss": 0.25}, base, point).to_dict()
    assert better["blessed"] and borderline_rules(better) == []
    within = decide({"auc": 0.799, "log_loss": 0.25}, base, point).to_dict()
    assert within["blessed"] and borderline_rules(within) == ["max_auc_drop"]

    limits = [MetricLimit("rmse", "min", max_regression=0.05),
              MetricLimit("accuracy", "max", max_regression=0.01)]
    rules = headline_rules({"rmse": 0.98, "accuracy": 0.91}, {"rmse": 1.00, "accuracy": 0.90},
                           limits)
    assert borderline_rules({"rules": [{**r, "passed": True} for r in rules]}) == []
    rules = headline_rules({"rmse": 1.03, "accuracy": 0.895}, {"rmse": 1.00, "accuracy": 0.90},
                           limits)
    assert all(r["passed"] for r in rules)
    assert borderline_rules({"rules": rules}) == ["max_rmse_regression",
                                                  "max_accuracy_regression"]


def test_a_text_task_whose_macro_f1_fell_within_its_allowance_is_borderline():
    from components.text import task_config as T
    from components.text.evaluate import task_rules

    cfg = T.from_dict({"example_id": "id", "text": "t", "tasks": {
        "queue": {"labels": ["a", "b"], "max_macro_f1_drop": 0.02}}})
    cand = {"tasks": {"queue": {"macro_f1": 0.80, "n": 400,
                                "per_class": {"a": {"support": 150}, "b": {"support": 250}}}}}
    fell = task_rules(cfg, cand, {"tasks": {"queue": {"macro_f1": 0.81}}}, None)
    assert borderline_rules({"rules": fell}) == ["max_macro_f1_drop[queue]"]
    rose = task_rules(cfg, cand, {"tasks": {"queue": {"macro_f1": 0.79}}}, None)
    assert borderline_rules({"rules": rose}) == []
