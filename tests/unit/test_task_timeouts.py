"""Every task of every DAG may run only so long: an `execution_timeout` from configuration
(retrain.orchestration.timeouts), sized per stage, overridable per deployment with
RETRAIN_TASK_TIMEOUT_MINUTES, and refused by name when the setting is wrong. The hang
that the timeout ends is run for real in tests/integration/test_task_timeout.py."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from retrain.common.errors import ConfigError
from retrain.orchestration import timeouts

REPO = Path(__file__).resolve().parents[2]
VARIABLE = "RETRAIN_TASK_TIMEOUT_MINUTES"


def _bag():
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}, bag.import_errors
    return bag


def test_every_task_of_every_dag_has_an_execution_timeout(airflow_home, monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    bag = _bag()
    assert {"ctr_daily_retrain", "text_daily_finetune", "ctr_daily_recommendations"} <= set(
        bag.dag_ids)
    for dag_id in bag.dag_ids:
        for t in bag.get_dag(dag_id).tasks:
            assert isinstance(t.execution_timeout, dt.timedelta), (dag_id, t.task_id)
            assert t.execution_timeout > dt.timedelta(0), (dag_id, t.task_id)
    ctr = bag.get_dag("ctr_daily_retrain")
    hours = {t.task_id: t.execution_timeout.total_seconds() / 3600 for t in ctr.tasks}
    # sized for the work: training longest, bookkeeping short; the sensors keep their
    # own waits (days), the timeout bounds one look
    assert hours["train"] > hours["preprocess"] > hours["evaluate"] > hours["validate"]
    assert hours["resolve_span"] <= 0.5 and hours["wait_for_span"] <= 0.5
    assert ctr.get_task("wait_for_span").timeout == dt.timedelta(days=7).total_seconds()
    # the approval's wait for a person is its own timeout, not this one
    assert ctr.get_task("approve").execution_timeout == dt.timedelta(minutes=15)
    text = bag.get_dag("text_daily_finetune")
    assert text.get_task("finetune").execution_timeout == ctr.get_task("train").execution_timeout


def test_a_deployment_overrides_a_stage(airflow_home, monkeypatch):
    monkeypatch.setenv(VARIABLE, '{"train": 1440, "check_quality": 5}')
    bag = _bag()
    assert bag.get_dag("ctr_daily_retrain").get_task("train").execution_timeout == \
        dt.timedelta(hours=24)
    assert bag.get_dag("text_daily_finetune").get_task("finetune").execution_timeout == \
        dt.timedelta(hours=24)
    recs = bag.get_dag("ctr_daily_recommendations")
    assert recs.get_task("check_quality").execution_timeout == dt.timedelta(minutes=5)
    assert recs.get_task("recommend").execution_timeout == dt.timedelta(
        minutes=timeouts.DEFAULT_MINUTES["recommend"])


@pytest.mark.parametrize("value, says", [
    ('{"trian": 60}', "unknown stage 'trian'"),
    ('{"train": 0}', "train=0.0 minutes: must be more than 0"),
    ('{"train": -5}', "train=-5.0 minutes"),
    ('{"train": 1e308}', "at most 43200"),
    ('{"train": Infinity}', "train=inf minutes"),
    ('{"train": NaN}', "train=nan minutes"),
    ('{"train": "soon"}', "Input should be a valid number"),
    ('["train"]', "Input should be a valid dictionary"),
    ("{train: 60", "not valid JSON"),
])
def test_a_bad_setting_names_the_variable(monkeypatch, value, says):
    monkeypatch.setenv(VARIABLE, value)
    with pytest.raises(ConfigError) as e:
        timeouts.execution_timeouts()
    assert VARIABLE in str(e.value) and says in str(e.value), str(e.value)


def test_the_defaults_cover_every_stage_the_factory_knows():
    from retrain.orchestration.families import STAGES
    assert set(STAGES) <= set(timeouts.DEFAULT_MINUTES)
    assert all(0 < m <= timeouts.MAX_MINUTES for m in timeouts.DEFAULT_MINUTES.values())
