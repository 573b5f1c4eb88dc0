"""Alerts a person gets (retrain.orchestration.alerts): each kind reaches a receiver on
127.0.0.1 (a JSON webhook; SMTP through the smtp provider's SmtpNotifier) naming the run,
the span and the reason, and never the content of a data file; without the connection
nothing is sent and nothing fails. The callbacks are called here directly with small
stand-ins for Airflow's context; tests/integration/test_alerts_dag.py runs them in a real
`dag.test()` and through Airflow's own deadline machinery.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import socket
from types import SimpleNamespace

import pytest

from alert_receivers import html_of, smtp_connection, smtp_sink, webhook, webhook_connection
from retrain.common import quarantine
from retrain.common.registry import Registry
from retrain.common.run_context import RunContext

DAG_ID = "ctr_daily_retrain"
SPAN = "2026-11-02"
PLANTED = "planted-row-value-7f3a"      # a value only a data file holds


@pytest.fixture
def alerts():
    from retrain.orchestration import alerts
    return alerts


@pytest.fixture
def hook(monkeypatch):
    with webhook() as (port, received):
        monkeypatch.setenv("AIRFLOW_CONN_RETRAIN_ALERTS",
                           webhook_connection(port, password="hook-token"))
        yield received


def _ctx(tmp_path, run_id: str) -> RunContext:
    return RunContext.create("ctr", SPAN, tmp_path, run_id)


def _ti(ctx: RunContext | None, task_id: str, run_id: str):
    """What on_task_failure reads of Airflow's RuntimeTaskInstance."""
    pinned = ctx.to_xcom() if ctx else None
    return SimpleNamespace(
        dag_id=DAG_ID, run_id=run_id, task_id=task_id, try_number=1,
        start_date=dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5),
        log_url="http://airflow.example/log",
        xcom_pull=lambda task_ids: pinned if task_ids == "resolve_span" else None)


def _only(received: list[dict], kind: str) -> dict:
    found = [a for a in received if a["kind"] == kind]
    assert len(found) == 1, received
    return found[0]


