"""The push stage: only a blessed candidate that really serves raw requests is published."""
from __future__ import annotations

import json

import pytest

from components.common.launch import StepFailed
from components.push import SUMMARY_FILE, publish_if_blessed
from components.registry import Registry

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
