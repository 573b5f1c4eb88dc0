"""The validation gate inside the real `ctr_daily_retrain` DAG (`dag.test()`, SQLite).

A span with no clicks fails `validate` naming the rule, nothing downstream runs, the span
is quarantined (raw data untouched); a rerun with `override_validation_reason` passes
and records the reason. A span that never arrives fails `wait_for_span` (reschedule
mode) at `span_timeout_minutes`.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from retrain.common.paths import safe_run_id
from components.ctr.generate import GenerateSpec, run as generate

from dag_helpers import environ, load_dag, task_states

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
DOWNSTREAM = ("preprocess", "train", "evaluate", "push")


@pytest.fixture(scope="module")
def gate_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("gate-home")
    generate(GenerateSpec(out_root=str(home), start="2026-11-01", days=2, rows_per_day=3000,
                          n_users=3000, n_items=2000, n_categories=40))
    with environ(RETRAIN_HOME=str(home), RETRAIN_SPAN_POKE_SECONDS="1"):
        yield home


def _dag():
    return load_dag("ctr_daily_retrain", "ctr_daily_retrain_gate").ctr_daily_retrain()


def _try_number(dag_run, task_id: str) -> int:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    with create_session() as session:
        return session.query(TaskInstance.try_number).filter(
            TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id,
            TaskInstance.task_id == task_id).scalar()


def test_bad_span_stops_the_run_and_override_lets_it_through(airflow_home, gate_home):
    span = gate_home / "raw" / "ctr" / "dt=2026-11-02"
    part = span / "part-00000.parquet"
    table = pq.read_table(part)
    pq.write_table(table.set_column(table.schema.get_field_index("click"), "click",
                                    [[0] * table.num_rows]), part)
    raw_bytes = part.read_bytes()
    dag = _dag()

    failed = dag.test(logical_date=dt.datetime(2026, 11, 3, tzinfo=UTC),
                      run_conf={"window_days": 2})
    states = task_states(failed)
    assert states["wait_for_span"] == "success" and states["validate"] == "failed", states
    assert all(states[t] == "upstream_failed" for t in DOWNSTREAM), states  # train never ran
    assert _try_number(failed, "validate") == 1  # bad data is not retried
    runs = gate_home / "runs" / "ctr" / "dt=2026-11-02"
    run_dir = runs / safe_run_id(failed.run_id)
    assert not (run_dir / "model").exists() and not (run_dir / "preprocess").exists()
    summary = json.loads((run_dir / "validation" / "validation.json").read_text())
    assert summary["gate"] == "failed"
    assert [f["rule"] for f in summary["failed"]] == ["click_rate"]
    assert summary["failed"][0]["observed"] == "observed 0, expected [0.005, 0.2]"
    assert Path(summary["data_docs"]).exists()
    marker = gate_home / "quarantine" / "ctr" / "dt=2026-11-02.json"
    assert json.loads(marker.read_text())["run_id"] == failed.run_id
    assert part.read_bytes() == raw_bytes  # raw data untouched

    # Overridden by a person: validate passes, the reason is recorded, quarantine lifted.
    # (The training tasks are marked success without running: the gate is what is tested.)
    passed = dag.test(logical_date=dt.datetime(2026, 11, 3, tzinfo=UTC),
                      run_conf={"window_days": 2,
                                "override_validation_reason": "labels arrive late today"},
                      mark_success_pattern="|".join(DOWNSTREAM))
    states = task_states(passed)
    assert states["validate"] == "success", states
    summary = json.loads((runs / safe_run_id(passed.run_id) / "validation" / "validation.json")
                         .read_text())
    assert summary["gate"] == "overridden"
    assert summary["override_reason"] == "labels arrive late today"
    assert not marker.exists()


def test_missing_span_times_out_clearly(airflow_home, gate_home):
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session

    dag = _dag()
    # A manual run waits only for a span it names (with none it would take the newest
    # delivered day: tests/unit/test_span_choice.py).
    run = dag.test(logical_date=dt.datetime(2026, 11, 6, tzinfo=UTC),  # span 11-05: absent
                   run_conf={"span": "2026-11-05", "span_timeout_minutes": 0.05})
    states = task_states(run)
    assert states["wait_for_span"] == "failed", states
    assert states["validate"] == "upstream_failed" and states["train"] == "upstream_failed"
    with create_session() as session:
        reschedules = session.query(TaskReschedule).filter(
            TaskReschedule.ti_id.in_([ti.id for ti in run.get_task_instances(session=session)
                                      if ti.task_id == "wait_for_span"])).count()
    assert reschedules >= 1  # it gave its slot back between pokes
