"""The first two tasks of a family's DAG: pin the run's span and folder, then wait for the
span's data to be delivered.

Why first: a run whose inputs are wrong (a span in the future, a raw root or config file
outside the configured roots, a config that does not parse) is refused before the sensor
waits up to a week for it, and every later task reads the span and the folders from the
one RunContext pinned here (XCom carries it), never re-derives them.

airflow.sdk + stdlib + the descriptor at import; the checks, the span rules and the config
step are imported inside the tasks.
"""
from __future__ import annotations

import datetime as dt
import warnings
from pathlib import Path

from airflow.sdk import task
from airflow.sdk.exceptions import AirflowFailException

from retrain.common.run_context import RunContext
from retrain.common.settings import beam_flags, settings
from retrain.orchestration.dag_defaults import SENSOR_RETRIES, home as _home
from retrain.orchestration.families import Family

# Airflow's standard provider (1.21.0, the newest) imports `determine_kwargs` for
# @task.sensor from its deprecated location: one DeprecatedImportWarning in every task log,
# about a line of Airflow's own that no user can act on. Only that warning is silenced.
warnings.filterwarnings(
    "ignore", message=r"The `airflow\.utils\.operator_helpers\.determine_kwargs` attribute "
                      r"is deprecated")


def span_poke_seconds() -> float:
    """Seconds between two looks for the span's _SUCCESS marker (reschedule mode: no
    worker slot is held in between). Read from the environment when the DAG is built,
    not when this module is first imported, so each parse sees the current setting
    (tests poke every second; an import-time constant kept the first value: 300 s)."""
    return settings().span_poke_seconds


def resolve_span_task(family: Family, limit: dict[str, dt.timedelta]):
    """The `resolve_span` task of the family's DAG (call it with no argument)."""
    @task(execution_timeout=limit["resolve_span"])
    def resolve_span(params=None, logical_date=None, dag_run=None, run_id=None) -> dict:
        """Pin the span and the run's artifact folder once; every later task reads them."""
        import logging

        from retrain.common import paths, run_inputs
        from retrain.common.spans import derive_span, is_shadow, span_for_run

        run_after = getattr(dag_run, "run_after", None)
        span, why = derive_span(params.get("span"), logical_date, run_after), ""
        home = _home()
        config = params.get(family.config_param) or ""
        problems = run_inputs.check(span, raw_root=params.get("raw_root"), config=config,
                                    config_param=family.config_param)
        if not problems:   # only a root the checks allow is looked into
            raw_root = params.get("raw_root") or str(paths.default_raw_root(home, family.name))
            try:
                span, why = span_for_run(params.get("span"), logical_date, run_after,
                                         getattr(dag_run, "run_type", None), raw_root)
            except ValueError as e:
                problems.append(str(e))
            else:
                logging.getLogger("retrain.dag").info("span %s: %s", span, why)
        if config and not problems:
            from retrain.common.errors import BadDataFailed
            from retrain.orchestration.launch import run_step

            try:   # a broken config fails now, not after the sensor's wait; parsed
                run_step("components.config_check", {   # in a step, not in Airflow
                    "loader": family.config_loader, "path": str(Path(config).resolve())})
            except BadDataFailed as e:   # the loader names every problem, not content
                problems.append(f"{family.config_param} {config}: {e}")
        if problems:
            raise AirflowFailException("refusing the run: " + "; ".join(problems))
        from retrain.common.atomic import write_json
        from retrain.common.run_context import CONTEXT_FILE

        ctx = RunContext.create(
            family.name, span, home, run_id, raw_root=params.get("raw_root"),
            config=config and str(Path(config).resolve()),
            shadow=is_shadow(params.get("shadow"), getattr(dag_run, "run_type", None)),
            span_reason=why,
            beam_args=beam_flags(settings().beam_args)).to_xcom()
        write_json(Path(ctx["run_dir"]) / CONTEXT_FILE, ctx)
        return ctx

    return resolve_span


def wait_for_span_task(limit: dict[str, dt.timedelta]):
    """The `wait_for_span` sensor (call it with resolve_span's output); its poke interval
    is read now, when the DAG is built."""
    @task.sensor(mode="reschedule", poke_interval=span_poke_seconds(),
                 timeout=dt.timedelta(days=7), execution_timeout=limit["sensor_poke"],
                 **SENSOR_RETRIES)
    def wait_for_span(ctx: dict, params=None, ti=None, **context) -> bool:
        """Wait (holding no worker slot) for the producer's _SUCCESS marker of the span.
        The timeout is the `span_timeout_minutes` param (AirflowSensorTimeout: no retry)."""
        ctx = RunContext.from_xcom(ctx)
        import logging

        from airflow.sdk import timezone
        from airflow.sdk.exceptions import AirflowSensorTimeout

        marker = Path(ctx.span_dir) / "_SUCCESS"
        if marker.exists():
            from retrain.orchestration.pool_wait import mark_ended

            mark_ended(ctx.run_dir, "wait_for_span")   # validate was ready from now on
            return True
        first = ti.get_first_reschedule_date(context) or timezone.utcnow()
        waited = (timezone.utcnow() - first).total_seconds()
        limit = float(params["span_timeout_minutes"]) * 60
        if waited >= limit:
            raise AirflowSensorTimeout(
                f"span {ctx.span} not delivered: no {marker} after waiting "
                f"{waited / 60:.1f} min (span_timeout_minutes="
                f"{params['span_timeout_minutes']}). Check the upstream export of that "
                "day, then clear this task to wait again.")
        logging.getLogger("retrain.dag").info(
            "waiting for %s (%.1f of %s min waited)", marker, waited / 60,
            params["span_timeout_minutes"])
        return False

    return wait_for_span
