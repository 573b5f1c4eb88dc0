"""What each alert kind says, and where the DAG factory raises it.

- `on_task_failure`: every task's on_failure_callback (dag_defaults). A failure that
  quarantined a span (validation, or a custody check) is a `quarantined` alert naming the
  failed rules; any other is `run_failed` naming the task, the try and the error type.
- `spans_quarantined`: older window days this run's validation quarantined and left out
  (the run goes on, so no failure says it).
- `window_days_left_out`: the run's window lost days (failed validation, quarantined, not
  delivered): it trains without them within the window policy, or stops past it; either
  way a person is told which days and why (`days_left_out`).
- `candidate_rejected`: the gate did not bless the candidate (`rejected`); the same call
  with `decided_by` naming a person is the hook of a human approval step (`unapproved`).
- `stale_model`: the serving model is older than RETRAIN_MODEL_MAX_AGE_HOURS (checked when
  a run ends without publishing: rejected, shadow or failed).
- `publish_deadline` / `deadline_missed`: the DAG's Deadline Alert and the callback the
  triggerer awaits when a run has not finished by RETRAIN_PUBLISH_DEADLINE_HOURS after
  its logical date.

Reads the run's XCom, its quarantine markers and validation report (rule ids only) and
the registry's meta; never a data file.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import logging
from pathlib import Path
from typing import Iterable

from retrain.common import paths
from retrain.common.atomic import read_json
from retrain.common.run_context import RunContext
from retrain.orchestration.alerts.delivery import Alert, send

log = logging.getLogger("retrain.alerts")
# (kind, run_id, span) sent by this process: a task's failure callback runs in the task's
# own process, after its body, so a span alerted by the body is not alerted twice.
_sent: set[tuple[str, str, str | None]] = set()


def _send_once(alert: Alert, dag=None) -> bool:
    key = (alert.kind, alert.run_id, alert.span)
    if key in _sent:
        return False
    _sent.add(key)
    return send(alert, dag)


def _utc(value) -> dt.datetime | None:
    """A datetime or an ISO string (what a JSON round trip leaves) as an aware datetime."""
    if value is None or value == "":
        return None
    if not isinstance(value, dt.datetime):
        value = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


# ------------------------------------------------------------------ quarantine

def _rules(marker: dict) -> list[str]:
    """The failed rule ids: from the validation report the marker names (its `failed`
    entries' `rule`, the ids override_validation_rules takes), else the label before the
    first colon of each marker item (`content_changed`, `unreadable part`)."""
    report = marker.get("report")
    if report:
        try:
            failed = read_json(report).get("failed") or []
            rules = [str(f["rule"]) for f in failed if isinstance(f, dict) and f.get("rule")]
            if rules:
                return rules
        except (OSError, ValueError, AttributeError):
            pass
    return sorted({str(item).split(":", 1)[0].strip() for item in marker.get("failed") or []})


def _quarantine_alert(path: Path, marker: dict, dag_id: str, run_id: str,
                      details: dict) -> Alert:
    span = str(marker.get("span") or path.stem).removeprefix("dt=")
    rules = _rules(marker)
    return Alert("quarantined", dag_id, run_id, span,
                 reason=f"span {span} failed validation ({', '.join(rules) or 'no rule named'})"
                        " and is quarantined; a run with override_validation_reason lets it"
                        " through",
                 details={"rules": rules, "marker": str(path), "report": marker.get("report"),
                          **details})


def _markers(quarantine_dir: str, run_id: str, since: dt.datetime | None) -> list:
    """(path, marker) of the spans `run_id` quarantined, at or after `since`."""
    folder = Path(quarantine_dir)
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        if ".released-" in path.name:
            continue
        try:
            marker = read_json(path)
            at = _utc(marker.get("quarantined_at"))
        except (OSError, ValueError):
            continue
        if marker.get("run_id") == run_id and (since is None or (at and at >= since)):
            found.append((path, marker))
    return found


def spans_quarantined(ctx: RunContext, dag_id: str, days: Iterable[str], dag=None) -> int:
    """Alert for each of `days` whose quarantine marker this run wrote; how many sent."""
    sent = 0
    for day in days:
        path = Path(ctx.quarantine_dir) / f"{paths.partition_name(day)}.json"
        try:
            marker = read_json(path)
        except (OSError, ValueError):
            continue
        if marker.get("run_id") == ctx.run_id:
            sent += _send_once(_quarantine_alert(
                path, marker, dag_id, ctx.run_id,
                {"left_out_of_window": True, "run_span": ctx.span}), dag)
    return sent


def window_days_left_out(ctx: RunContext, dag_id: str, verdict: dict, dag=None) -> bool:
    """The run's window lost days (`verdict`: retrain.common.window.policy's): one alert
    per run naming the days, why each went (a quarantined day by its rule ids), the policy
    and whether the run goes on without them or is stopped."""
    days = []
    for item in verdict["left_out"]:
        path = Path(ctx.quarantine_dir) / f"{paths.partition_name(item['span'])}.json"
        try:
            marker = read_json(path)
        except (OSError, ValueError):
            marker = None
        why = (f"quarantined ({', '.join(_rules(marker)) or 'no rule named'})"
               if isinstance(marker, dict) else str(item["reason"]))
        days.append({"span": item["span"], "why": why})
    n, window = len(days), verdict["counted"]
    outcome = ("the run goes on without them" if verdict["ok"] else
               "the run is stopped: nothing is trained on this window")
    return _send_once(Alert(
        "days_left_out", dag_id, ctx.run_id, ctx.span,
        reason=f"{n} of the {window} day(s) of the window ending {ctx.span} left out "
               f"({', '.join(d['span'] for d in days)}); the window policy allows "
               f"{verdict['allowed']} (max_left_out_percent={verdict['max_left_out_percent']:g})"
               f": {outcome}",
        details={"left_out": days, "allowed": verdict["allowed"],
                 "max_left_out_percent": verdict["max_left_out_percent"],
                 "window_days": verdict["window_days"], "counted": window,
                 "before_log": verdict["before_log"], "stopped": not verdict["ok"]}), dag)


# ------------------------------------------------------------------ failed task

def _run_of(ti) -> RunContext | None:
    """The run's context as resolve_span pinned it (None: it never got that far)."""
    try:
        pinned = ti.xcom_pull(task_ids="resolve_span")
    except Exception:  # noqa: BLE001 - no XCom to read is no context
        return None
    return RunContext.from_xcom(pinned) if isinstance(pinned, dict) else None


