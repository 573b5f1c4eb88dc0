"""What a run did, where a person looks first (issue 46): the outcome line of the Retrain
tab and of the run's note, the span beside it in the runs list, and the waits for a pool
slot (the task's first log line, the tab's pool table). Pure functions first, then the
views on a run folder, then the queries and the note listener on Airflow's test DB."""
from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from retrain.common import paths
from retrain.orchestration import pool_view, pool_wait, run_outcome

T0 = dt.datetime(2026, 12, 4, 10, 1, 2, tzinfo=dt.timezone.utc)
RUN = "manual__2026-12-04T10:00:00+00:00"
TEXT_REASONS = [
    "judged on 124 eval texts (labelled per task: sentiment=124)",
    "sentiment: 124 labelled eval texts >= min_eval_rows 200: fail",
    "sentiment: eval texts of every class >= min_eval_positives 20: pass",
    "sentiment macro-F1 0.7100 >= min_macro_f1 0.6000: pass",
    "sentiment macro-F1 0.7100 - TF-IDF + logistic regression 0.7400 = -0.0300 >= "
    "-margin 0.0200: fail",
    "not blessed: failed rules min_eval_rows[sentiment], beats_classical_baseline[sentiment]"]


# --- the outcome line -------------------------------------------------------------------

def test_a_published_run_says_the_version():
    assert run_outcome.headline({"published": {"version": 5}, "evaluation": {
        "blessed": True}}, model="ctr") == "Published ctr v5"


def test_an_unchanged_run_names_the_version_it_matches():
    line = run_outcome.headline({"published": None, "unchanged": {
        "model": "text", "version": 4, "model_digest": "sha256:x"},
        "evaluation": {"blessed": True}}, model="text")
    assert line == "Unchanged: identical to text v4, nothing published"


def test_a_rejected_run_leads_with_the_gates_first_failed_rule_in_words():
    line = run_outcome.headline({"published": None, "evaluation": {
        "blessed": False, "reasons": TEXT_REASONS}}, model="text")
    assert line == ("Not published: sentiment: 124 labelled eval texts < min_eval_rows 200 "
                    "(and 1 more failed rule)")
    # The CTR gate's wording, one failed rule.
    assert run_outcome.headline({"evaluation": {"blessed": False, "reasons": [
        "auc 0.7000 >= min_auc 0.6000: pass", "eval rows 124 >= min_eval_rows 200: fail",
        "not blessed: failed rules min_eval_rows"]}}, model="ctr") == (
        "Not published: eval rows 124 < min_eval_rows 200")


def test_a_failed_rule_said_as_found_only_where_the_line_is_one_comparison():
    assert run_outcome.negate("log_loss 0.7 <= max_log_loss 0.6") == (
        "log_loss 0.7 > max_log_loss 0.6")
    interval = ("auc difference -0.0500 vs baseline 0.7000, 95% interval [-0.08, -0.02]: "
                "worse than -max_auc_drop 0.0100 with 95% confidence only if the whole "
                "interval is below it")
    assert run_outcome.negate(interval) == interval
    two = "a >= b and c <= d"
    assert run_outcome.negate(two) == two


def test_failed_tasks_shadow_runs_refusals_and_a_stopped_window_say_so():
    assert run_outcome.headline({}, model="ctr", failed_tasks=["validate"],
                                run_state="failed") == (
        "Failed at validate: nothing published (its log says why)")
    assert run_outcome.headline({"shadow": True, "evaluation": {"blessed": True}},
                                model="ctr").startswith("Shadow run: evaluated, never")
    refused = run_outcome.headline({"evaluation": {"blessed": True}, "publish_refused": {
        "reason": "...", "expected": 3, "current": 4}}, model="ctr")
    assert refused.startswith("Not published: refused") and "v3" in refused and "v4" in refused
    check = run_outcome.headline({"evaluation": {"blessed": True}, "serving_check": {
        "passed": False, "error": "serving check: max_abs_diff 0.3 > 1e-4\nmore"}},
        model="ctr")
    assert check == "Not published: the serving check failed: serving check: max_abs_diff " \
                    "0.3 > 1e-4"
    assert run_outcome.headline({}, model="ctr", policy={
        "ok": False, "left_out": [{"span": "a"}, {"span": "b"}], "counted": 7,
        "allowed": 0}).startswith("Not published: the window policy stopped the run (2 of 7")
    assert run_outcome.headline({}, model="ctr") == "Running: nothing published yet"