def test_a_failed_task_alerts_with_task_and_error_type(alerts, hook, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    run_id = "manual__failed"
    ctx = _ctx(tmp_path, run_id)
    alerts.on_task_failure({"ti": _ti(ctx, "train", run_id),
                            "exception": AirflowFailException(f"bad {PLANTED}")})
    got = _only(hook, "run_failed")
    assert (got["dag_id"], got["run_id"], got["span"]) == (DAG_ID, run_id, SPAN)
    assert got["details"]["task_id"] == "train"
    assert got["details"]["error_type"] == "AirflowFailException"
    assert "train" in got["reason"] and "AirflowFailException" in got["reason"]
    assert PLANTED not in json.dumps(got)            # the message is not echoed
    assert got["_headers"]["Authorization"] == "Bearer hook-token"
    assert got["_path"] == "/alerts"


def test_a_run_refused_before_its_span_was_pinned_still_alerts(alerts, hook):
    alerts.on_task_failure({"ti": _ti(None, "resolve_span", "manual__refused"),
                            "exception": ValueError("x"), "params": {"span": SPAN}})
    got = _only(hook, "run_failed")
    assert got["span"] == SPAN and got["details"]["error_type"] == "ValueError"


def test_a_quarantined_span_names_its_rules_never_its_data(alerts, hook, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    run_id = "manual__quarantined"
    ctx = _ctx(tmp_path, run_id)
    report = tmp_path / "validation.json"
    report.write_text(json.dumps({"failed": [
        {"rule": "click_rate", "observed": f"observed {PLANTED}"},
        {"rule": "user_id_not_null", "observed": "3 nulls"}]}))
    quarantine.settle(ctx.quarantine_dir, span=f"dt={SPAN}", span_dir=ctx.span_dir,
                      gate="failed", run_id=run_id, failed=[f"[click_rate] {PLANTED}"],
                      report=str(report))
    alerts.on_task_failure({"ti": _ti(ctx, "validate", run_id),
                            "exception": AirflowFailException("validation failed")})
    got = _only(hook, "quarantined")
    assert not [a for a in hook if a["kind"] == "run_failed"]   # one alert, the precise one
    assert (got["run_id"], got["span"]) == (run_id, SPAN)
    assert got["details"]["rules"] == ["click_rate", "user_id_not_null"]
    assert "click_rate" in got["reason"] and got["details"]["task_id"] == "validate"
    assert PLANTED not in json.dumps(got)


def test_an_older_window_day_quarantined_by_this_run_alerts_once(alerts, hook, tmp_path):
    run_id = "manual__window"
    ctx = _ctx(tmp_path, run_id)
    quarantine.settle(ctx.quarantine_dir, span="dt=2026-11-01", span_dir="raw/dt=2026-11-01",
                      gate="failed", run_id=run_id,
                      failed=["content_changed: part-0.parquet digest differs"], report=None)
    quarantine.settle(ctx.quarantine_dir, span="dt=2026-10-31", span_dir="raw/dt=2026-10-31",
                      gate="failed", run_id="an earlier run", failed=["x: y"], report=None)
    days = ["2026-10-31", "2026-11-01"]
    assert alerts.spans_quarantined(ctx, DAG_ID, days) == 1
    assert alerts.spans_quarantined(ctx, DAG_ID, days) == 0      # sent once per run and day
    got = _only(hook, "quarantined")
    assert got["span"] == "2026-11-01" and got["details"]["rules"] == ["content_changed"]
    assert got["details"]["run_span"] == SPAN


def _publish_model(home) -> dict:
    model = home / "exported"
    model.mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"not a real model")
    return Registry(home / "registry").publish(
        model, "ctr", {"data_span": "2026-10-01", "run_id": "old", "dag_id": DAG_ID})


def test_a_rejected_candidate_alerts_with_the_gates_reasons(alerts, hook, tmp_path,
                                                            monkeypatch):
    from airflow.sdk.exceptions import AirflowSkipException

    from retrain.orchestration import dag_defaults, push

    run_id = "scheduled__rejected"
    ctx = _ctx(tmp_path, run_id)
    _publish_model(tmp_path)
    # Any published model is "too old" with a limit this small: the same skip also checks age.
    monkeypatch.setenv("RETRAIN_MODEL_MAX_AGE_HOURS", "0.0000001")
    monkeypatch.setattr(push, "publish_if_blessed",
                        lambda **kw: {"published": None, "code_version": "test"})
    evaluation = {"blessed": False, "candidate": {"auc": 0.61, "log_loss": 0.4},
                  "reasons": ["auc 0.610 is below the published model's 0.640"],
                  "baseline_version": 1}
    with pytest.raises(AirflowSkipException):
        dag_defaults.publish_or_skip("ctr", None, ctx, dag_run=SimpleNamespace(dag_id=DAG_ID),
                                     outlet_events={}, evaluation=evaluation,
                                     headline=("auc",))
    got = _only(hook, "rejected")
    assert (got["run_id"], got["span"]) == (run_id, SPAN)
    assert "below the published model" in got["reason"]
    assert got["details"] == {"model": "ctr", "decided_by": "gate", "baseline_version": 1,
                              "auc": 0.61}
    stale = _only(hook, "stale_model")
    assert stale["details"]["version"] == 1 and stale["details"]["data_span"] == "2026-10-01"


def test_a_shadow_run_is_no_rejection(alerts, hook, tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowSkipException

    from retrain.orchestration import dag_defaults, push

    ctx = RunContext.create("ctr", SPAN, tmp_path, "backfill__x", shadow=True)
    monkeypatch.setattr(push, "publish_if_blessed",
                        lambda **kw: {"published": None, "code_version": "test"})
    with pytest.raises(AirflowSkipException):
        dag_defaults.publish_or_skip("ctr", None, ctx, dag_run=SimpleNamespace(dag_id=DAG_ID),
                                     outlet_events={}, headline=("auc",),
                                     evaluation={"blessed": False, "reasons": ["worse"]})
    assert hook == []


def test_the_serving_models_age_against_the_limit(alerts, hook, tmp_path, monkeypatch):
    ctx = _ctx(tmp_path, "scheduled__stale")
    meta = _publish_model(tmp_path)
    published = dt.datetime.fromisoformat(meta["created_at"])
    assert alerts.stale_model(ctx, DAG_ID, now=published + dt.timedelta(hours=30)) is None
    monkeypatch.setenv("RETRAIN_MODEL_MAX_AGE_HOURS", "24")       # off until set
    assert alerts.stale_model(ctx, DAG_ID, now=published + dt.timedelta(hours=23)) is None
    alert = alerts.stale_model(ctx, DAG_ID, now=published + dt.timedelta(hours=30))
    got = _only(hook, "stale_model")
    assert got["details"]["age_hours"] == 30.0 and got["details"]["limit_hours"] == 24.0
    assert "30.0 h" in got["reason"] and "24 h" in got["reason"]
    assert alert.kind == "stale_model" and got["span"] == SPAN


def test_an_unapproved_candidate_names_who_decided(alerts, hook, tmp_path):
    ctx = _ctx(tmp_path, "manual__review")
    alerts.candidate_rejected(ctx, DAG_ID, ["calibration drifts on new users"],
                              decided_by="reviewer alice")
    got = _only(hook, "unapproved")
    assert got["details"]["decided_by"] == "reviewer alice"
    assert "calibration drifts" in got["reason"]


def _deadline_context(run_type="scheduled", queued_at="2026-11-03T00:00:05+00:00"):
    """The context Airflow's Deadline.handle_miss hands the callback: the run as the REST
    API's DAGRunResponse dumps it, and the deadline."""
    return {"dag_run": {"dag_run_id": "scheduled__2026-11-03T00:00:00+00:00",
                        "dag_id": DAG_ID, "logical_date": "2026-11-03T00:00:00Z",
                        "queued_at": queued_at, "run_after": "2026-11-03T00:00:00Z",
                        "state": "running", "run_type": run_type, "conf": {}},
            "deadline": {"id": "0192", "deadline_time": dt.datetime(
                2026, 11, 3, 6, tzinfo=dt.timezone.utc)}}


def test_a_missed_deadline_alerts_and_a_late_created_run_does_not(alerts, hook):
    assert asyncio.run(alerts.deadline_missed(6.0, context=_deadline_context())) == "sent"
    got = _only(hook, "deadline_missed")
    assert got["run_id"] == "scheduled__2026-11-03T00:00:00+00:00"
    assert got["span"] == SPAN                      # the day before the logical date
    assert "2026-11-03 06:00 UTC" in got["reason"] and "running" in got["reason"]
    for late in (_deadline_context(run_type="backfill"),
                 _deadline_context(queued_at="2026-11-20T09:00:00+00:00")):
        assert asyncio.run(alerts.deadline_missed(6.0, context=late)).startswith("not sent")
    assert len(hook) == 1


def test_the_deadline_is_off_unless_configured(alerts, monkeypatch):
    from airflow.sdk import AsyncCallback, DeadlineReference

    from retrain.orchestration import dag_defaults

    assert alerts.publish_deadline() is None and dag_defaults.daily()["deadline"] is None
    assert dag_defaults.daily()["default_args"]["on_failure_callback"] is alerts.on_task_failure
    monkeypatch.setenv("RETRAIN_PUBLISH_DEADLINE_HOURS", "6")
    deadline = dag_defaults.daily()["deadline"]
    assert deadline.reference == DeadlineReference.DAGRUN_LOGICAL_DATE
    assert deadline.interval == dt.timedelta(hours=6)
    assert isinstance(deadline.callback, AsyncCallback)
    assert deadline.callback.path == "retrain.orchestration.alerts.events.deadline_missed"
    assert deadline.callback.kwargs == {"limit_hours": 6.0}


def test_smtp_delivers_through_the_smtp_providers_notifier(alerts, tmp_path, monkeypatch):
    ctx = _ctx(tmp_path, "scheduled__mail")
    with smtp_sink() as (port, received):
        monkeypatch.setenv("AIRFLOW_CONN_RETRAIN_ALERTS", smtp_connection(port))
        assert alerts.candidate_rejected(ctx, DAG_ID, ["log_loss {{ 7 * 6 }} < <b>x</b>"])
    (message,) = received
    assert message["To"] == "oncall@example.com"
    assert message["Subject"] == f"[retrain] rejected: {DAG_ID} span {SPAN}"
    body = html_of(message)
    assert "scheduled__mail" in body and SPAN in body
    # The reason is data to the template, never a template itself; and it is escaped.
    assert "{{ 7 * 6 }}" in body and "&lt;b&gt;x&lt;/b&gt;" in body


def test_without_the_connection_nothing_is_sent_and_it_is_said_once(alerts, monkeypatch,
                                                                      caplog, tmp_path):
    from retrain.orchestration.alerts import delivery

    monkeypatch.delenv("AIRFLOW_CONN_RETRAIN_ALERTS", raising=False)
    monkeypatch.setattr(delivery, "_said_absent", False)
    ctx = _ctx(tmp_path, "manual__quiet")
    with caplog.at_level(logging.INFO, logger="retrain.alerts"):
        assert not alerts.candidate_rejected(ctx, DAG_ID, ["worse"])
        assert not alerts.candidate_rejected(ctx, DAG_ID, ["worse"])
    said = [r for r in caplog.records if "retrain_alerts" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO


def test_a_receiver_that_is_down_fails_nothing_and_is_not_named(alerts, monkeypatch, caplog,
                                                                tmp_path):
    with socket.socket() as s:                 # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AIRFLOW_CONN_RETRAIN_ALERTS", webhook_connection(port))
    with caplog.at_level(logging.INFO, logger="retrain.alerts"):
        assert not alerts.candidate_rejected(_ctx(tmp_path, "manual__down"), DAG_ID, ["x"])
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and "URLError" in warned[-1]
    assert not [m for m in warned if f"{port}" in m]       # the URL may be the secret


def test_an_smtp_connection_without_recipients_says_which_field(alerts, monkeypatch, caplog,
                                                                tmp_path):
    monkeypatch.setenv("AIRFLOW_CONN_RETRAIN_ALERTS",
                       json.dumps({"conn_type": "smtp", "host": "127.0.0.1"}))
    with caplog.at_level(logging.WARNING, logger="retrain.alerts"):
        assert not alerts.candidate_rejected(_ctx(tmp_path, "manual__noto"), DAG_ID, ["x"])
    assert any('key "to"' in r.getMessage() for r in caplog.records)
