"""The run views behind the Airflow UI's "Retrain" tab, on a run folder laid out as the DAG
writes it. Airflow's own permission check is replaced here by "allowed" (it needs a
running API server: tests/integration/test_airflow_ui.py goes through it, logged in, and
checks that an anonymous request is refused)."""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from retrain.common import paths

RUN = "scheduled__2026-11-04T00:00:00+00:00"


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
    airflow_views.app.dependency_overrides[airflow_views.can_read_runs] = lambda: None
    yield TestClient(airflow_views.app)
    airflow_views.app.dependency_overrides.clear()


def test_the_run_page_says_what_the_run_did_and_links_its_reports(client):
    page = client.get(f"/runs/ctr_daily_retrain/{RUN}")
    assert page.status_code == 200
    text = page.text
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
