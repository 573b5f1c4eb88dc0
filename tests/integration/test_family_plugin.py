"""Model families are plug-ins: one DAG factory builds every family's DAG from its
descriptor, what the factory passes fits each step's spec, and a third family (a linear
regression gated on RMSE, tests/integration/minifamily) runs through the real factory with
`dag.test()` and is published, with no edit of the shared layer. Its package only has to
be importable by the steps' processes (here: on PYTHONPATH), as a user's own family would."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from retrain.orchestration.families import FAMILIES, STAGES, resolve
from retrain.common.registry import Registry
from retrain.orchestration.dag_factory import family_params, make_dag
from retrain.orchestration.lineage_query import chain
from retrain.common.run_context import Built, RunContext

from dag_helpers import environ, task_states, walk

UTC = dt.timezone.utc
HERE = Path(__file__).resolve().parent    # holds the minifamily package


def _families():
    from minifamily import LINREG
    return [*FAMILIES.values(), LINREG]


@pytest.mark.parametrize("family", _families(), ids=lambda f: f.name)
def test_factory_specs_match_each_steps_spec_fields(family):
    params = {name: p.value for name, p in family_params(family).items()}
    params.update(window_days=3, eval_percent=20)
    ctx = RunContext.create(family.name, "2026-11-02", "/h", "r", raw_root="/raw")
    upstream = {"validate": {}, "preprocess": {"output_dir": "/p"},
                "train": {"model_dir": "/m"}, "published": "/registry/v1"}
    for stage in STAGES:
        desc = family.stages[stage]
        spec = Built.of(resolve(desc.build)(ctx, params, upstream)).spec
        fields = {f.name: f for f in dataclasses.fields(resolve(desc.spec_class))}
        unknown = set(spec) - set(fields)
        assert not unknown, f"{family.name}.{stage} passes unknown fields {unknown}"
        required = {n for n, f in fields.items() if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING}
        assert required <= set(spec), f"{family.name}.{stage} misses {required - set(spec)}"


def test_every_family_dag_has_the_same_shape(airflow_home):
    for family in _families():
        dag = make_dag(family)()
        order = [t.task_id for t in dag.topological_sort()]
        assert order == ["resolve_span", "wait_for_span", family.task_id("validate"),
                         family.task_id("preprocess"), family.task_id("train"),
                         "wait_for_turn", family.task_id("evaluate"), "approve", "push"], family.name
        assert {"span", "window_days", "raw_root", family.config_param, "shadow",
                "override_validation_reason", "force_bless_reason"} <= set(dag.params)
        pools = {t.task_id: t.pool for t in dag.tasks}
        for stage in ("preprocess", "train", "evaluate"):
            assert pools[family.task_id(stage)] == (family.stages[stage].pool
                                                    or "default_pool")
        assert all(t.retries >= 1 for t in dag.tasks)


def _register(dag, tmp_path) -> None:
    """Write the DAG to the metadata DB as the DAG processor would (dag.test() needs a
    serialized DAG; this one has no file in the dags folder)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    DagBundlesManager().sync_bundles_to_db()
    (tmp_path / "no-dags").mkdir(exist_ok=True)
    bag = DagBag(dag_folder=str(tmp_path / "no-dags"))
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)


def test_a_third_family_runs_through_the_factory(airflow_home, tmp_path, caplog):
    from minifamily import LINREG

    raw = tmp_path / "raw"
    rnd = random.Random(0)
    for day in ("2026-11-01", "2026-11-02"):
        span = raw / f"dt={day}"
        span.mkdir(parents=True)
        rows = [{"id": f"{day}-{i}", "x": (x := rnd.uniform(-3, 3)),
                 "y": 2.0 * x + 1.0 + rnd.gauss(0, 0.1)} for i in range(200)]
        (span / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (span / "_SUCCESS").write_text("")
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    with environ(RETRAIN_HOME=str(tmp_path / "home"), RETRAIN_SPAN_POKE_SECONDS="1",
                 PYTHONPATH=path):
        dag = make_dag(LINREG)()
        _register(dag, tmp_path)
        run = dag.test(logical_date=dt.datetime(2026, 11, 3, tzinfo=UTC),
                       run_conf={"raw_root": str(raw), "window_days": 2, "max_rmse": 0.5})
        states = task_states(run)
        assert states and all(s == "success" for s in states.values()), states
        registry = Registry(tmp_path / "home" / "registry")
        current = registry.current("linreg")
        assert current["version"] == 1 and current["metrics"]["rmse"] < 0.2
        assert [r["name"] for r in current["gate"]["rules"]] == ["max_rmse"]
        listing = subprocess.run([sys.executable, "-m", "retrain.cli", "registry", "list",
                                  "linreg", "--root", str(registry.root)],
                                 capture_output=True, text=True)
        assert listing.returncode == 0, listing.stderr[-2000:]
        assert "RMSE" in listing.stdout and "AUC" not in listing.stdout
        nodes = list(walk(chain(registry, "linreg")))
        assert {n["name"] for n in nodes if n.get("type") == "raw_span"} == {
            "dt=2026-11-01", "dt=2026-11-02"}

        # Tickets left behind (by a run that died before its push gave its turn back, and
        # by a run Airflow never knew) do not hold the next publishing run in line.
        from retrain.orchestration import turns
        home = str(tmp_path / "home")
        turns.take(home, dag.dag_id, run.run_id)
        turns.take(home, dag.dag_id, "manual__never_seen")
        caplog.set_level(logging.INFO, logger="retrain.dag")
        # An unreachable RMSE bar: the gate (deciding on a "min" metric) rejects; push skips.
        # (another logical date, the same span: dag.test() would delete the first run)
        rejected = dag.test(logical_date=dt.datetime(2026, 11, 4, tzinfo=UTC),
                            run_conf={"raw_root": str(raw), "window_days": 2,
                                      "span": "2026-11-02", "max_rmse": 0.01})
        assert task_states(rejected)["push"] == "skipped"
        assert registry.current("linreg")["version"] == 1
        assert task_states(rejected)["wait_for_turn"] == "success"
        said = caplog.text
        assert f"turn: {run.run_id} is success, its turn is over" in said, said[-3000:]
        assert "turn: manual__never_seen is unknown, its turn is over" in said
        assert not list(turns.folder(home, dag.dag_id).glob("*.json"))


def test_historical_days_run_their_tasks(airflow_home, tmp_path):
    """A run for a day long before the deployment (last year's export) runs its tasks
    instead of "succeeding" with none run because the day precedes the DAG's start."""
    from minifamily import LINREG

    raw = tmp_path / "raw" / "dt=1998-03-03"      # a 1998 export: before 2000, too
    raw.mkdir(parents=True)
    (raw / "part-0.jsonl").write_text("".join(
        json.dumps({"id": i, "x": i / 10, "y": i / 5 + 1}) + "\n" for i in range(60)))
    (raw / "_SUCCESS").write_text("")
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    with environ(RETRAIN_HOME=str(tmp_path / "home"), PYTHONPATH=path):
        dag = make_dag(LINREG)()
        _register(dag, tmp_path)
        run = dag.test(logical_date=dt.datetime(1998, 3, 4, tzinfo=UTC),
                       run_conf={"raw_root": str(tmp_path / "raw"), "window_days": 1})
        states = task_states(run)
        assert states and all(s == "success" for s in states.values()), states
        assert Registry(tmp_path / "home" / "registry").current("linreg")["data_span"] \
            == "1998-03-03"
