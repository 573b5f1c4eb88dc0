"""`ctr_daily_recommendations` end to end after a real publish, on generated click logs.

The CTR DAG trains on 2026-11-04 and publishes version 1; its push task's asset event must
queue the recommendations DAG (Airflow's asset-triggered run queue, as the scheduler reads
it). The recommendations run then scores every user active in the window against the
pool in the Beam job, commits the dated partition for 2026-11-05, records its lineage,
and measures the lists against 2026-11-05's clicks, which no model trained on: the model
must beat the popularity baseline of the same run.
"""
from __future__ import annotations

import datetime as dt

import pyarrow.parquet as pq
import pytest

from components.ctr.generate import GenerateSpec, run as generate
from retrain.common.atomic import read_json
from retrain.orchestration import lineage

from dag_helpers import environ, load_dag, task_states

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
K = 3


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    # Fewer users and items than the demo, so a day has several impressions per user:
    # enough exposed items per user for a ranking to matter on the next day.
    root = tmp_path_factory.mktemp("recs-home")
    generate(GenerateSpec(out_root=str(root), start="2026-11-02", days=4, rows_per_day=15000,
                          n_users=2000, n_items=1000, n_categories=30))
    with environ(RETRAIN_HOME=str(root)):
        yield root


def _queued_by_asset(dag_id: str) -> list[str]:
    """Asset names that queued a run of dag_id (the scheduler's asset-triggered queue)."""
    from airflow.models.asset import AssetDagRunQueue, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (session.query(AssetModel.name)
                .join(AssetDagRunQueue, AssetDagRunQueue.asset_id == AssetModel.id)
                .filter(AssetDagRunQueue.target_dag_id == dag_id).all())
    return [r[0] for r in rows]


def _unpause(dag_id: str) -> None:
    """A paused DAG is never queued by an asset event: unpause it as the user would."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(DagModel).filter(DagModel.dag_id == dag_id).update(
            {DagModel.is_paused: False})


def test_publish_triggers_recommendations_that_beat_popularity(airflow_home, home,
                                                               register_dag):
    dag = register_dag(load_dag("ctr_daily_recommendations", "recs_dag")
                       .ctr_daily_recommendations())
    _unpause(dag.dag_id)
    retrain = load_dag("ctr_daily_retrain", "recs_ctr_dag").ctr_daily_retrain()
    published = retrain.test(logical_date=dt.datetime(2026, 11, 5, tzinfo=UTC),
                             run_conf={"window_days": 3, "eval_percent": 10})
    assert task_states(published)["push"] == "success", task_states(published)
    assert "ctr_model" in _queued_by_asset("ctr_daily_recommendations")

    run = dag.test(logical_date=dt.datetime(2026, 11, 5, 1, tzinfo=UTC),
                   run_conf={"k": K, "active_days": 3, "num_shards": 4})
    states = task_states(run)
    assert states == {"which_model": "success", "recommend": "success",
                      "check_quality": "success"}, states

    out = home / "recommendations" / "ctr" / "dt=2026-11-05"
    summary = read_json(out / "summary.json")
    assert summary["model_version"] == 1 and summary["span"] == "2026-11-04"
    assert summary["days_read"] == ["2026-11-02", "2026-11-03", "2026-11-04"]
    recs = pq.read_table(sorted(str(p) for p in out.glob("part-*.parquet"))).to_pandas()
    assert len(recs) == summary["users"] * K and summary["users"] > 1000
    assert (recs.groupby("user").size() == K).all()
    assert not recs.duplicated(["user", "item"]).any()
    assert recs["score"].between(0, 1).all() and (recs["model_version"] == 1).all()
    assert summary["pairs_scored"] == summary["users"] * summary["pool_items"]

    run_dir = home / "runs" / "ctr_recommendations" / "dt=2026-11-04"
    (record,) = [lineage.read_records(d)["recommend"] for d in run_dir.iterdir()]
    kinds = {i["type"] for i in record["inputs"]}
    assert kinds == {"published_model", "raw_span"} and record["uri"] == str(out)
    assert len([i for i in record["inputs"] if i["type"] == "raw_span"]) == 3

    quality = read_json(next(run_dir.iterdir()) / "quality.json")
    held = quality["held_out_impressions"]
    assert quality["day"] == "2026-11-05" and held["users_evaluated"] > 100
    assert held["model"]["precision_at_k"] > held["popularity"]["precision_at_k"], quality
    # The verdict stands on a paired interval over enough users (issue 44.4): this small
    # world's lists are not shown better than popularity, so no "beats" is claimed; each
    # verdict agrees with its interval, and the headline says it.
    pool = quality["pool"]
    assert pool["users_evaluated"] >= quality["min_users"] == 100
    for baseline in ("popularity", "item_knn"):
        d = pool[f"vs_{baseline}"]["precision_difference"]
        want = ("beats" if d["low"] > 0 else "worse" if d["high"] < 0 else "level")
        assert d["low"] <= d["estimate"] <= d["high"]
        assert quality["verdicts"][baseline] == want, quality["verdicts"]
        assert quality[f"beats_{baseline}"] is (want == "beats")
    assert quality["headline"].startswith("precision@3 ") and "popularity" in quality["headline"]
