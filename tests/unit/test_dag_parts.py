"""The DAG factory's named parts, each built or called alone (issue 47.3): the assets of a
run, the trigger form, the stage tasks, the span and publishing tasks, the tracked stage
call, the hand-off checks and the window's older days. No scheduler and no step process:
a task is built inside a bare DAG and looked at, a helper is called with a small run on
disk, and what would start a process is replaced by a recorder.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import json
from pathlib import Path

import pytest

from retrain.orchestration.families import CTR, FAMILIES, TEXT

SPAN = "2026-12-03"
# A distinct limit per stage: a task that read another stage's would be seen.
LIMITS = {k: dt.timedelta(minutes=i + 1) for i, k in enumerate(
    ("resolve_span", "sensor_poke", "validate", "preprocess", "train", "evaluate",
     "approve", "push"))}


def _build(make):
    """The operators `make()` creates inside a bare DAG with the retrain DAGs' default_args."""
    from airflow.sdk import DAG

    from retrain.orchestration.dag_defaults import DAILY

    with DAG("parts", schedule=None, start_date=DAILY["start_date"],
             default_args=DAILY["default_args"]) as dag:
        make()
    return dag


def _ctx(tmp_path: Path, family=CTR, shadow=False):
    from retrain.common.run_context import RunContext

    return RunContext.create(family.name, SPAN, tmp_path / "home", "manual__parts",
                             raw_root=tmp_path / "raw", shadow=shadow)


def _day(ctx, day: str, text: str = "a,b\n1,2\n") -> str:
    day_dir = Path(ctx.partition(day))
    day_dir.mkdir(parents=True, exist_ok=True)
    (day_dir / "part-0.csv").write_text(text)
    (day_dir / "_SUCCESS").write_text("{}")
    return str(day_dir)


def _record_validation(ctx, day: str, content: dict) -> None:
    """What a validation of `day` by this run records: the content digest it read."""
    from retrain.orchestration.custody import VALIDATION_RECORD

    path = Path(ctx.for_day(day).run_dir) / VALIDATION_RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"figures": {"content": content}}))


# --- the factory itself ---------------------------------------------------------------

def test_make_dag_reads_as_a_short_list_of_parts():
    from retrain.orchestration import dag_factory

    assert len(inspect.getsource(dag_factory.make_dag).splitlines()) <= 80
    assert len(inspect.getsource(dag_factory).splitlines()) <= 600
    # Its former contents keep their names for their importers (tests, bench).
    for name in ("make_dag", "family_params", "left_out_problem", "raw_ref_or_fail",
                 "span_poke_seconds"):
        assert callable(getattr(dag_factory, name)), name


# --- run_assets -------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES.values(), ids=lambda f: f.name)
def test_each_family_has_its_own_three_assets(family):
    from retrain.orchestration.run_assets import run_assets

    assets = run_assets(family)
    assert (assets.raw.name, assets.raw.uri) == (
        f"{family.name}_raw_logs", f"file:///retrain/raw/{family.name}")
    assert (assets.examples.name, assets.examples.uri) == (
        f"{family.name}_transformed_examples", f"file:///retrain/transformed/{family.name}")
    # The recommendations DAG schedules on this name.
    assert (assets.model.name, assets.model.uri) == (
        family.model_asset, f"file:///retrain/registry/{family.name}")
    other = run_assets(TEXT if family is CTR else CTR)
    assert not {a.uri for a in dataclasses.astuple(assets)} & {
        a.uri for a in dataclasses.astuple(other)}


# --- family_params ----------------------------------------------------------------------

def test_the_trigger_form_has_the_common_params_then_the_familys(monkeypatch):
    from retrain.orchestration.family_params import family_params

    monkeypatch.setenv(TEXT.config_env, "/deployed/reviews.yaml")
    monkeypatch.delenv(TEXT.raw_root_env, raising=False)
    params = family_params(TEXT)
    common = {"span", "window_days", "eval_percent", "shadow", "force_bless_reason",
              "approval", "approval_timeout_hours", "override_validation_reason",
              "override_validation_rules", "include_spans", "max_left_out_percent",
              "span_timeout_minutes", "raw_root", TEXT.config_param}
    assert common <= set(params)
    assert list(params)[-len(TEXT.params):] == list(TEXT.params)   # the family's last
    for name, schema in TEXT.params.items():
        assert params[name].value == schema["default"]
        assert "default" in schema                      # the descriptor is not consumed
    assert params[TEXT.config_param].value == "/deployed/reviews.yaml"
    assert params["raw_root"].value is None
    assert "raw/text" in params["raw_root"].description
    assert params["span_timeout_minutes"].value == 720


