"""A step that hangs is stopped by its task's execution_timeout: a real `dag.test()` run of
the factory's DAG whose validation step never returns (the fault step `sleeper`, standing
for a FIFO named like a part or a stalled mount) ends within the configured limit, each
try's step and the step's own child are gone, and the run fails instead of holding its
worker slot for ever. The limit comes from RETRAIN_TASK_TIMEOUT_MINUTES, as a deployment
would set it."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest

from dag_helpers import environ, task_states, try_number

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
HERE = Path(__file__).resolve().parent
LIMIT_SECONDS = 12


def sleeper_spec(ctx, params, upstream):
    """The hanging validation's spec (the factory resolves builders by module name)."""
    return {"pid_file": f"{ctx.home}/sleeper.pids", "seconds": 300}


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _family():
    from minifamily import LINREG
    from retrain.orchestration.families import Stage

    hanging = Stage(module="sleeper", spec_class="sleeper:Spec",
                    build=f"{__name__}:sleeper_spec", artifact_type="validation_report",
                    reuse=False)
    return dataclasses.replace(LINREG, name="hangs", dag_id="hangs_daily",
                               stages={**LINREG.stages, "validate": hanging})


def _register(dag, tmp_path) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    DagBundlesManager().sync_bundles_to_db()
    (tmp_path / "no-dags").mkdir(exist_ok=True)
    bag = DagBag(dag_folder=str(tmp_path / "no-dags"))
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)


def test_a_hanging_step_is_stopped_by_the_task_timeout(airflow_home, tmp_path):
    from retrain.orchestration.dag_factory import make_dag

    raw, home = tmp_path / "raw", tmp_path / "home"
    span = raw / "dt=2026-11-01"
    span.mkdir(parents=True)
    (span / "part-0.jsonl").write_text(json.dumps({"id": "a", "x": 1.0, "y": 3.0}) + "\n")
    (span / "_SUCCESS").write_text("")
    path = os.pathsep.join(p for p in (str(HERE), str(HERE / "fault_steps"),
                                       os.environ.get("PYTHONPATH")) if p)
    with environ(RETRAIN_HOME=str(home), RETRAIN_SPAN_POKE_SECONDS="1", PYTHONPATH=path,
                 RETRAIN_TASK_TIMEOUT_MINUTES=json.dumps({"validate": LIMIT_SECONDS / 60})):
        dag = make_dag(_family())()
        validate = dag.get_task("validate")
        assert validate.execution_timeout == dt.timedelta(seconds=LIMIT_SECONDS)
        validate.retry_delay = dt.timedelta(seconds=1)     # see the retry stopped too
        _register(dag, tmp_path)
        t0 = time.monotonic()
        run = dag.test(logical_date=dt.datetime(2026, 11, 2, tzinfo=UTC),
                       run_conf={"raw_root": str(raw), "window_days": 1})
        took = time.monotonic() - t0
    states = task_states(run)
    assert states["validate"] == "failed", states
    assert states["preprocess"] == "upstream_failed", states
    assert try_number(run, "validate") == 2          # a stall may pass: retried once
    # two tries of 12 s each, not the step's 300 s (start-up and the DB on top)
    assert took < 2 * LIMIT_SECONDS + 60, took
    step, child = (int(x) for x in (home / "sleeper.pids").read_text().split())
    deadline = time.time() + 10
    while (_alive(step) or _alive(child)) and time.time() < deadline:
        time.sleep(0.2)
    assert not _alive(step), "the hung step outlived its timed-out task"
    assert not _alive(child), "the hung step's child outlived its timed-out task"
