"""The push stage: only a blessed candidate that really serves raw requests is published."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrain.orchestration.launch import StepFailed
from retrain.orchestration.push import SUMMARY_FILE, publish_if_blessed
from retrain.common.registry import Registry

pytestmark = pytest.mark.integration

# Fixtures home, span_dir, preprocessed, trained: tests/integration/conftest.py.


def _evaluate(span_dir, model_dir, out_dir, **kw):
    from components.ctr.evaluate import EvaluateSpec, run
    return run(EvaluateSpec(span_dir=str(span_dir), candidate_model_dir=model_dir,
                            out_dir=str(out_dir), eval_percent=25, **kw))


def _push(tmp_path, span_dir, preprocessed, model_dir, evaluation, run_id="run-1"):
    return publish_if_blessed(
        model_name="ctr", registry_root=str(tmp_path / "registry"), run_dir=str(tmp_path / "run"),
        dag_id="ctr_daily_retrain", run_id=run_id, span="2026-11-03", span_dir=str(span_dir),
        validation={"report": "validation.json"}, preprocessed=preprocessed,
        trained={"model_dir": model_dir}, evaluation=evaluation,
        serving_check_module="components.ctr.serving_check")


def test_blessed_model_is_published_with_its_lineage(tmp_path, span_dir, preprocessed, trained):
    evaluation = _evaluate(span_dir, trained["model_dir"], tmp_path / "eval", min_auc=0.0)
    summary = _push(tmp_path, span_dir, preprocessed, trained["model_dir"], evaluation)
    assert summary["published"]["version"] == 1 and summary["serving_check"]["passed"]
    meta = Registry(tmp_path / "registry").current("ctr")
    assert meta["run_id"] == "run-1" and meta["inputs"]["raw_span"] == str(span_dir)
    assert meta["metrics"]["auc"] == summary["published"]["auc"]
    assert json.loads((tmp_path / "run" / SUMMARY_FILE).read_text())["published"]["version"] == 1
    # The serving check went through the tracked launcher like every step: it is in the
    # run's lineage (and so in the copy the registry keeps), with its figures.
    from retrain.orchestration import lineage
    check = lineage.read_records(tmp_path / "run")["serving_check"]
    assert check["type"] == "serving_check" and check["uri"] == str(tmp_path / "run" / "serving_check")
    assert "latency" in check["figures"] and check["reused"] is False
    assert "serving_check" in meta["lineage"]


def test_rejected_candidate_is_recorded_not_published(tmp_path, span_dir, preprocessed, trained):
    evaluation = _evaluate(span_dir, trained["model_dir"], tmp_path / "eval", min_auc=0.999)
    summary = _push(tmp_path, span_dir, preprocessed, trained["model_dir"], evaluation)
    assert summary["published"] is None
    assert not (tmp_path / "registry" / "ctr").exists()
    saved = json.loads((tmp_path / "run" / SUMMARY_FILE).read_text())
    assert saved["evaluation"]["blessed"] is False


def test_blessed_model_that_cannot_serve_is_not_published(tmp_path, span_dir, preprocessed,
                                                          trained):
    """Evaluation blessed the real model; the artifact handed to push is then swapped for
    one that returns NaN (a corrupted or mismatched export): the fresh-process serving
    check must catch it and nothing may be published."""
    from test_evaluation import good, save_model
    evaluation = _evaluate(span_dir, trained["model_dir"], tmp_path / "eval", min_auc=0.0,
                           force_reason="test: even a forced blessing must serve")
    broken = save_model(tmp_path / "broken", lambda f: good(f) * float("nan"))
    with pytest.raises(StepFailed, match="NaN"):
        _push(tmp_path, span_dir, preprocessed, broken, evaluation)
    assert not (tmp_path / "registry" / "ctr").exists()
    saved = json.loads((tmp_path / "run" / SUMMARY_FILE).read_text())
    assert saved["published"] is None and saved["serving_check"]["passed"] is False


def test_shadow_run_evaluates_but_never_publishes(tmp_path, span_dir, preprocessed, trained):
    evaluation = _evaluate(span_dir, trained["model_dir"], tmp_path / "eval", min_auc=0.0)
    assert evaluation["blessed"] is True
    summary = publish_if_blessed(
        model_name="ctr", registry_root=str(tmp_path / "registry"), run_dir=str(tmp_path / "run"),
        dag_id="ctr_daily_retrain", run_id="backfill-1", span="2026-11-03",
        span_dir=str(span_dir), validation={}, preprocessed=preprocessed,
        trained={"model_dir": trained["model_dir"]}, evaluation=evaluation, shadow=True,
        serving_check_module="components.ctr.serving_check")
    assert summary["published"] is None and summary["shadow"] is True
    assert not (tmp_path / "registry" / "ctr").exists()


def test_push_against_a_baseline_that_is_no_longer_current_is_refused(
        tmp_path, span_dir, preprocessed, trained):
    """Design rule 20: evaluation compared the candidate with v2; an operator rolled back to
    v1 while the run was in flight. The push (forced, even) must not make the candidate
    current over the rollback: it is refused, recorded and raised, and nothing is published."""
    from retrain.orchestration import lineage
    from retrain.common.errors import BadData
    from retrain.common.registry import StaleBaseline

    registry = Registry(tmp_path / "registry")
    for old_run in ("old-1", "old-2"):
        registry.publish(trained["model_dir"], "ctr",
                         {"run_id": old_run, "dag_id": "ctr_daily_retrain"})
    evaluation = _evaluate(span_dir, trained["model_dir"], tmp_path / "eval", min_auc=0.0,
                           baseline_model_dir=str(registry.model_path("ctr", 2)),
                           force_reason="test: a forced publish is refused on stale facts too")
    assert evaluation["blessed"] is True
    evaluation = {**evaluation, "baseline_version": 2}   # as the DAG's evaluate task adds it
    registry.rollback("ctr", 1, who="oncall", why="v2 regressed online")
    before = sorted(p.name for p in (tmp_path / "registry" / "ctr").iterdir())

    with pytest.raises(StaleBaseline) as caught:
        _push(tmp_path, span_dir, preprocessed, trained["model_dir"], evaluation)
    assert isinstance(caught.value, BadData)   # the task fails without retry
    saved = json.loads((tmp_path / "run" / SUMMARY_FILE).read_text())
    assert saved["published"] is None and saved["serving_check"]["passed"] is True
    refused = saved["publish_refused"]
    assert (refused["expected"], refused["current"]) == (2, 1)
    assert refused["reason"] == str(caught.value)
    assert "no longer current" in refused["reason"] and "model 'ctr'" in refused["reason"]
    assert registry.current_version("ctr") == 1   # the rollback stands
    assert sorted(p.name for p in (tmp_path / "registry" / "ctr").iterdir()) == before
    assert registry.find_run("ctr", "run-1", "ctr_daily_retrain") is None
    assert registry.check_report("ctr") == {"errors": [], "warnings": []}
    assert "publish" not in lineage.read_records(tmp_path / "run")

    # The push task (retrain.orchestration.dag_defaults.publish_or_skip) fails it without retry.
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    from retrain.orchestration.dag_defaults import publish_or_skip
    from retrain.common.run_context import RunContext
    ctx = RunContext.create("ctr", "2026-11-03", tmp_path, "run-1", raw_root=span_dir.parent)
    with pytest.raises(AirflowFailException, match=r"no longer current \(expected current: "
                                                   r"version 2; actual current: version 1;"):
        publish_or_skip("ctr", "ctr_model", ctx,
                        dag_run=SimpleNamespace(dag_id="ctr_daily_retrain"),
                        outlet_events={}, evaluation=evaluation, headline=("auc", "log_loss"),
                        validation={"report": "validation.json"}, preprocessed=preprocessed,
                        trained={"model_dir": trained["model_dir"]},
                        serving_check_module="components.ctr.serving_check")
    assert registry.current_version("ctr") == 1
    assert sorted(p.name for p in (tmp_path / "registry" / "ctr").iterdir()) == before

    # Named explicitly, the baseline overrides the evaluation's (here: the current one):
    # no refusal. The candidate is v1's model (every version here is the trained model),
    # so it is not published again (issue 46): unchanged, the registry as it was.
    summary = publish_if_blessed(
        model_name="ctr", registry_root=str(tmp_path / "registry"),
        run_dir=str(tmp_path / "run"), dag_id="ctr_daily_retrain", run_id="run-1",
        span="2026-11-03", span_dir=str(span_dir), validation={"report": "validation.json"},
        preprocessed=preprocessed, trained={"model_dir": trained["model_dir"]},
        evaluation=evaluation, serving_check_module="components.ctr.serving_check",
        baseline_version=1)
    assert summary["published"] is None and "publish_refused" not in summary
    assert summary["unchanged"]["version"] == 1
    assert registry.current_version("ctr") == 1 and registry.check("ctr") == []
    assert sorted(p.name for p in (tmp_path / "registry" / "ctr").iterdir()) == before


def test_a_model_or_record_changed_after_evaluation_is_never_published(
        tmp_path, span_dir, preprocessed, trained):
    """The attacker of "change data between steps": after evaluation blessed the trained
    model, its files are replaced by another real model and the serving check's reference
    scores rewritten to match it (so that check passes). The registry compares the copied
    files with the digest evaluation recorded: refused, named, nothing published. An
    eval.json edited after evaluation (its metrics or its gate) is refused the same way."""
    import shutil

    from test_evaluation import position_logit, save_model

    from components.ctr import rawdata
    from retrain.common.errors import BAD_DATA, kind_of
    from retrain.common.registry import ChangedAfterEvaluation, model_digest

    model = tmp_path / "model"
    shutil.copytree(trained["model_dir"], model)
    evaluation = _evaluate(span_dir, str(model), tmp_path / "eval", min_auc=0.0)
    assert evaluation["blessed"] is True
    assert evaluation["candidate_model_digest"] == model_digest(model)

    def brighter(f):
        import tensorflow as tf
        return tf.sigmoid(position_logit(f) + 1.0)
    other = save_model(tmp_path / "other", brighter)
    shutil.rmtree(model)
    shutil.copytree(other, model)
    sample_file = tmp_path / "eval" / "scores_sample.json"
    evaluated_sample = sample_file.read_text()
    sample = json.loads(evaluated_sample)
    rows = rawdata.read_eval_rows(span_dir, 25).slice(0, len(sample["example_ids"]))
    sample["scores"] = [float(x) for x in rawdata.predict(str(model),
                                                          rawdata.to_raw_features(rows))]
    sample_file.write_text(json.dumps(sample))

    with pytest.raises(ChangedAfterEvaluation) as caught:
        _push(tmp_path, span_dir, preprocessed, str(model), evaluation)
    assert kind_of(caught.value) == BAD_DATA   # the task fails without retry
    message = str(caught.value)
    assert "the candidate model" in message and str(model) in message
    assert "changed after evaluation" in message and "model 'ctr'" in message
    saved = json.loads((tmp_path / "run" / SUMMARY_FILE).read_text())
    assert saved["serving_check"]["passed"] is True     # the forged reference fooled it
    assert saved["published"] is None and saved["publish_refused"]["changed"] == str(model)
    assert _versions_and_leftovers(tmp_path / "registry" / "ctr") == []

    # The evaluated model back, its evaluation record edited: refused before it is copied
    # into the registry's record of why the model serves.
    shutil.rmtree(model)
    shutil.copytree(trained["model_dir"], model)
    sample_file.write_text(evaluated_sample)
    record = Path(evaluation["eval_uri"])
    report = json.loads(record.read_text())
    report["candidate"]["auc"] = 0.99
    record.write_text(json.dumps(report))
    (tmp_path / "run" / SUMMARY_FILE).unlink()
    with pytest.raises(ChangedAfterEvaluation, match="the evaluation record"):
        _push(tmp_path, span_dir, preprocessed, str(model), evaluation)
    assert _versions_and_leftovers(tmp_path / "registry" / "ctr") == []


def _versions_and_leftovers(model_root: Path) -> list[str]:
    """Version folders and temporary copies under a model's registry folder."""
    from retrain.common.registry import LOCK_FILE
    return sorted(p.name for p in model_root.iterdir() if p.name != LOCK_FILE) \
        if model_root.exists() else []
