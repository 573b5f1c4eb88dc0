"""Airflow cluster policy shipped with retrain, loaded by the scheduler through
`scripts/airflow_local_settings.py` (linked into `$AIRFLOW_HOME/config/` by
scripts/airflow-env.sh). Not an `airflow.policy` entry point: Airflow 3.3 skips
`task_instance_mutation_hook` when creating a run's task instances unless an
`airflow_local_settings` module exists, so an entry point alone never runs.

Backfill runs count against their own `max_active_runs`, not the DAG's, so a backfill
of many days could otherwise fill the heavy-task pool and starve the daily run. Tasks
that would use the heavy pool are moved, for backfill runs only, to a one-slot pool of
their own: backfills advance one heavy task at a time, and the daily run keeps the
heavy pool to itself. Pool names and sizes: scripts/pools.json.
"""
from __future__ import annotations

HEAVY_POOL = "retrain_heavy"
BACKFILL_POOL = "retrain_backfill"


def is_backfill(task_instance, dag_run) -> bool:
    run_type = getattr(dag_run, "run_type", None)
    if run_type is not None:
        return str(getattr(run_type, "value", run_type)) == "backfill"
    return str(getattr(task_instance, "run_id", "") or "").startswith("backfill__")


def task_instance_mutation_hook(task_instance, dag_run) -> None:
    if task_instance.pool == HEAVY_POOL and is_backfill(task_instance, dag_run):
        task_instance.pool = BACKFILL_POOL