# --- stage_tasks ------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES.values(), ids=lambda f: f.name)
def test_stage_tasks_carry_their_pool_timeout_retries_and_assets(family):
    from retrain.orchestration import stage_tasks
    from retrain.orchestration.run_assets import run_assets

    assets = run_assets(family)
    ctx = {"span": SPAN}

    def make():
        checked = stage_tasks.validate_task(family, assets, LIMITS)(ctx)
        pre = stage_tasks.preprocess_task(family, assets, LIMITS)(ctx, checked)
        model = stage_tasks.train_task(family, assets, LIMITS)(ctx, pre)
        stage_tasks.evaluate_task(family, LIMITS)(ctx, pre, model)

    dag = _build(make)
    for stage in ("validate", "preprocess", "train", "evaluate"):
        op = dag.get_task(family.task_id(stage))
        assert op.pool == (family.stages[stage].pool or "default_pool"), stage
        assert op.execution_timeout == LIMITS[stage], stage
        assert op.retries == 1, stage          # bad data fails without retry, not by count
        assert op.doc_md and op.multiple_outputs, stage
    assert dag.get_task(family.task_id("validate")).outlets == [assets.raw]
    assert dag.get_task(family.task_id("preprocess")).outlets == [assets.examples]
    assert dag.get_task(family.task_id("train")).inlets == [assets.examples]
    assert dag.get_task(family.task_id("evaluate")).outlets == []
    assert dag.get_task(family.task_id("evaluate")).upstream_task_ids == {
        family.task_id("preprocess"), family.task_id("train")}
    if family is TEXT:
        assert family.task_id("train") == "finetune"


# --- span_tasks and publish_tasks -------------------------------------------------------

def test_the_sensors_read_their_poke_interval_when_the_dag_is_built(monkeypatch):
    from retrain.orchestration.publish_tasks import wait_for_turn_task
    from retrain.orchestration.span_tasks import wait_for_span_task

    def sensors():
        dag = _build(lambda: (wait_for_span_task(LIMITS)({}),
                              wait_for_turn_task(CTR, LIMITS)({}, {})))
        return dag.get_task("wait_for_span"), dag.get_task("wait_for_turn")

    monkeypatch.setenv("RETRAIN_SPAN_POKE_SECONDS", "40")
    span, turn = sensors()
    assert (span.poke_interval, turn.poke_interval) == (40, 30)
    assert (span.mode, turn.mode) == ("reschedule", "reschedule")   # no slot held waiting
    assert (span.timeout, turn.timeout) == (7 * 86400, 86400)
    assert span.execution_timeout == turn.execution_timeout == LIMITS["sensor_poke"]
    # More retries than a step's one: Airflow may fail a reschedule sensor between pokes.
    assert span.retries == turn.retries == 3
    assert span.retry_delay == turn.retry_delay == dt.timedelta(seconds=20)
    monkeypatch.setenv("RETRAIN_SPAN_POKE_SECONDS", "2")
    span, turn = sensors()
    # The turn never pokes faster than 30 s, whatever the span's interval (apache/airflow#71172).
    assert (span.poke_interval, turn.poke_interval) == (2, 30)


def test_wait_for_span_sees_the_marker(tmp_path):
    from retrain.orchestration.span_tasks import wait_for_span_task

    ctx = _ctx(tmp_path)
    _day(ctx, SPAN)
    op = _build(lambda: wait_for_span_task(LIMITS)({})).get_task("wait_for_span")
    assert op.python_callable(ctx.to_xcom(), params={"span_timeout_minutes": 1}) is True


def test_a_shadow_run_takes_no_turn(tmp_path):
    from retrain.orchestration.publish_tasks import wait_for_turn_task

    op = _build(lambda: wait_for_turn_task(CTR, LIMITS)({}, {})).get_task("wait_for_turn")
    # No ti: a shadow run never asks Airflow about the runs ahead of it.
    assert op.python_callable(_ctx(tmp_path, shadow=True).to_xcom(), {}, ti=None) is True


