"""Helpers for the tests that run DAG files with `dag.test()` (imported by name: pytest
puts this folder on sys.path; `conftest` would be ambiguous with tests/conftest.py)."""
from __future__ import annotations

import contextlib
import importlib.util
import os
from pathlib import Path

DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"


def load_dag(file_stem: str, module_name: str):
    """Import dags/<file_stem>.py as a fresh module (a private name per test module, so
    two modules never share DAG objects)."""
    spec = importlib.util.spec_from_file_location(module_name, DAGS_FOLDER / f"{file_stem}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def environ(**values: str):
    """Set environment variables (RETRAIN_HOME, ...) for the block; restore them after."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def task_states(dag_run) -> dict[str, str]:
    """task_id -> state of one DAG run's task instances, read from the metadata DB."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_run.dag_id,
                                                 TaskInstance.run_id == dag_run.run_id).all()
        return {ti.task_id: str(getattr(ti.state, "value", ti.state)) for ti in tis}


def try_number(dag_run, task_id: str) -> int:
    """How many tries a task of one DAG run took (bad data: exactly one)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    with create_session() as session:
        return session.query(TaskInstance.try_number).filter(
            TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id,
            TaskInstance.task_id == task_id).scalar()


def walk(node: dict):
    """Every node of a `retrain lineage` tree, depth first."""
    yield node
    for child in node.get("inputs", []):
        yield from walk(child)


def answer_required_action(dag_id: str, option: str, user: str, reason: str = "",
                           timeout: float = 300.0) -> None:
    """Answer the first open Required Action of `dag_id` as a person would in the UI: the
    same writes as Airflow's HITL API route (`PATCH .../hitlDetails`): the response on the
    HITL row, then `handle_event_submit` resumes the parked task. For `dag.test()` runs,
    which wait for exactly that; run it in a thread beside the run."""
    import time

    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import handle_event_submit
    from airflow.triggers.base import TriggerEvent
    from airflow.utils import timezone
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with create_session() as session:
            found = (session.query(HITLDetail, TaskInstance)
                     .join(TaskInstance, TaskInstance.id == HITLDetail.ti_id)
                     .filter(TaskInstance.dag_id == dag_id,
                             TaskInstance.state == TaskInstanceState.AWAITING_INPUT,
                             HITLDetail.responded_at.is_(None)).first())
            if found:
                detail, ti = found
                detail.responded_by = {"id": user, "name": user}
                detail.responded_at = timezone.utcnow()
                detail.chosen_options = [option]
                detail.params_input = {"reason": reason}
                session.add(detail)
                handle_event_submit(TriggerEvent(detail.as_resume_event_payload()),
                                    task_instance=ti, session=session)
                return
        time.sleep(1)
    raise TimeoutError(f"no open Required Action of {dag_id} within {timeout} s")
