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


def test_runs_active_at_once_is_a_deployment_setting(monkeypatch):
    """The backfill dialog caps its Max Active Runs at the DAG's: a deployment raises it
    with RETRAIN_MAX_ACTIVE_RUNS so a backfill's days can overlap."""
    from retrain.orchestration import dag_defaults
    monkeypatch.delenv("RETRAIN_MAX_ACTIVE_RUNS", raising=False)
    assert dag_defaults.daily()["max_active_runs"] == 3
    monkeypatch.setenv("RETRAIN_MAX_ACTIVE_RUNS", "8")
    assert dag_defaults.daily()["max_active_runs"] == 8
    monkeypatch.setenv("RETRAIN_MAX_ACTIVE_RUNS", "0")
    with pytest.raises(ValueError, match="RETRAIN_MAX_ACTIVE_RUNS"):
        dag_defaults.daily()


def test_the_dag_carries_the_setting(monkeypatch):
    from retrain.orchestration.dag_factory import make_dag
    from retrain.orchestration.families import CTR
    monkeypatch.setenv("RETRAIN_MAX_ACTIVE_RUNS", "5")
    assert make_dag(CTR)().max_active_runs == 5
