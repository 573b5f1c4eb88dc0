"""The recommendations DAG is active from its first parse and runs on every publish.

A reviewer found it paused after the demo (0 runs after 4 publishes): asset-scheduled, it
cannot run before a model exists, so it is created unpaused, and the flag must survive
serialization (the dag-processor writes `is_paused` from the serialized DAG)."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_recommendations_dag_is_active_and_scheduled_on_the_model_asset(airflow_home):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.sdk.definitions.timetables.assets import AssetTriggeredTimetable

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}, bag.import_errors
    dag = bag.get_dag("ctr_daily_recommendations")
    assert dag.is_paused_upon_creation is False
    assert isinstance(dag.timetable, AssetTriggeredTimetable)
    # Only a publish (the model Asset's event) starts a run: nothing runs before a model.
    assert [a.name for a in dag.timetable.asset_condition.objects] == ["ctr_model"]
    again = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    assert again.is_paused_upon_creation is False
    # The training DAGs keep the deployment's default (paused until a person starts them).
    assert bag.get_dag("ctr_daily_retrain").is_paused_upon_creation is None


def test_a_longer_seen_memory_is_in_the_runs_lineage():
    from retrain.orchestration.recommend_dag import _days_read

    assert _days_read({"active_days": 7, "exclude_seen": True, "seen_days": 365}) == 365
    assert _days_read({"active_days": 7, "exclude_seen": False, "seen_days": 365}) == 7
    assert _days_read({"active_days": 7, "exclude_seen": True, "seen_days": 0}) == 7
