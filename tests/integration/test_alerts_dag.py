"""Alerts from a real `ctr_daily_retrain` run (`dag.test()`, SQLite), received on a JSON
webhook on 127.0.0.1 through the `retrain_alerts` connection.

A span with no clicks fails `validate` (the cheapest failing run:
test_validation_gate_dag.py's data): the task's failure callback sends one `quarantined`
alert naming the run, the span and the failed rule. The DAG's Deadline Alert
(RETRAIN_PUBLISH_DEADLINE_HOURS) made a deadline row when the run was created; the run
failed, so nothing pruned it. `dag.test()` has no scheduler loop and no triggerer, so the
test plays both with Airflow's own code: `Deadline.handle_miss` queues the callback's
trigger as the scheduler does when the time has passed, and the trigger is run as the
triggerer runs it; the `deadline_missed` alert arrives. A span that never arrives fails
`wait_for_span`: a `run_failed` alert naming the task and AirflowSensorTimeout.
"""
from __future__ import annotations

import asyncio
import datetime as dt

import pyarrow.parquet as pq
import pytest

from alert_receivers import webhook, webhook_connection
from dag_helpers import environ, load_dag, task_states
from test_validation_gate_dag import gate_home  # noqa: F401  (the fixture: two tiny days)

pytestmark = pytest.mark.integration

SPAN = "2026-11-02"


def _no_clicks(home) -> None:
    part = home / "raw" / "ctr" / f"dt={SPAN}" / "part-00000.parquet"
    table = pq.read_table(part)
    pq.write_table(table.set_column(table.schema.get_field_index("click"), "click",
                                    [[0] * table.num_rows]), part)


def _run_missed_deadline(dag_run) -> list:
    """Play the scheduler (the deadline has passed) and the triggerer (run the callback's
    trigger) for the run's one deadline; returns the trigger's events."""
    from airflow._shared.module_loading import import_string
    from airflow.models.deadline import Deadline
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        deadlines = session.scalars(
            select(Deadline).where(Deadline.dagrun_id == dag_run.id)).all()
        assert len(deadlines) == 1, deadlines
        deadline = deadlines[0]
        assert not deadline.missed
        deadline.handle_miss(session)
        session.flush()
        row = deadline.callback.trigger
        trigger = import_string(row.classpath)(**row.kwargs)

        async def events():
            return [event async for event in trigger.run()]

        got = asyncio.run(events())
        for event in got:
            deadline.callback.handle_event(event, session)
        return [(e.payload["state"], e.payload.get("body")) for e in got]


def test_a_quarantined_span_and_a_missed_deadline_reach_the_webhook(
        airflow_home, gate_home):  # noqa: F811  (the imported fixture)
    _no_clicks(gate_home)
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    with webhook() as (port, received), environ(
            AIRFLOW_CONN_RETRAIN_ALERTS=webhook_connection(port),
            RETRAIN_PUBLISH_DEADLINE_HOURS="6"):
        dag = load_dag("ctr_daily_retrain", "ctr_daily_retrain_alerts").ctr_daily_retrain()
        assert dag.deadline                    # built while the setting was there
        run = dag.test(logical_date=now, run_conf={"span": SPAN, "window_days": 2})
        states = task_states(run)
        assert states["validate"] == "failed" and states["train"] == "upstream_failed", states

        # One alert: the precise one, no run_failed besides.
        assert [a["kind"] for a in received] == ["quarantined"], received
        alert = received[0]
        assert (alert["dag_id"], alert["run_id"], alert["span"]) == (
            "ctr_daily_retrain", run.run_id, SPAN)
        assert alert["details"]["rules"] == ["click_rate"]
        assert alert["details"]["task_id"] == "validate"
        assert alert["details"]["error_type"] == "AirflowFailException"
        assert "click_rate" in alert["reason"]

        assert _run_missed_deadline(run)[-1] == ("success", "sent")
        missed = received[-1]
        assert missed["kind"] == "deadline_missed"
        assert (missed["run_id"], missed["span"]) == (run.run_id, SPAN)
        due = now + dt.timedelta(hours=6)
        assert missed["details"]["deadline"] == due.isoformat()
        assert f"{due:%Y-%m-%d %H:%M} UTC" in missed["reason"]
        assert missed["details"]["run_state"] == "failed"


def test_a_span_that_never_arrives_alerts_run_failed(airflow_home, gate_home):  # noqa: F811
    with webhook() as (port, received), environ(
            AIRFLOW_CONN_RETRAIN_ALERTS=webhook_connection(port)):
        dag = load_dag("ctr_daily_retrain", "ctr_daily_retrain_alerts_late").ctr_daily_retrain()
        # A logical date no other test uses (dag.test() replaces a run of the same date).
        run = dag.test(logical_date=dt.datetime(2026, 11, 6, 7, tzinfo=dt.timezone.utc),
                       run_conf={"span": "2026-11-05", "span_timeout_minutes": 0.05})
        assert task_states(run)["wait_for_span"] == "failed"
    assert [a["kind"] for a in received] == ["run_failed"], received
    alert = received[0]
    assert (alert["run_id"], alert["span"]) == (run.run_id, "2026-11-05")
    assert alert["details"]["task_id"] == "wait_for_span"
    assert alert["details"]["error_type"] == "AirflowSensorTimeout"
    assert "wait_for_span" in alert["reason"] and "AirflowSensorTimeout" in alert["reason"]
