"""The run views behind the Airflow UI's "Retrain" tab, on a run folder laid out as the DAG
writes it. Airflow's own permission check is replaced here by "allowed" (it needs a
running API server: tests/integration/test_airflow_ui.py goes through it, logged in, and
checks that an anonymous request is refused)."""
from __future__ import annotations

import datetime as dt
import json

import pytest
from fastapi.testclient import TestClient

from retrain.common import paths

RUN = "scheduled__2026-11-04T00:00:00+00:00"
FP = "sha256:" + "ab" * 32
EVENTS = [
    {"asset": "ctr_model", "timestamp": dt.datetime(2026, 11, 4, 1, 2, 3), "dag_id":
     "ctr_daily_retrain", "run_id": RUN, "extra": {"span": "2026-11-03", "version": 4}},
    {"asset": "ctr_raw_logs", "timestamp": dt.datetime(2026, 11, 4, 0, 10),
     "dag_id": "ctr_daily_retrain", "run_id": RUN,
     "extra": {"span": "2026-11-03", "fingerprint": FP, "gate": "passed", "rows": 4000}},
    {"asset": "ctr_raw_logs", "timestamp": dt.datetime(2026, 11, 3, 0, 10),
     "dag_id": "ctr_daily_retrain", "run_id": "scheduled__2026-11-03T00:00:00+00:00",
     "extra": {"span": "2026-11-02", "fingerprint": "<b>odd</b>"}},
]


@pytest.fixture
def client(tmp_path, monkeypatch):
    from retrain.orchestration import airflow_views

    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path))
    own = tmp_path / "runs" / "ctr" / "dt=2026-11-03" / paths.safe_run_id(RUN)
    older = tmp_path / "runs" / "ctr" / "dt=2026-11-02" / paths.safe_run_id(RUN)  # its window
    for d in (own / "evaluation", own / "validation" / "data_docs", older / "validation"):
        d.mkdir(parents=True)
    (own / "evaluation" / "report.html").write_text("<h1>Evaluation of ctr</h1>")
    (own / "validation" / "data_docs" / "index.html").write_text("<h1>Data Docs</h1>")
    (tmp_path / "secret.txt").write_text("not for the browser")
    (own / "run_summary.json").write_text(json.dumps({
        "span": "2026-11-03", "shadow": False, "published": {"version": 4},
        "preprocess": {"window_screen": {"used": ["2026-11-02", "2026-11-03"],
                                         "left_out": [{"span": "2026-11-01",
                                                       "reason": "never delivered"}]}},
        "validation": {"gate": "passed", "n_failed": 0, "n_expectations": 72},
        "evaluation": {"blessed": True, "reasons": ["auc 0.79 >= min_auc 0.60: pass"]}}))
    overrides = airflow_views.app.dependency_overrides
    overrides[airflow_views.can_read_runs] = lambda: None
    overrides[airflow_views.can_read_assets] = lambda: None
    # Airflow's asset events, as asset_events_view.recent() returns them (it is tested on a
    # real metadata DB below).
    overrides[airflow_views.run_asset_events] = lambda dag_id, run_id: [
        e for e in EVENTS if (e["dag_id"], e["run_id"]) == (dag_id, run_id)]
    overrides[airflow_views.recent_asset_events] = lambda: EVENTS
    # Task states and pools from Airflow's DB (tests/unit/test_run_outcome.py reads them
    # from a real one): none here.
    overrides[airflow_views.run_tasks] = lambda dag_id, run_id: []
    overrides[airflow_views.pool_waits] = lambda: []
    yield TestClient(airflow_views.app)
    airflow_views.app.dependency_overrides.clear()


def test_the_run_page_says_what_the_run_did_and_links_its_reports(client):
    page = client.get(f"/runs/ctr_daily_retrain/{RUN}")
    assert page.status_code == 200
    text = page.text
    assert "<strong>Published ctr v4</strong>" in text.split("<table>")[0]   # first
    assert "2026-11-03" in text and "2 day(s): 2026-11-02, 2026-11-03" in text
    assert "left out: 2026-11-01 (never delivered)" in text
    assert "passed: 0 failed of 72 expectations" in text and "auc 0.79" in text
    assert 'href="/retrain/lineage/ctr/4"' in text
    for rel in ("evaluation/report.html", "validation/data_docs/index.html"):
        href = f"/retrain/runs/ctr_daily_retrain/{RUN}/files/{rel}"
        assert f'href="{href}"' in text
        assert client.get(href.removeprefix("/retrain")).status_code == 200
    assert "Evaluation of ctr" in client.get(
        f"/runs/ctr_daily_retrain/{RUN}/files/evaluation/report.html").text