def on_task_failure(context) -> None:
    """on_failure_callback of every task: one alert per failed task (a retry is not a
    failure). Never raises: an alert must not change how a task ends."""
    try:
        _task_failed(context)
    except Exception as e:  # noqa: BLE001 - reported, never raised
        log.warning("alerts: the failure alert could not be prepared: %s", type(e).__name__)


def _task_failed(context) -> None:
    from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

    ti, error, dag = context["ti"], context.get("exception"), context.get("dag")
    run = _run_of(ti)
    error_type = type(error).__name__ if error is not None else "unknown"
    details = {"task_id": ti.task_id, "try_number": ti.try_number, "error_type": error_type,
               "log_url": getattr(ti, "log_url", None)}
    start = _utc(getattr(ti, "start_date", None))
    since = start.replace(microsecond=0) if start else None
    quarantined = _markers(run.quarantine_dir, ti.run_id, since) if run else []
    for path, marker in quarantined:
        _send_once(_quarantine_alert(path, marker, ti.dag_id, ti.run_id, details), dag)
    if not quarantined:
        final = (" (not retried: bad data or a refusal)"
                 if isinstance(error, (AirflowFailException, AirflowSensorTimeout)) else "")
        span = run.span if run else (context.get("params") or {}).get("span")
        send(Alert("run_failed", ti.dag_id, ti.run_id, span,
                   reason=f"task {ti.task_id} failed on try {ti.try_number}: {error_type}"
                          f"{final}; its log says why", details=details), dag)
    if run is not None:
        stale_model(run, ti.dag_id, dag=dag)


# ------------------------------------------------------------------ the gate

def candidate_rejected(ctx: RunContext, dag_id: str, reasons: Iterable[str], *,
                       decided_by: str = "gate", details: dict | None = None,
                       dag=None) -> bool:
    """The candidate was not published: the gate did not bless it (kind `rejected`), or
    a person did not approve it (`decided_by` names them: kind `unapproved`)."""
    why = "; ".join(str(r) for r in reasons) or "no reason given"
    return send(Alert("rejected" if decided_by == "gate" else "unapproved", dag_id,
                      ctx.run_id, ctx.span, reason=f"candidate not published: {why}",
                      details={"model": ctx.family, "decided_by": decided_by,
                               **(details or {})}), dag)


