"""The DAG run's note, set when a retrain run ends: its span and its outcome in a line
("span 2026-11-03: Not published: sentiment: 124 labelled eval texts < min_eval_rows 200"),
so the Grid and the runs list say what a green run did without opening it.

Why a listener and not a task: Airflow 3.3's Task SDK gives a task no way to change its
own run's note (the execution API reads `dag_run.note`, and sets one only on a run a task
triggers; apache/airflow#64890 asks for it). The scheduler, which ends the run, calls the
plugins' `on_dag_run_success` / `on_dag_run_failed` listeners with the run's DB row in its
own session: the note is set there, from the run's folder (retrain.orchestration.
run_outcome). A note a person wrote (it carries their user id) is never replaced; one this
listener wrote before (the run was cleared and ended again) is.

Registered by retrain.orchestration.airflow_plugin; every Airflow process loads it, so
stdlib + the light outcome module only. A listener's error is logged by Airflow and never
fails the run.
"""
from __future__ import annotations

import logging

from airflow.listeners import hookimpl

from retrain.common import paths
from retrain.orchestration import run_outcome
from retrain.orchestration.families import FAMILIES

log = logging.getLogger("retrain.run_note")


def note_for(dag_id: str, run_id: str, failed_tasks: list[str],
             run_state: str | None) -> str | None:
    """The note of a retrain DAG's run (None: not a retrain DAG)."""
    family = next((f for f in FAMILIES.values() if f.dag_id == dag_id), None)
    if family is None:
        return None
    folder = run_outcome.run_folder(paths.artifact_root(), family.name, run_id)
    line = run_outcome.outcome_of(folder, model=family.name, failed_tasks=failed_tasks,
                                  run_state=run_state)
    return run_outcome.note(run_outcome.span_of(folder), line)


def _failed_tasks(dag_run, session) -> list[str]:
    tis = dag_run.get_task_instances(state=["failed"], session=session)
    return [ti.task_id for ti in sorted(tis, key=lambda t: (t.end_date is None,
                                                            t.end_date or 0))]


def _set(dag_run, session, run_state: str) -> str | None:
    existing = dag_run.dag_run_note
    if existing is not None and existing.user_id is not None:
        return None                        # a person's note stays
    text = note_for(dag_run.dag_id, dag_run.run_id, _failed_tasks(dag_run, session),
                    run_state)
    if text is None:
        return None
    dag_run.note = text
    log.info("run %s of %s: note %r", dag_run.run_id, dag_run.dag_id, text)
    return text


def set_note(dag_run, run_state: str) -> str | None:
    """Set the run's note to its outcome unless a person wrote one; returns the note set.

    The scheduler hands the listener a row of its own session, still in its transaction:
    the note goes into that transaction (a second session would wait on the row the
    scheduler holds). `dag.test()` hands a detached one: then a session of our own."""
    from sqlalchemy.orm import object_session

    if not any(f.dag_id == dag_run.dag_id for f in FAMILIES.values()):
        return None
    session = object_session(dag_run)
    if session is not None:
        return _set(dag_run, session, run_state)
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as own:
        row = own.query(DagRun).filter(DagRun.dag_id == dag_run.dag_id,
                                       DagRun.run_id == dag_run.run_id).one_or_none()
        return _set(row, own, run_state) if row is not None else None


@hookimpl
def on_dag_run_success(dag_run, msg: str) -> None:
    set_note(dag_run, "success")


@hookimpl
def on_dag_run_failed(dag_run, msg: str) -> None:
    set_note(dag_run, "failed")