def test_the_note_puts_the_span_first_and_fits_airflows_column():
    assert run_outcome.note("2026-12-03", "Published ctr v5") == (
        "span 2026-12-03: Published ctr v5")
    assert len(run_outcome.note("2026-12-03", "x" * 5000)) == run_outcome.NOTE_LIMIT


# --- the pool-wait log line -------------------------------------------------------------

def test_the_wait_line_from_two_timestamps():
    line = pool_wait.wait_line("gpu_training", 1, T0, T0 + dt.timedelta(minutes=3, seconds=2),
                               "preprocess")
    assert line.startswith("waited 3 min 2 s for a slot of pool gpu_training (1 slot): ready "
                           "since preprocess ended at 10:01:02 UTC, started 10:04:04 UTC")
    assert pool_wait.wait_line("retrain_heavy", 2, T0, T0 + dt.timedelta(seconds=4),
                               "validate") is None           # the scheduler's own loop
    assert pool_wait.duration_words(3725) == "1 h 2 min"
    assert pool_wait.slots_words(2) == "2 slots"


class _TI:
    def __init__(self, start, try_number=1):
        self.start_date, self.try_number = start, try_number


class _Run:
    def __init__(self, run_type):
        self.run_type = run_type


def test_log_wait_measures_a_first_try_from_the_upstreams_end(tmp_path):
    pool_wait.mark_ended(tmp_path, "preprocess", now=T0)
    later = T0 + dt.timedelta(minutes=3, seconds=2)
    line = pool_wait.log_wait(tmp_path, "preprocess", "gpu_training", _TI(later),
                              _Run("manual"))
    assert line.startswith("waited 3 min 2 s for a slot of pool gpu_training (1 slot)")
    # A backfill's heavy task ran in the backfill pool (airflow_policy moved it there).
    line = pool_wait.log_wait(tmp_path, "preprocess", "retrain_heavy", _TI(later),
                              _Run("backfill"))
    assert "pool retrain_backfill (1 slot)" in line
    # A retry or a cleared task became ready later than its upstream's end: not measured.
    assert pool_wait.log_wait(tmp_path, "preprocess", "gpu_training", _TI(later, 2),
                              _Run("manual")) is None
    assert pool_wait.log_wait(tmp_path, "validate", "gpu_training", _TI(later),
                              _Run("manual")) is None          # no end recorded


def test_the_train_task_logs_its_wait_first_and_records_its_end(tmp_path, monkeypatch):
    """The task calls the line's function at its start (its step replaced by a recorder)."""
    from retrain.common.run_context import RunContext
    from retrain.orchestration import stage_tasks
    from retrain.orchestration.families import CTR
    from retrain.orchestration.run_assets import run_assets

    ctx = RunContext.create("ctr", "2026-12-03", tmp_path, RUN)
    pool_wait.mark_ended(ctx.run_dir, CTR.task_id("preprocess"), now=T0)
    order = []
    monkeypatch.setattr(stage_tasks, "check_examples_custody", lambda *a: order.append("custody"))
    monkeypatch.setattr(stage_tasks, "resolve", lambda name: lambda *a: {"x": 1})
    monkeypatch.setattr(stage_tasks, "published", lambda *a: (None, []))
    monkeypatch.setattr(stage_tasks, "run_stage",
                        lambda *a, **k: order.append("step") or {"model_dir": "m"})
    limits = {k: dt.timedelta(minutes=5) for k in ("validate", "preprocess", "train",
                                                   "evaluate")}
    real = pool_wait.log_wait
    monkeypatch.setattr(pool_wait, "log_wait",
                        lambda *a, **k: order.append(real(*a, **k)) or order[-1])
    task = stage_tasks.train_task(CTR, run_assets(CTR), limits)
    task.function(ctx.to_xcom(), {"artifact": {}}, params={},
                  ti=_TI(T0 + dt.timedelta(minutes=3, seconds=2)), dag_run=_Run("backfill"))
    assert order[0].startswith("waited 3 min 2 s for a slot of pool gpu_training (1 slot)")
    assert order[1:] == ["custody", "step"]
    assert pool_wait.ended_at(ctx.run_dir, CTR.task_id("train")) is not None