def test_resolve_span_refuses_a_raw_root_outside_the_allowed_ones(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from retrain.orchestration.span_tasks import resolve_span_task

    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RETRAIN_ALLOWED_DATA_ROOTS", str(tmp_path / "allowed"))
    op = _build(lambda: resolve_span_task(CTR, LIMITS)()).get_task("resolve_span")
    assert op.execution_timeout == LIMITS["resolve_span"]
    with pytest.raises(AirflowFailException, match="refusing the run"):
        op.python_callable(params={"span": SPAN, "raw_root": str(tmp_path / "elsewhere")},
                           logical_date=None, dag_run=None, run_id="manual__parts")
    assert not (tmp_path / "home" / "runs").exists()    # nothing pinned for a refused run


def test_approve_and_push_close_the_run(tmp_path):
    from retrain.orchestration.publish_tasks import approve_task, push_task
    from retrain.orchestration.run_assets import run_assets

    assets = run_assets(TEXT)

    def make():
        approve = approve_task(TEXT, LIMITS)
        push_task(TEXT, assets, LIMITS)({}, {}, {}, {}, {}, approve.output)

    dag = _build(make)
    approve, push = dag.get_task("approve"), dag.get_task("push")
    # Set after construction: given to the HITL operator it would become its response
    # timeout (the wait for a person is approval_timeout_hours).
    assert approve.execution_timeout == LIMITS["approve"]
    assert push.outlets == [assets.model] and push.execution_timeout == LIMITS["push"]
    assert push.upstream_task_ids == {"approve"}


# --- tracked_stage ----------------------------------------------------------------------

def test_run_stage_records_with_the_stages_contract_and_types_failures(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from retrain.common import results
    from retrain.common.errors import BadData
    from retrain.orchestration import lineage
    from retrain.orchestration.tracked_stage import run_stage

    seen = {}

    def run_tracked(name, module, spec, **kw):
        seen.update(name=name, module=module, spec=spec, **kw)
        return {"artifact": {"uri": "x"}}

    monkeypatch.setattr(lineage, "run_tracked", run_tracked)
    ctx = _ctx(tmp_path)
    stage = CTR.stages["preprocess"]
    assert run_stage(CTR, "preprocess", ctx, {}, {}, [{"name": "in"}],
                     spec={"given": 1}) == {"artifact": {"uri": "x"}}
    assert (seen["name"], seen["module"], seen["spec"]) == ("preprocess", stage.module,
                                                            {"given": 1})
    assert seen["family"] == "ctr" and seen["run_dir"] == ctx.run_dir
    assert seen["uri_key"] == results.URI_FIELD["preprocess"]
    assert seen["artifact_type"] == stage.artifact_type and seen["reuse"] == stage.reuse
    assert seen["figures"][:len(stage.figures)] == stage.figures
    assert seen["inputs"] == [{"name": "in"}]

    def bad(*args, **kw):
        raise BadData("day 2026-12-03: 3 rows with no label")

    monkeypatch.setattr(lineage, "run_tracked", bad)
    with pytest.raises(AirflowFailException, match="no label") as e:   # not retried
        run_stage(CTR, "preprocess", ctx, {}, {}, [], spec={})
    assert e.value.__cause__ is None


def test_published_names_the_serving_version_as_a_lineage_input(tmp_path, monkeypatch):
    from retrain.common import registry
    from retrain.orchestration.tracked_stage import published

    ctx = _ctx(tmp_path, family=TEXT)
    assert published(TEXT, ctx) == (None, [])          # nothing published yet

    class Serving:
        def __init__(self, root):
            self.root = root

        def current(self, name):
            return {"version": 4, "fingerprint": "sha256:abc"} if name == "text" else None

        def model_path(self, name, version):
            return self.root / name / f"v{version}"

    monkeypatch.setattr(registry, "Registry", Serving)
    path, refs = published(TEXT, ctx)
    assert path == f"{ctx.home}/registry/text/v4"
    assert refs == [{"name": "text-v4", "type": "published_model", "uri": path,
                     "fingerprint": "sha256:abc", "version": 4}]


# --- handoff_checks ---------------------------------------------------------------------

def test_verify_window_binds_each_day_to_its_validated_bytes(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from retrain.orchestration import custody
    from retrain.orchestration.handoff_checks import verify_window

    ctx = _ctx(tmp_path)
    older, overridden = "2026-12-02", "2026-12-01"
    for day in (SPAN, older, overridden):
        day_dir = _day(ctx, day, text=f"a,b\n{day},1\n")
        if day != overridden:
            _record_validation(ctx, day, custody.content(day_dir))
    refs = verify_window(ctx, [overridden, older, SPAN, "2026-11-30"], "preprocess",
                         unchecked=(overridden,))
    # A day with no partition is skipped; an overridden one is referenced unchecked.
    assert [r["name"] for r in refs] == [f"dt={overridden}", f"dt={older}", f"dt={SPAN}"]
    (Path(ctx.partition(older)) / "part-0.csv").write_text("a,b\nrewritten,0\n")
    with pytest.raises(AirflowFailException, match=f"refusing day {older}"):
        verify_window(ctx, [older, SPAN], "evaluate")
    assert (Path(ctx.quarantine_dir) / f"dt={older}.json").is_file()


def test_train_refuses_examples_made_from_other_bytes(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from retrain.orchestration.handoff_checks import check_examples_custody

    ctx = _ctx(tmp_path)
    _record_validation(ctx, SPAN, {"digest": "sha256:validated", "files": {}})
    record = Path(ctx.run_dir) / "lineage" / "preprocess.json"

    def preprocessed_from(digest: str, overridden=()):
        record.write_text(json.dumps({"uri": "file:///examples", "inputs": [
            {"type": "raw_span", "name": f"dt={SPAN}", "fingerprint": digest},
            {"type": "config", "name": "features.yaml", "fingerprint": "x"}]}))
        return {"window_screen": {"included_by_override": [{"span": d} for d in overridden]}}

    check_examples_custody(ctx, preprocessed_from("sha256:validated"))
    with pytest.raises(AirflowFailException, match="sha256:other"):
        check_examples_custody(ctx, preprocessed_from("sha256:other"))
    # A day trained on by a recorded override is not checked.
    check_examples_custody(ctx, preprocessed_from("sha256:other", overridden=[SPAN]))


# --- window_days ------------------------------------------------------------------------

def test_judge_window_records_alerts_and_stops_past_the_policy(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from retrain.common import window
    from retrain.orchestration import alerts
    from retrain.orchestration.window_days import judge_window

    alerted = []
    monkeypatch.setattr(alerts, "spans_quarantined",
                        lambda ctx, dag_id, days: alerted.append(("quarantined", dag_id, days)))
    monkeypatch.setattr(alerts, "window_days_left_out",
                        lambda ctx, dag_id, verdict: alerted.append(("left_out", dag_id)))
    ctx = _ctx(tmp_path)
    Path(ctx.run_dir).mkdir(parents=True)
    screened = {"used": ["2026-12-02", SPAN],
                "left_out": [{"span": "2026-12-01", "reason": "failed validation"}],
                "included_by_override": []}
    verdict = judge_window(CTR, ctx, {"max_left_out_percent": 50}, screened)
    assert verdict["ok"] and verdict["left_out"] == screened["left_out"]
    assert alerted == [("quarantined", CTR.dag_id, ["2026-12-01"]),
                       ("left_out", CTR.dag_id)]
    with pytest.raises(AirflowFailException, match="window policy"):
        judge_window(CTR, ctx, {"max_left_out_percent": 10}, screened)
    written = json.loads((Path(ctx.run_dir) / window.POLICY_FILE).read_text())
    assert written["screen"] == screened and not written["policy"]["ok"]  # the stopped run's


def test_screen_window_wants_a_reason_for_days_let_in(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from retrain.common import window
    from retrain.orchestration.window_days import screen_window

    asked = {}

    def screen(days, span, **kw):
        asked.update(days=days, span=span, include=kw["include"])
        return {"used": days, "left_out": [],
                "included_by_override": [{"span": days[0], "reason": "failed"}]}

    monkeypatch.setattr(window, "screen", screen)
    ctx = _ctx(tmp_path)
    params = {"window_days": 3, "include_spans": ["2026-12-01"]}
    with pytest.raises(AirflowFailException, match="override_validation_reason"):
        screen_window(CTR, ctx, params)
    assert asked == {"days": ["2026-12-01", "2026-12-02", SPAN], "span": SPAN,
                     "include": ["2026-12-01"]}
    screened = screen_window(CTR, ctx, {**params, "override_validation_reason": "known"})
    assert screened["used"] == asked["days"]


def test_older_days_without_a_window_step_are_validated_one_by_one(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    from retrain.orchestration import window_days

    one_by_one = dataclasses.replace(CTR, stages={
        **CTR.stages, "validate": dataclasses.replace(CTR.stages["validate"],
                                                      window_module=None)})
    ctx = _ctx(tmp_path)
    for day in ("2026-12-01", "2026-12-02"):
        _day(ctx, day)
    ran = []

    def run_stage(family, name, day_ctx, params, upstream, inputs, **kw):
        ran.append((day_ctx.span, params["override_validation_reason"], inputs[0]["name"]))
        assert set(kw) == {"extra_figures", "after"}     # bound to the bytes it read
        if day_ctx.span == "2026-12-01":
            raise AirflowFailException("bad data")

    monkeypatch.setattr(window_days, "run_stage", run_stage)
    passed = window_days.validate_days(one_by_one, ctx, {"override_validation_reason": "x"},
                                       ["2026-12-01", "2026-12-02"])
    assert passed == {"2026-12-01": False, "2026-12-02": True}
    # An older day is never let through by this run's override.
    assert ran == [("2026-12-01", None, "dt=2026-12-01"), ("2026-12-02", None, "dt=2026-12-02")]