# ------------------------------------------------------------------ freshness

def stale_model(ctx: RunContext, dag_id: str, *, now: dt.datetime | None = None,
                dag=None) -> Alert | None:
    """The serving model's age against RETRAIN_MODEL_MAX_AGE_HOURS (0: not checked); the
    alert (sent once per run) when it is older, else None (fresh, off, none published)."""
    from retrain.common.registry import Registry
    from retrain.common.settings import settings

    limit = settings().model_max_age_hours
    if not limit:
        return None
    try:
        current = Registry(Path(ctx.home) / "registry").current(ctx.family)
    except (OSError, ValueError) as e:
        log.warning("alerts: the %s registry could not be read for its age: %s",
                    ctx.family, type(e).__name__)
        return None
    published = _utc((current or {}).get("created_at"))
    if published is None:
        return None
    age = ((now or dt.datetime.now(dt.timezone.utc)) - published).total_seconds() / 3600
    if age <= limit:
        return None
    alert = Alert("stale_model", dag_id, ctx.run_id, ctx.span,
                  reason=f"the serving {ctx.family} model, version {current['version']} "
                         f"(trained on span {current.get('data_span')}), was published "
                         f"{age:.1f} h ago: over the {limit:g} h limit "
                         "(RETRAIN_MODEL_MAX_AGE_HOURS)",
                  details={"model": ctx.family, "version": current["version"],
                           "published_at": current.get("created_at"),
                           "data_span": current.get("data_span"),
                           "age_hours": round(age, 2), "limit_hours": limit})
    _send_once(alert, dag)
    return alert


# ------------------------------------------------------------------ deadline

def publish_deadline():
    """The DAG's Deadline Alert: a run not finished RETRAIN_PUBLISH_DEADLINE_HOURS after
    its logical date (for @daily: that time of day, UTC) alerts. 0: no deadline."""
    from retrain.common.settings import settings

    hours = settings().publish_deadline_hours
    if not hours:
        return None
    from airflow.sdk import AsyncCallback, DeadlineAlert, DeadlineReference

    return DeadlineAlert(reference=DeadlineReference.DAGRUN_LOGICAL_DATE,
                         interval=dt.timedelta(hours=hours),
                         callback=AsyncCallback(deadline_missed,
                                                kwargs={"limit_hours": hours}),
                         name="retrain: published in time")


def deadline_alert(context: dict, limit_hours: float) -> Alert | None:
    """The alert for a missed deadline, from the scheduler's small context (the run as the
    REST API shows it, the deadline); None for a run created after its own deadline (a
    backfill, a rerun of an old day): it could never have made it."""
    run, deadline = context.get("dag_run") or {}, context.get("deadline") or {}
    run_type = str(run.get("run_type") or "")
    due = _utc(deadline.get("deadline_time"))
    created = _utc(run.get("queued_at") or run.get("run_after"))
    run_id = str(run.get("dag_run_id") or run.get("run_id") or "")
    if run_type == "backfill" or (due and created and due <= created):
        log.info("deadline of %s passed before the run was created: no alert", run_id)
        return None
    logical = _utc(run.get("logical_date"))
    span = (run.get("conf") or {}).get("span") or (
        (logical.date() - dt.timedelta(days=1)).isoformat() if logical else None)
    when = f"{due:%Y-%m-%d %H:%M} UTC" if due else "its deadline"
    return Alert("deadline_missed", str(run.get("dag_id") or ""), run_id, span,
                 reason=f"not published by {when} ({limit_hours:g} h after the logical date,"
                        f" RETRAIN_PUBLISH_DEADLINE_HOURS): the run is "
                        f"{run.get('state') or 'unknown'}",
                 details={"deadline": due.isoformat() if due else None,
                          "logical_date": logical.isoformat() if logical else None,
                          "run_state": run.get("state"), "run_type": run_type,
                          "limit_hours": limit_hours})


async def deadline_missed(limit_hours: float, context: dict | None = None) -> str:
    """The Deadline Alert's callback (AsyncCallback: the triggerer awaits it)."""
    alert = deadline_alert(context or {}, limit_hours)
    if alert is None:
        return "not sent: the run was created after its deadline"
    return "sent" if await asyncio.to_thread(send, alert) else "not sent"