# --- who waits for a pool slot, who holds it --------------------------------------------

def _ti(task_id, state, pool, run_id="r1", **times):
    return {"dag_id": "text_daily_finetune", "run_id": run_id, "task_id": task_id,
            "state": state, "pool": pool, "pool_slots": 1, **times}


def test_a_full_pool_names_who_waits_and_who_holds_it():
    pools = {"gpu_training": {"slots": 1, "include_deferred": False},
             "retrain_heavy": {"slots": 2, "include_deferred": False}}
    now = T0 + dt.timedelta(minutes=3, seconds=2)
    tis = [_ti("finetune", "scheduled", "gpu_training", "backfill__2026-11-02",
               scheduled_dttm=T0),
           _ti("finetune", "running", "gpu_training", "backfill__2026-11-01",
               start_date=T0 - dt.timedelta(minutes=10)),
           # a heavy pool with an open slot: its scheduled task is about to be queued
           _ti("validate", "scheduled", "retrain_heavy", "r3", scheduled_dttm=T0),
           _ti("preprocess", "running", "retrain_heavy", "r4", start_date=T0)]
    waiting = pool_view.waiting_pools(pools, tis, now=now)
    assert [p["pool"] for p in waiting] == ["gpu_training"]
    (line,) = pool_view.lines(waiting[0])
    assert line == ("text_daily_finetune / backfill__2026-11-02 / finetune is waiting for "
                    "3 min 2 s for a slot of pool gpu_training (1 slot, 1 used); held by "
                    "text_daily_finetune / backfill__2026-11-01 / finetune (running, "
                    "13 min 2 s)")
    assert pool_view.lines(waiting[0], run_id="other") == []
    page = pool_view.table(waiting)
    assert "gpu_training" in page and "backfill__2026-11-01 / finetune (running, 1 slot)" in page


# --- the Retrain tab: the outcome first, the span in the runs list ----------------------

def _folder(home: Path, family: str, span: str, run_id: str, summary: dict | None) -> Path:
    from retrain.common.run_context import CONTEXT_FILE, RunContext

    folder = home / "runs" / family / f"dt={span}" / paths.safe_run_id(run_id)
    folder.mkdir(parents=True)
    ctx = RunContext.create(family, span, home, run_id)
    (folder / CONTEXT_FILE).write_text(json.dumps(ctx.to_xcom()))
    if summary is not None:
        (folder / "run_summary.json").write_text(json.dumps({"span": span, **summary}))
    return folder


@pytest.fixture
def views(tmp_path, monkeypatch):
    from retrain.orchestration import airflow_views

    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path))
    _folder(tmp_path, "text", "2026-12-03", RUN, {
        "published": None, "shadow": False, "validation": {"gate": "passed"},
        "evaluation": {"blessed": False, "reasons": TEXT_REASONS}})
    _folder(tmp_path, "text", "2026-12-02", "scheduled__2026-12-03T00:00:00+00:00", {
        "published": {"version": 7}, "evaluation": {"blessed": True}})
    _folder(tmp_path, "text", "2026-11-01", "backfill__2026-11-02T00:00:00+00:00", None)
    runs = [{"dag_id": "text_daily_finetune", "run_id": r, "state": s, "start_date": T0,
             "failed": f} for r, s, f in (
        (RUN, "success", []), ("scheduled__2026-12-03T00:00:00+00:00", "success", []),
        ("backfill__2026-11-02T00:00:00+00:00", "failed", ["validate"]),
        ("manual__just-queued", "queued", []))]
    tasks = [{"task_id": "finetune", "state": "success", "pool": "gpu_training",
              "scheduled_dttm": T0, "queued_dttm": T0 + dt.timedelta(minutes=3, seconds=2)},
             {"task_id": "push", "state": "skipped", "pool": "default_pool",
              "scheduled_dttm": T0, "queued_dttm": T0}]
    waiting = pool_view.waiting_pools(
        {"gpu_training": {"slots": 1}},
        [_ti("finetune", "scheduled", "gpu_training", RUN, scheduled_dttm=T0),
         _ti("finetune", "running", "gpu_training", "backfill__x", start_date=T0)],
        now=T0 + dt.timedelta(seconds=70))
    overrides = airflow_views.app.dependency_overrides
    overrides[airflow_views.can_read_runs] = lambda: None
    overrides[airflow_views.run_asset_events] = lambda dag_id, run_id: []
    overrides[airflow_views.run_tasks] = lambda dag_id, run_id: tasks
    overrides[airflow_views.pool_waits] = lambda: waiting
    overrides[airflow_views.recent_runs] = lambda dag_id=None: runs
    yield TestClient(airflow_views.app)
    overrides.clear()