def test_only_files_of_the_runs_own_folder_are_served(client):
    for rel in ("..%2F..%2F..%2F..%2Fsecret.txt", "%2E%2E/%2E%2E/%2E%2E/%2E%2E/secret.txt",
                "evaluation/missing.html"):
        assert client.get(f"/runs/ctr_daily_retrain/{RUN}/files/{rel}").status_code == 404
    # Another DAG's run of the same id is not this one; an unknown DAG has no runs here.
    assert client.get(f"/runs/text_daily_finetune/{RUN}").status_code == 404
    assert client.get(f"/runs/not_a_retrain_dag/{RUN}").status_code == 404


def test_a_waiting_run_says_what_it_waits_for_and_since_when(client, tmp_path):
    from retrain.common.run_context import CONTEXT_FILE, RunContext

    run = "manual__2026-12-03T09:30:00+00:00"
    ctx = RunContext.create("ctr", "2026-12-02", tmp_path, run,
                            span_reason="the day before the run's logical date (manual)")
    folder = tmp_path / "runs" / "ctr" / "dt=2026-12-02" / paths.safe_run_id(run)
    folder.mkdir(parents=True)
    (folder / CONTEXT_FILE).write_text(json.dumps(ctx.to_xcom()))
    text = client.get(f"/runs/ctr_daily_retrain/{run}").text
    assert "2026-12-02 (the day before the run&#x27;s logical date (manual))" in text
    assert f"waiting for the span&#x27;s data: no {ctx.span_dir}/_SUCCESS yet" in text
    assert "run started 20" in text
    # Delivered: the run is past the wait, and the page no longer says it waits.
    (tmp_path / "raw" / "ctr" / "dt=2026-12-02").mkdir(parents=True)
    (tmp_path / "raw" / "ctr" / "dt=2026-12-02" / "_SUCCESS").write_text("")
    assert "not reached push" in client.get(f"/runs/ctr_daily_retrain/{run}").text


def test_asset_events_show_span_version_and_fingerprint_without_a_click(client):
    """Airflow folds an event's extra away; the run's tab and the assets page show it."""
    tab = client.get(f"/runs/ctr_daily_retrain/{RUN}").text
    assert "asset events of this run" in tab
    assert FP in tab and ">2026-11-03<" in tab and ">4<" in tab and ">passed<" in tab
    assert "2026-11-02" not in tab.split("asset events of this run")[1]   # another run's
    page = client.get("/assets").text
    assert page.index("ctr_model") < page.index("2026-11-04 00:10:00")    # newest first
    assert "scheduled__2026-11-03" in page
    assert "<b>odd</b>" not in page and "&lt;b&gt;odd&lt;/b&gt;" in page  # escaped


def test_recent_reads_airflows_asset_events(airflow_home):
    """recent() on Airflow's own metadata DB: one run's events, newest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    from retrain.orchestration.asset_events_view import recent

    t0 = dt.datetime(2026, 11, 4, tzinfo=dt.timezone.utc)
    with create_session() as session:
        asset = AssetModel(name="views_test_raw", uri="file:///views-test/raw", group="asset")
        session.add(asset)
        session.flush()
        for i, run in enumerate(("r1", "r1", "r2")):
            session.add(AssetEvent(asset_id=asset.id, source_dag_id="views_test_dag",
                                   source_run_id=run, timestamp=t0 + dt.timedelta(minutes=i),
                                   extra={"span": f"2026-11-0{i + 1}"}))
    events = recent(dag_id="views_test_dag", run_id="r1")
    assert [e["extra"]["span"] for e in events] == ["2026-11-02", "2026-11-01"]
    assert {e["asset"] for e in events} == {"views_test_raw"}
    assert len(recent(dag_id="views_test_dag")) == 3


def test_every_view_refuses_an_anonymous_request(airflow_home, tmp_path, monkeypatch):
    """Airflow's own checks, not replaced here: no token, no page (the browser test checks
    the same on the stack, logged out)."""
    from retrain.orchestration import airflow_views

    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path))
    assert not airflow_views.app.dependency_overrides
    anonymous = TestClient(airflow_views.app)
    for path in ("/assets", f"/runs/ctr_daily_retrain/{RUN}", "/runs",
                 "/dags/ctr_daily_retrain/runs",
                 f"/runs/ctr_daily_retrain/{RUN}/files/run_summary.json", "/lineage/ctr/1",
                 "/lineage/ctr/1/artifacts/any"):
        assert anonymous.get(path).status_code == 401, path
