"""Issue 46: the push stage does not publish a candidate identical to the published model.

The tester's case: the CTR DAG triggered as opened, then unpaused, pushed the same trained
model (one training artifact, reused) three times and the registry made three versions.
Now the second push of that model says "unchanged" (in its summary and the push task's
skip reason) and the registry keeps one version; a different model is still published, and
so is a model equal to a version that was rolled back from (it is not what is served).
Real trained SavedModel, real serving check, real registry.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from retrain.common.registry import Registry, model_digest
from retrain.orchestration import lineage
from retrain.orchestration.push import SUMMARY_FILE, publish_if_blessed

pytestmark = pytest.mark.integration

# Fixtures home, span_dir, preprocessed, trained: tests/integration/conftest.py.


def _evaluate(span_dir, model_dir, out_dir, **kw):
    from components.ctr.evaluate import EvaluateSpec, run
    return run(EvaluateSpec(span_dir=str(span_dir), candidate_model_dir=model_dir,
                            out_dir=str(out_dir), eval_percent=25, min_auc=0.0, **kw))


def _push(tmp_path, span_dir, preprocessed, model_dir, evaluation, run_id, baseline):
    return publish_if_blessed(
        model_name="ctr", registry_root=str(tmp_path / "registry"),
        run_dir=str(tmp_path / run_id), dag_id="ctr_daily_retrain", run_id=run_id,
        span="2026-11-03", span_dir=str(span_dir), validation={"report": "validation.json"},
        preprocessed=preprocessed, trained={"model_dir": model_dir}, evaluation=evaluation,
        serving_check_module="components.ctr.serving_check", baseline_version=baseline)


def test_same_model_is_unchanged_other_models_are_published(tmp_path, span_dir, preprocessed,
                                                            trained):
    from test_evaluation import good, save_model
    registry = Registry(tmp_path / "registry")
    model = trained["model_dir"]
    evaluation = _evaluate(span_dir, model, tmp_path / "eval-1")
    first = _push(tmp_path, span_dir, preprocessed, model, evaluation, "run-1", None)
    assert first["published"]["version"] == 1 and first["unchanged"] is None
    assert first["published"]["model_digest"] == model_digest(model)

    # The same trained model again (a reused training artifact), evaluated against v1.
    evaluation = _evaluate(span_dir, model, tmp_path / "eval-2",
                           baseline_model_dir=str(registry.model_path("ctr", 1)),
                           force_reason="test: the same model, blessed")
    assert evaluation["blessed"] is True
    again = _push(tmp_path, span_dir, preprocessed, model, evaluation, "run-2", 1)
    assert again["published"] is None
    assert again["unchanged"]["version"] == 1
    assert again["unchanged"]["model_digest"] == first["published"]["model_digest"]
    assert "unchanged" in again["unchanged"]["message"]
    saved = json.loads((tmp_path / "run-2" / SUMMARY_FILE).read_text())
    assert saved["unchanged"] == again["unchanged"] and saved["published"] is None
    assert [m["version"] for m in registry.list_versions("ctr")] == [1]
    assert registry.current_version("ctr") == 1 and registry.check("ctr") == []
    assert "publish" not in lineage.read_records(tmp_path / "run-2")

    # The push task skips it (no asset event, no rejection alert), saying why.
    from airflow.sdk.exceptions import AirflowSkipException

    from retrain.common.run_context import RunContext
    from retrain.orchestration.dag_defaults import publish_or_skip
    ctx = RunContext.create("ctr", "2026-11-03", tmp_path, "run-3", raw_root=span_dir.parent)
    events: dict = {}
    evaluation = {**evaluation, "baseline_version": 1}   # as the DAG's evaluate task adds it
    with pytest.raises(AirflowSkipException, match=r"unchanged: .* ctr version 1"):
        publish_or_skip("ctr", "ctr_model", ctx,
                        dag_run=SimpleNamespace(dag_id="ctr_daily_retrain"),
                        outlet_events=events, evaluation=evaluation,
                        headline=("auc", "log_loss"), validation={"report": "validation.json"},
                        preprocessed=preprocessed, trained={"model_dir": model},
                        serving_check_module="components.ctr.serving_check")
    assert events == {} and [m["version"] for m in registry.list_versions("ctr")] == [1]

    # A different model is a new version.
    other = save_model(tmp_path / "other", good)
    evaluation = _evaluate(span_dir, other, tmp_path / "eval-4",
                           baseline_model_dir=str(registry.model_path("ctr", 1)),
                           force_reason="test: another model")
    out = _push(tmp_path, span_dir, preprocessed, other, evaluation, "run-4", 1)
    assert out["published"]["version"] == 2 and out["unchanged"] is None

    # Rolled back to v1, a candidate equal to v2 is a change from what is served.
    registry.rollback("ctr", 1, who="oncall", why="v2 regressed online")
    evaluation = _evaluate(span_dir, other, tmp_path / "eval-5",
                           baseline_model_dir=str(registry.model_path("ctr", 1)),
                           force_reason="test: v2's model again, after a rollback")
    out = _push(tmp_path, span_dir, preprocessed, other, evaluation, "run-5", 1)
    assert out["published"]["version"] == 3 and out["unchanged"] is None
    assert registry.current_version("ctr") == 3 and registry.check("ctr") == []