def test_the_run_tab_leads_with_why_nothing_was_published(views):
    page = views.get(f"/runs/text_daily_finetune/{RUN}").text
    head = page.split("<table>")[0]
    assert ("Not published: sentiment: 124 labelled eval texts &lt; min_eval_rows 200 "
            "(and 1 more failed rule)") in head
    assert "finetune waited 3 min 2 s for a slot of pool gpu_training" in page
    assert ("finetune is waiting for 1 min 10 s for a slot of pool gpu_training (1 slot, "
            "1 used); held by text_daily_finetune / backfill__x / finetune") in page


def test_the_runs_list_shows_span_and_outcome_without_opening_a_run(views):
    page = views.get("/dags/text_daily_finetune/runs").text
    rows = {r.split("</td>")[0]: r for r in page.split("<tr><td>")[1:]}
    mine = next(v for k, v in rows.items() if RUN in k)
    assert "<td>2026-12-03</td>" in mine and "Not published: sentiment: 124" in mine
    published = next(v for k, v in rows.items() if "scheduled__2026-12-03" in k)
    assert "<td>2026-12-02</td>" in published and "Published text v7" in published
    failed = next(v for k, v in rows.items() if "backfill__2026-11-02" in k)
    assert "<td>2026-11-01</td>" in failed and "Failed at validate" in failed
    queued = next(v for k, v in rows.items() if "manual__just-queued" in k)
    assert "not resolved yet" in queued
    assert "tasks waiting for a pool slot now" in page and "backfill__x / finetune" in page
    assert views.get("/runs").status_code == 200
    assert views.get("/dags/not_a_retrain_dag/runs").status_code == 404


def test_the_plugin_adds_the_runs_tab_and_the_note_listener():
    from retrain.orchestration import run_note_listener
    from retrain.orchestration.airflow_plugin import RetrainPlugin

    tabs = {v["name"]: v for v in RetrainPlugin.external_views}
    assert tabs["Retrain runs"]["destination"] == "dag"
    assert tabs["Retrain runs"]["href"] == "/retrain/dags/{DAG_ID}/runs"
    assert RetrainPlugin.listeners == [run_note_listener]


# --- on Airflow's test DB: the queries and the run's note -------------------------------

def _db_run(session, dag_id: str, run_id: str, state: str = "running"):
    from airflow.models.dagrun import DagRun

    run = DagRun(dag_id=dag_id, run_id=run_id, run_type="manual", state=state,
                 run_after=T0, start_date=T0)
    session.add(run)
    session.flush()
    return run


def _db_ti(session, dag_id, run_id, task_id, state, pool, **times):
    from airflow.models.taskinstance import TaskInstance as TI
    from sqlalchemy import insert

    session.execute(insert(TI).values(
        id=uuid.uuid4(), dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=-1,
        state=state, pool=pool, pool_slots=1, try_number=1, max_tries=1,
        priority_weight=1, queue="default", hostname="", executor_config={}, **times))


