"""Pools: the DAGs' heavy tasks use a pool that `make airflow-init` creates, and the
cluster policy moves backfill runs' heavy tasks to their own one-slot pool."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from retrain.orchestration import airflow_policy

POOLS = json.loads((Path(__file__).resolve().parents[2] / "scripts" / "pools.json").read_text())


def test_policy_pools_exist_and_backfills_get_one_slot():
    assert {airflow_policy.HEAVY_POOL, airflow_policy.BACKFILL_POOL} <= set(POOLS)
    assert POOLS[airflow_policy.BACKFILL_POOL]["slots"] == 1
    assert POOLS[airflow_policy.HEAVY_POOL]["slots"] >= 1


def _ti(pool: str, run_id: str = "scheduled__2026-11-03T00:00:00+00:00"):
    # The hook only reads .pool/.run_id and writes .pool: a plain namespace is enough.
    return SimpleNamespace(pool=pool, run_id=run_id)


def test_backfill_heavy_tasks_move_to_the_backfill_pool():
    ti = _ti("retrain_heavy")
    airflow_policy.task_instance_mutation_hook(ti, SimpleNamespace(run_type="backfill"))
    assert ti.pool == "retrain_backfill"
    ti = _ti("retrain_heavy", run_id="backfill__2026-11-02T00:00:00+00:00")
    airflow_policy.task_instance_mutation_hook(ti, None)       # no dag_run: use the run id
    assert ti.pool == "retrain_backfill"


def test_daily_and_manual_runs_and_light_tasks_keep_their_pool():
    for run_type in ("scheduled", "manual", "asset_triggered"):
        ti = _ti("retrain_heavy")
        airflow_policy.task_instance_mutation_hook(ti, SimpleNamespace(run_type=run_type))
        assert ti.pool == "retrain_heavy"
    ti = _ti("default_pool")
    airflow_policy.task_instance_mutation_hook(ti, SimpleNamespace(run_type="backfill"))
    assert ti.pool == "default_pool"


def test_policy_reaches_airflow_through_local_settings(tmp_path):
    """scripts/airflow-env.sh links the local-settings shim into $AIRFLOW_HOME/config,
    where Airflow imports it; the shim exports the policy's hook."""
    import subprocess
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(["bash", "-c", "source scripts/airflow-env.sh && echo $AIRFLOW_HOME"],
                         cwd=repo, env={"PATH": "/usr/bin:/bin",
                                        "RETRAIN_AIRFLOW_HOME": str(tmp_path / "home")},
                         capture_output=True, text=True, check=True).stdout.strip()
    shim = Path(out) / "config" / "airflow_local_settings.py"
    assert shim.resolve() == (repo / "scripts" / "airflow_local_settings.py").resolve()
    namespace: dict = {}
    exec(compile(shim.read_text(), str(shim), "exec"), namespace)
    assert namespace["task_instance_mutation_hook"] is airflow_policy.task_instance_mutation_hook


def test_heavy_tasks_of_the_ctr_dag_use_the_heavy_pool(airflow_home):
    import importlib.util
    path = Path(__file__).resolve().parents[2] / "dags" / "ctr_daily_retrain.py"
    spec = importlib.util.spec_from_file_location("ctr_dag_pools", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = module.ctr_daily_retrain()
    pools = {t.task_id: t.pool for t in dag.tasks}
    assert pools["preprocess"] == pools["evaluate"] == airflow_policy.HEAVY_POOL
    assert set(pools.values()) <= set(POOLS) | {"default_pool"}, pools
