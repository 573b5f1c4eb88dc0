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
