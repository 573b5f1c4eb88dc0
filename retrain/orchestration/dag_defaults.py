"""What every retrain DAG shares: where artifacts live, the daily schedule and retries,
the alerts (a failed task, a rejected candidate, the publishing deadline) and the params
every family has (span, window, eval share, shadow, forced publish).

Imported by the DAG files, so airflow.sdk and the standard library only: parsing a DAG
must stay cheap.
"""
from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

from airflow.sdk import Param

from retrain.common import paths
from retrain.common.run_context import RunContext
from retrain.common.settings import settings
from retrain.orchestration import alerts

def home() -> Path:
    """Artifact root: RETRAIN_HOME, else the checkout's var/ (one rule: retrain.common.paths)."""
    return paths.artifact_root()


# One run a day, no catch-up on deploy (backfills are explicit), one active run at a time
# (runs of consecutive days compare against what the previous one published). The start
# date is far back on purpose: with catchup off it schedules nothing old, and `airflow dags
# test` / backfills of historical logs (last year's export) run their tasks instead of
# "succeeding" with no task run because the day is before the DAG's start.
SCHEDULE_ENV = "RETRAIN_SCHEDULE"
MAX_WINDOW_ENV = "RETRAIN_MAX_WINDOW_DAYS"
# Preprocessing memory is flat in the window (one tf.Transform dataset past a few days,
# bench/preprocess_window.py), but a longer window is a longer run: the bound is a
# deployment's choice, read when the DAG is parsed.
DEFAULT_MAX_WINDOW_DAYS = 60


def max_window_days() -> int:
    """RETRAIN_MAX_WINDOW_DAYS (retrain.common.settings; a ConfigError names a bad value)."""
    return settings().max_window_days


def daily(**overrides) -> dict:
    """DAILY with the schedule read when the DAG is built: RETRAIN_SCHEDULE (a cron
    expression, a preset, or "none": runs only when triggered or backfilled, so unpausing
    makes no catch-up run; what `retrain demo` uses), else @daily; and how many runs may be
    active at once, RETRAIN_MAX_ACTIVE_RUNS (a backfill's days overlap up to its own
    max_active_runs, which the UI's dialog caps at this)."""
    current = settings()
    schedule = current.schedule
    return {**DAILY, "schedule": None if schedule.lower() == "none" else schedule,
            "max_active_runs": current.max_active_runs,
            "deadline": alerts.publish_deadline(), **overrides}


DAILY = {
    "schedule": "@daily",
    # The Unix epoch: a run for any day a log can carry runs its tasks. A later start
    # made a run for an older logical date (a 1998 export) "succeed" with no task run.
    "start_date": dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc),
    "catchup": False,
    # Every task's final failure alerts a person (docs/alerts.md; no connection: nothing).
    "default_args": {"retries": 1, "retry_delay": dt.timedelta(minutes=1),
                     "on_failure_callback": alerts.on_task_failure},
}


# A poke only looks (at a marker, at other runs' states), so a failed one is retried more
# than a step: Airflow may fail a reschedule-mode sensor between two pokes on its own
# (apache/airflow#71172). A sensor's timeout is final (AirflowSensorTimeout: no retry).
SENSOR_RETRIES = {"retries": 3, "retry_delay": dt.timedelta(seconds=20)}


def span_params(what: str, window_help: str, eval_help: str) -> dict[str, Param]:
    """The span to train on (default: the day before the logical date), the window of
    days ending at it and the held-out share."""
    return {
        "span": Param(None, type=["null", "string"], format="date",
                      description=f"Day of {what} to train on (YYYY-MM-DD). "
                                  "Empty: the day before the run's logical date; a manual "
                                  "run whose day before is not delivered takes the newest "
                                  "delivered day (its log says so)."),
        "window_days": Param(3, type="integer", minimum=1, maximum=max_window_days(),
                             description=f"{window_help} At most {max_window_days()} "
                                         f"({MAX_WINDOW_ENV})."),
        "eval_percent": Param(20, type="integer", minimum=1, maximum=50, description=eval_help),
    }


