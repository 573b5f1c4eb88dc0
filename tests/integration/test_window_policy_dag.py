"""Days that vanish from a window are bounded and told: a real `dag.test()` of the factory's
DAG (the test family of tests/integration/minifamily, which skips the days the factory
leaves out, as a user's family must) over a 10-day window with two older days that fail
validation.

- Within the window policy (`max_left_out_percent=20`: 2 of 10 may go), the run trains
  without them and publishes; the run's summary, its window_policy.json and the Retrain
  tab's run page list the two days and why, and a `days_left_out` alert names them.
- Past it (the default, 10 %: 1 of 10), preprocess fails once, not retried, with a message
  naming both days and the rule; nothing is trained; the run page still shows the days
  (from window_policy.json: a stopped run has no run_summary.json), and the alert says
  the run was stopped.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import random
from pathlib import Path

import pytest

from alert_receivers import webhook, webhook_connection
from dag_helpers import environ, task_states, try_number
from retrain.common import paths, window
from retrain.common.registry import Registry

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
HERE = Path(__file__).resolve().parent
DAYS = [(dt.date(2026, 11, 1) + dt.timedelta(days=i)).isoformat() for i in range(10)]
SPAN = DAYS[-1]
BAD = ["2026-11-04", "2026-11-07"]          # rows without a numeric y: validation fails


def _register(dag, tmp_path) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    DagBundlesManager().sync_bundles_to_db()
    (tmp_path / "no-dags").mkdir(exist_ok=True)
    bag = DagBag(dag_folder=str(tmp_path / "no-dags"))
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)


def _raw(tmp_path) -> Path:
    raw, rnd = tmp_path / "raw", random.Random(0)
    for day in DAYS:
        span = raw / f"dt={day}"
        span.mkdir(parents=True)
        rows = [{"id": f"{day}-{i}", "x": (x := rnd.uniform(-3, 3)),
                 "y": "n/a" if day in BAD else 2.0 * x + 1.0 + rnd.gauss(0, 0.1)}
                for i in range(60)]
        (span / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (span / "_SUCCESS").write_text("")
    return raw


def _page(home: Path, dag_id: str, run_id: str) -> str:
    from retrain.orchestration import airflow_views
    with environ(RETRAIN_HOME=str(home)):
        folder = airflow_views._run_folder(dag_id, run_id)
        return airflow_views.run_page(dag_id, run_id, folder)


def test_left_out_days_are_bounded_listed_and_alerted(airflow_home, tmp_path, capfd,
                                                      monkeypatch):
    from minifamily import LINREG
    from retrain.orchestration import families
    from retrain.orchestration.dag_factory import make_dag

    # the run page finds a run's folder through the known families
    monkeypatch.setitem(families.FAMILIES, LINREG.name, LINREG)
    raw, home = _raw(tmp_path), tmp_path / "home"
    pythonpath = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    conf = {"raw_root": str(raw), "window_days": 10, "span": SPAN, "max_rmse": 0.5}
    with webhook() as (port, received), environ(
            RETRAIN_HOME=str(home), RETRAIN_SPAN_POKE_SECONDS="1", PYTHONPATH=pythonpath,
            AIRFLOW_CONN_RETRAIN_ALERTS=webhook_connection(port)):
        dag = make_dag(LINREG)()
        assert dag.params["max_left_out_percent"] == window.DEFAULT_MAX_LEFT_OUT_PERCENT
        _register(dag, tmp_path)

        # Past the policy: 2 of 10 days left out, the default lets 1 go.
        stopped = dag.test(logical_date=dt.datetime(2026, 11, 11, tzinfo=UTC),
                           run_conf=conf)
        states = task_states(stopped)
        assert states["validate"] == "success" and states["preprocess"] == "failed", states
        assert try_number(stopped, "preprocess") == 1             # not retried
        assert all(states[t] == "upstream_failed" for t in ("train", "evaluate", "push"))
        said = "".join(capfd.readouterr())        # the task's failure, as its log has it
        assert "window policy: 2 of the 10 day(s) of the window ending 2026-11-10" in said
        assert all(f"{day} (failed validation in this run" in said for day in BAD)
        assert "max_left_out_percent >= 20" in said
        assert Registry(home / "registry").current("linreg") is None
        stopped_dir = Path(paths.run_dir(home, "linreg", SPAN, stopped.run_id))
        record = json.loads((stopped_dir / window.POLICY_FILE).read_text())
        assert record["policy"]["ok"] is False
        assert [i["span"] for i in record["policy"]["left_out"]] == BAD
        assert not (stopped_dir / "run_summary.json").exists()
        page = _page(home, dag.dag_id, stopped.run_id)
        assert "2026-11-04" in page and "2026-11-07" in page and "stopped" in page, page

        # Within it: the run asks for 20 % (2 of 10) and goes on without the two days.
        conf["max_left_out_percent"] = 20
        went_on = dag.test(logical_date=dt.datetime(2026, 11, 12, tzinfo=UTC),
                           run_conf=conf)
        states = task_states(went_on)
        assert all(s == "success" for s in states.values()), states
        assert Registry(home / "registry").current("linreg")["version"] == 1
        run_dir = Path(paths.run_dir(home, "linreg", SPAN, went_on.run_id))
        summary = json.loads((run_dir / "run_summary.json").read_text())
        policy = summary["preprocess"]["window_policy"]
        assert policy["ok"] is True and policy["allowed"] == 2
        assert [i["span"] for i in policy["left_out"]] == BAD
        assert sorted(summary["preprocess"]["window"]) == [d for d in DAYS if d not in BAD]
        trained_ids = {r["id"] for r in json.loads(
            (run_dir / "preprocess" / "train.json").read_text())}
        assert not any(i.startswith(tuple(BAD)) for i in trained_ids)
        page = _page(home, dag.dag_id, went_on.run_id)
        assert "left out: 2026-11-04" in page and "2026-11-07" in page, page

    alerts = [a for a in received if a["kind"] == "days_left_out"]
    assert {a["run_id"]: a["details"]["stopped"] for a in alerts} == {
        stopped.run_id: True, went_on.run_id: False}, alerts
    for a in alerts:
        assert [d["span"] for d in a["details"]["left_out"]] == BAD
        assert a["span"] == SPAN