def test_the_queries_read_airflows_runs_tasks_and_pools(airflow_home):
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session

    dag_id = "text_daily_finetune"
    with create_session() as session:
        if not session.query(Pool).filter(Pool.pool == "views_test_gpu").count():
            session.add(Pool(pool="views_test_gpu", slots=1, description="",
                             include_deferred=False))
        _db_run(session, dag_id, "q_run_1")
        _db_run(session, dag_id, "q_run_2", state="failed")
        _db_ti(session, dag_id, "q_run_1", "finetune", "scheduled", "views_test_gpu",
               scheduled_dttm=T0)
        _db_ti(session, dag_id, "q_run_2", "finetune", "running", "views_test_gpu",
               start_date=T0)
        _db_ti(session, dag_id, "q_run_2", "validate", "failed", "retrain_heavy",
               start_date=T0, end_date=T0)
    runs = {r["run_id"]: r for r in pool_view.recent_run_rows([dag_id])}
    assert runs["q_run_2"]["failed"] == ["validate"] and runs["q_run_2"]["state"] == "failed"
    assert runs["q_run_1"]["failed"] == []
    (task,) = pool_view.run_task_rows(dag_id, "q_run_1")
    assert (task["task_id"], task["state"], task["pool"]) == ("finetune", "scheduled",
                                                             "views_test_gpu")
    (waiting,) = [p for p in pool_view.current() if p["pool"] == "views_test_gpu"]
    assert [w["run_id"] for w in waiting["waiting"]] == ["q_run_1"]
    assert [h["run_id"] for h in waiting["holders"]] == ["q_run_2"]


def test_a_run_that_ends_gets_its_span_and_outcome_as_note(airflow_home, tmp_path,
                                                          monkeypatch):
    """The listener on the run's DB row in the session that ends it (the scheduler's); a
    person's note is kept."""
    from airflow.models.dagrun import DagRun, DagRunNote
    from airflow.utils.session import create_session

    from retrain.orchestration import run_note_listener

    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path))
    dag_id = "text_daily_finetune"
    _folder(tmp_path, "text", "2026-12-03", "note_run_1", {
        "published": None, "evaluation": {"blessed": False, "reasons": TEXT_REASONS}})
    with create_session() as session:
        run = _db_run(session, dag_id, "note_run_1", state="success")
        run_note_listener.on_dag_run_success(dag_run=run, msg="success")
        person = _db_run(session, dag_id, "note_run_2", state="failed")
        person.dag_run_note = DagRunNote(content="looking into it", user_id="alice")
        session.flush()
        run_note_listener.on_dag_run_failed(dag_run=person, msg="task_failure")
        other = _db_run(session, "not_retrain", "note_run_3", state="success")
        run_note_listener.on_dag_run_success(dag_run=other, msg="success")
    with create_session() as session:
        notes = {r.run_id: r.note for r in session.query(DagRun).filter(
            DagRun.run_id.in_(["note_run_1", "note_run_2", "note_run_3"]))}
    assert notes["note_run_1"] == ("span 2026-12-03: Not published: sentiment: 124 labelled "
                                   "eval texts < min_eval_rows 200 (and 1 more failed rule)")
    assert notes["note_run_2"] == "looking into it"
    assert notes["note_run_3"] is None


def test_airflow_calls_the_listener_when_a_run_ends(register_dag, tmp_path, monkeypatch):
    """Through Airflow's own run loop (dag.test() ends the run as the scheduler does): the
    note is on the run afterwards."""
    from types import SimpleNamespace

    from airflow.models.dagrun import DagRun
    from airflow.sdk import DAG, task
    from airflow.utils.session import create_session

    from retrain.orchestration import run_note_listener

    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path))
    monkeypatch.setattr(run_note_listener, "FAMILIES", {"fake": SimpleNamespace(
        name="fake", dag_id="note_listener_test")})

    @task
    def push(run_id=None):   # what push leaves in the run's folder
        _folder(tmp_path, "fake", "2026-12-03", run_id, {"published": {"version": 2}})

    with DAG("note_listener_test", schedule=None, start_date=T0) as dag:
        push()
    register_dag(dag)
    run = dag.test(logical_date=T0)
    with create_session() as session:
        note = session.query(DagRun).filter(DagRun.dag_id == "note_listener_test",
                                            DagRun.run_id == run.run_id).one().note
    assert note == "span 2026-12-03: Published fake v2"
