"""Your own logs through the whole `ctr_daily_retrain` DAG: one feature config file
(components/ctr/feature_configs/example_user_logs.yaml: other column names, a 0/1 label
named `clicked`, a bucketized and a log-scaled numeric, vocabulary / hash / identity ids,
a tag list, a free-text query, a cross) and JSONL.gz logs in a folder of their own drive
validation, preprocessing, parameter-server training, evaluation, the serving check and
publishing, with no code edit. Runs with `dag.test()` on a real SQLite metadata DB.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest

from components.ctr import feature_config as fc
from components.ctr.synth import SynthSpec, run as synthesize
from retrain.common.registry import Registry
from retrain.orchestration.lineage_query import chain

from dag_helpers import environ, load_dag, task_states, walk

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
CONFIG = fc.PACKAGED_DIR / "example_user_logs.yaml"


@pytest.fixture(scope="module")
def user_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("user-logs-home")
    raw = home / "clickstream"
    synthesize(SynthSpec(feature_config=str(CONFIG), raw_root=str(raw), start="2026-12-01",
                         days=3, rows_per_day=4000))
    with environ(RETRAIN_HOME=str(home)):
        yield home, raw


def test_own_logs_and_config_train_validate_and_publish(airflow_home, user_home):
    home, raw = user_home
    dag = load_dag("ctr_daily_retrain", "ctr_daily_retrain_user_logs").ctr_daily_retrain()
    run = dag.test(logical_date=dt.datetime(2026, 12, 4, tzinfo=UTC), run_conf={
        "window_days": 2, "eval_percent": 25, "min_auc": 0.55,
        "raw_root": str(raw), "feature_config": str(CONFIG)})
    states = task_states(run)
    assert states and all(s == "success" for s in states.values()), states

    run_dir = next((home / "runs" / "ctr" / "dt=2026-12-03").iterdir())
    # Validation ran the config's rules on the JSONL span, against the previous day.
    report = json.loads((run_dir / "validation" / "validation.json").read_text())
    rules = {r["rule"] for r in report["results"]}
    assert {"allowed_values:device", "range:slot", "drift:country", "pattern:event_id",
            "type:dwell_time", "null_rate:event_id"} <= rules
    assert report["success"] and report["rows"] == 4000
    # Preprocessing read the config's columns and kept it for training and serving.
    pre = json.loads((run_dir / "preprocess" / "summary.json").read_text())
    assert pre["feature_config"]["name"] == "example_user_logs" and pre["rows_rejected"] == 0
    assert pre["rows_in"] == 8000

    registry = Registry(home / "registry")
    current = registry.current("ctr")
    assert current["version"] == 1 and current["serving_check"]["passed"] is True
    assert current["metrics"]["auc"] > 0.55
    model_dir = registry.model_path("ctr", 1)
    assert fc.for_model_dir(model_dir) == fc.load(CONFIG)   # serving takes these columns
    evaluation = json.loads((run_dir / "evaluation" / "eval.json").read_text())
    # the config's slices, and the span vs the window's earlier days (all held out)
    assert set(evaluation["slices"]["names"]) == {"country", "device", "span"}

    # The lineage of the published model reaches the raw days and the config file.
    nodes = list(walk(chain(registry, "ctr")))
    assert {n["name"] for n in nodes if n.get("type") == "raw_span"} >= {"dt=2026-12-02",
                                                                       "dt=2026-12-03"}
    assert any(n.get("type") == "feature_config" and n["name"] == CONFIG.name for n in nodes)
