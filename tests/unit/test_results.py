"""The typed stage results: a step that breaks its stage's contract is named at once."""
from __future__ import annotations

import pytest

from retrain.common import results


def test_results_are_read_into_their_stage_class_and_extra_keys_are_kept_out():
    v = results.read("validate", {"uri": "/v", "rows": 10, "gate": "passed", "n_failed": 0,
                                  "data_docs": "/d"})
    assert v == results.ValidationResult(uri="/v", rows=10, gate="passed", n_failed=0)
    e = results.read("evaluate", {"eval_uri": "/e", "blessed": False, "reasons": ["x"],
                                  "candidate": {"rmse": 1.0}})
    assert e.baseline is None and e.blessed is False


def test_a_broken_contract_names_the_step_and_the_field():
    with pytest.raises(results.ContractError, match=r"step my.train returned no \['model_dir'\]"):
        results.read("train", {"model": "/m"}, "my.train")
    with pytest.raises(results.ContractError, match="must raise ValidationFailed"):
        results.read("validate", {"uri": "/v", "rows": 1, "gate": "failed", "n_failed": 1})
    with pytest.raises(results.ContractError, match="not a boolean"):
        results.read("evaluate", {"eval_uri": "/e", "blessed": "yes", "reasons": [],
                                  "candidate": {}})
    assert set(results.RESULTS) == set(results.URI_FIELD)