def publish_params() -> dict[str, Param]:
    """Shadow runs (never publish) and a forced publish with a recorded reason."""
    return {
        "shadow": Param(None, type=["null", "boolean"],
                        description="Train and evaluate but never publish. Empty: shadow for "
                                    "backfill runs, publish for scheduled and manual runs."),
        "force_bless_reason": Param(None, type=["null", "string"], minLength=1,
                                    description="Publish even if the gate rejects; "
                                                "the reason is recorded in the registry."),
    }


def publish_or_skip(model_name: str, asset, ctx: RunContext, *, dag_run, outlet_events,
                    evaluation: dict, headline: tuple[str, ...], **publish_kwargs) -> dict:
    """Body of every family's push task: publish a blessed candidate through the registry
    and attach the version to the model Asset's event; a shadow run or a rejected candidate
    is recorded and the task skipped: skipped, not failed (the run did its job), and a
    skipped task emits no asset event, so nothing downstream sees an unpublished model.
    A candidate identical to the published model is skipped the same way ("unchanged",
    naming the version it matches, in the log and the run summary; no alert but the age
    check).
    A rejected candidate alerts (a shadow run does not), and so does a serving model that
    stays past its age limit (retrain.orchestration.alerts).

    Bad data fails the task without retry, as the factory's stages do: a StaleBaseline (the
    version evaluation compared against is no longer current, design rule 20: only a fresh
    evaluation can decide), a broken registry, a step that rejected its input."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from retrain.common.errors import BadData
    from retrain.common.errors import BadDataFailed
    from retrain.orchestration.push import publish_if_blessed

    try:
        summary = publish_if_blessed(
            model_name=model_name, registry_root=f"{ctx.home}/registry", home=ctx.home,
            run_dir=ctx.run_dir, dag_id=dag_run.dag_id, run_id=ctx.run_id,
            span=ctx.span, span_dir=ctx.span_dir, evaluation=evaluation,
            shadow=ctx.shadow, headline=headline, **publish_kwargs)
    except (BadData, BadDataFailed) as e:   # a retry cannot help (StaleBaseline among them)
        raise AirflowFailException(str(e)) from None
    published = summary["published"]
    unchanged = summary.get("unchanged")
    if unchanged and not ctx.shadow:
        # The candidate is the model already published: nothing new to serve, so no
        # asset event (the model's consumers would redo their work for the same model),
        # no rejection alert. Skipped, with the version it matches as the task's last line.
        logging.getLogger("retrain.dag").info("push skipped: %s", unchanged["message"])
        alerts.stale_model(ctx, dag_run.dag_id)   # the serving model stays: how old is it?
        raise AirflowSkipException(unchanged["message"])
    if ctx.shadow or not published:
        # Airflow logs a skip as a bare "Skipping task.": the reason is logged first, as
        # the task's last line of its own, where the person reading the log looks.
        reason = (f"shadow run: evaluated, not published (blessed={evaluation['blessed']})"
                  if ctx.shadow else
                  "candidate not blessed: " + "; ".join(evaluation["reasons"]))
        logging.getLogger("retrain.dag").log(
            logging.INFO if ctx.shadow else logging.WARNING, "push skipped: %s", reason)
        if not ctx.shadow:
            alerts.candidate_rejected(
                ctx, dag_run.dag_id, evaluation["reasons"],
                details={"baseline_version": evaluation.get("baseline_version"),
                         **{m: (evaluation.get("candidate") or {}).get(m) for m in headline}})
        alerts.stale_model(ctx, dag_run.dag_id)   # the serving model stays: how old is it?
        raise AirflowSkipException(reason)
    outlet_events[asset].extra = {
        "model": model_name, "version": published["version"], "span": ctx.span,
        **{m: published["metrics"].get(m) for m in headline},
        "run_id": ctx.run_id, "code_version": summary["code_version"]}
    return {"published": published, "blessed": True}
