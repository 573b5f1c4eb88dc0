"""The DAGs' trigger-form params that a deployment bounds (rule: no limit hidden in code)."""
from __future__ import annotations

import pytest


def test_the_window_limit_is_a_deployment_setting(monkeypatch):
    from retrain.orchestration import dag_defaults
    params = dag_defaults.span_params("logs", "Days.", "Share.")
    assert params["window_days"].schema["maximum"] == 60
    monkeypatch.setenv("RETRAIN_MAX_WINDOW_DAYS", "120")
    params = dag_defaults.span_params("logs", "Days.", "Share.")
    assert params["window_days"].schema["maximum"] == 120
    assert "RETRAIN_MAX_WINDOW_DAYS" in params["window_days"].description
    monkeypatch.setenv("RETRAIN_MAX_WINDOW_DAYS", "lots")
    with pytest.raises(ValueError, match="RETRAIN_MAX_WINDOW_DAYS"):
        dag_defaults.span_params("logs", "Days.", "Share.")
