"""Evaluation, slice guard, serving check and report on tiny generated data.

The real trained model (session fixture `trained`) is evaluated against a registry
version of itself and then checked in a fresh process, as the push task will do.
Hand-built SavedModels (a tf.Module scoring by feed position) stand in for candidates
with a known defect: worse on one device, NaN, wrong shape, out of range, a
transformed-feature signature. They depend on nothing the trainer does.
"""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from components.ctr import features as F

pytestmark = pytest.mark.integration

# Fixtures home, span_dir, preprocessed, trained: tests/integration/conftest.py.


def raw_dtypes():
    import tensorflow as tf
    return {**{k: tf.string for k in [*F.HASHED_ID_FEATURES, *F.VOCAB_FEATURES]},
            **{k: tf.int64 for k in F.IDENTITY_FEATURES},
            **{k: tf.float32 for k in F.NUMERIC_FEATURES}}


def save_model(path, score_fn, inputs=None, signature="serving_default") -> str:
    """A SavedModel whose signature maps raw features to {"p_click": score_fn(features)}."""
    from savedmodels import save_model as save
    return save(path, score_fn, inputs or raw_dtypes(), signature)


def position_logit(f):
    import tensorflow as tf
    return -0.7 * tf.math.log(tf.cast(f["position"], tf.float32)) - 2.0


def good(f):
    import tensorflow as tf
    return tf.sigmoid(position_logit(f))


def worse_on_ios(f):
    import tensorflow as tf
    z = position_logit(f)
    return tf.sigmoid(tf.where(tf.equal(f["device"], "ios"), -z - 4.0, z))  # order reversed


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import tensorflow as tf
    root = tmp_path_factory.mktemp("models")
    return {
        "good": save_model(root / "good", good),
        "worse_on_ios": save_model(root / "worse_on_ios", worse_on_ios),
        "nan": save_model(root / "nan", lambda f: good(f) * float("nan")),
        "wrong_shape": save_model(root / "wrong_shape", lambda f: tf.stack([good(f)] * 2, 1)),
        "out_of_range": save_model(root / "out_of_range", lambda f: position_logit(f)),
        "transformed_inputs": save_model(
            root / "transformed_inputs", lambda f: tf.sigmoid(tf.cast(f["position_xf"],
                                                                      tf.float32)),
            inputs={"position_xf": tf.int64}),
        "no_serving_default": save_model(root / "no_serving_default", good,
                                         signature="predict"),
    }


@pytest.fixture(scope="module")
def published_history(tmp_path_factory, trained):
    """A registry with two published versions of the trained model."""
    from retrain.common.registry import Registry
    root = tmp_path_factory.mktemp("registry")
    registry = Registry(root)
    for i, auc in ((1, 0.61), (2, 0.62)):
        registry.publish(trained["model_dir"], "ctr", {
            "run_id": f"run-{i}", "data_span": f"2026-11-0{i}",
            "metrics": {"auc": auc, "log_loss": 0.2}})
    return registry


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, span_dir, trained, published_history):
    """The trained model evaluated against registry v2 (the same model), as the DAG does."""
    from components.ctr.evaluate import EvaluateSpec, run
    out_dir = tmp_path_factory.mktemp("evaluation")
    result = run(EvaluateSpec(
        span_dir=str(span_dir), candidate_model_dir=trained["model_dir"],
        baseline_model_dir=str(published_history.model_path("ctr", 2)),
        out_dir=str(out_dir), eval_percent=25, min_auc=0.0, min_slice_rows=100,
        min_slice_positives=3, registry_root=str(published_history.root)))
    return out_dir, result


def test_evaluate_writes_slices_intervals_scores_sample_and_report(evaluated, span_dir,
                                                                   trained):
    from components.ctr import rawdata
    out_dir, result = evaluated
    report = json.loads((out_dir / "eval.json").read_text())
    assert result["blessed"] is True and result["report_error"] is None
    # Slices: all three, top categories + other; identical models => no slice rule fails.
    assert report["slices"]["names"] == ["category", "device", "user_type"]
    cand = report["slices"]["candidate"]
    assert "other" in cand["category"] and len(cand["category"]) <= 11
    assert set(cand["user_type"]) <= {"new", "returning", "unknown"}
    assert sum(v["n"] for v in cand["device"].values()) == report["rows"]
    slice_rules = [r for r in report["decision"]["rules"]
                   if r["name"].startswith("max_slice_auc_drop[")]
    assert slice_rules and all(r["passed"] for r in slice_rules)
    # Intervals around the estimates; paired delta of a model with itself is exactly 0.
    ci = report["candidate"]["ci"]
    assert ci["auc"]["low"] <= report["candidate"]["auc"] <= ci["auc"]["high"]
    assert ci["auc_delta"]["low"] == ci["auc_delta"]["high"] == 0.0
    assert report["bayes_optimal"]["ci"]["auc"]["low"] is not None
    # The scores sample is what the serving check compares against: first eval rows.
    sample = json.loads((out_dir / "scores_sample.json").read_text())
    rows = rawdata.read_eval_rows(span_dir, 25)
    n = min(500, rows.num_rows)
    assert sample["example_ids"] == rows.column(F.EXAMPLE_ID_KEY).to_pylist()[:n]
    expected = rawdata.predict(trained["model_dir"], rawdata.to_raw_features(rows.slice(0, n)))
    np.testing.assert_allclose(sample["scores"], expected, atol=1e-6)
    # The report, next to eval.json, with the registry's history.
    assert result["report_uri"] == str(out_dir / "report.html")
    html = (out_dir / "report.html").read_text()
    assert len(re.findall(r'src="data:image/png;base64,', html)) == 3
    assert "v2 (current)" in html and "BLESSED" in html
    for reason in report["decision"]["reasons"]:
        assert reason.replace(">", "&gt;").replace("<", "&lt;") in html


def test_slice_guard_rejects_a_candidate_worse_on_one_device(span_dir, models, tmp_path):
    from components.ctr.evaluate import EvaluateSpec, run
    result = run(EvaluateSpec(
        span_dir=str(span_dir), candidate_model_dir=models["worse_on_ios"],
        baseline_model_dir=models["good"], out_dir=str(tmp_path), eval_percent=50,
        min_auc=0.0, max_auc_drop=1.0, max_log_loss_increase=10.0, slices=["device"],
        min_slice_rows=200, min_slice_positives=10, refuse_confidently_worse=False))
    assert result["blessed"] is False
    assert result["failed_rules"] == ["max_slice_auc_drop[device=ios]"]
    assert any(r.startswith("slice device=ios") and r.endswith(": fail")
               for r in result["reasons"])
    html = (tmp_path / "report.html").read_text()
    assert "NOT BLESSED" in html and "max_slice_auc_drop[device=ios]" in html


def test_serving_check_passes_the_trained_model_in_a_fresh_process(evaluated, trained,
                                                                    tmp_path):
    from retrain.orchestration.launch import run_step
    out_dir, _ = evaluated
    result = run_step("components.ctr.serving_check", {
        "model_dir": trained["model_dir"], "eval_dir": str(out_dir),
        "out_dir": str(tmp_path / "check"), "latency_requests": 30})
    assert result["passed"] is True and result["pid"] != os.getpid()
    assert {c["name"] for c in result["checks"]} == {
        "output_shape", "finite", "range", "matches_evaluation", "latency_single",
        "latency_batch"}
    assert result["max_abs_diff"] <= 1e-4
    assert set(result["latency"]) == {"1", "256"}
    assert set(result["inputs"]) == set(F.RAW_FEATURES)  # the signature takes raw columns
    saved = json.loads((tmp_path / "check" / "serving_check.json").read_text())
    assert saved["passed"] is True


@pytest.fixture(scope="module")
def good_eval_dir(span_dir, models, tmp_path_factory):
    """Evaluation of the position model: the scores the broken models are compared to."""
    from components.ctr.evaluate import EvaluateSpec, run
    out = tmp_path_factory.mktemp("good-eval")
    run(EvaluateSpec(span_dir=str(span_dir), candidate_model_dir=models["good"],
                     out_dir=str(out), eval_percent=25, min_auc=0.0))
    return out


@pytest.mark.parametrize("name,failed,message", [
    ("nan", {"finite", "range", "matches_evaluation"}, "NaN"),
    ("wrong_shape", {"output_shape", "matches_evaluation"}, "returned shape (256, 2)"),
    ("out_of_range", {"range", "matches_evaluation"}, "outside (0, 1)"),
    ("worse_on_ios", {"matches_evaluation"}, "max |serving - evaluation|"),
    ("transformed_inputs", None, "not raw feature columns"),
    ("no_serving_default", None, "no signature 'serving_default'"),
])
def test_serving_check_rejects_broken_models(name, failed, message, models, good_eval_dir,
                                             tmp_path):
    from components.ctr.serving_check import ServingCheckFailed, ServingCheckSpec, run
    with pytest.raises(ServingCheckFailed, match=re.escape(message)) as info:
        run(ServingCheckSpec(model_dir=models[name], eval_dir=str(good_eval_dir),
                             out_dir=str(tmp_path), latency_requests=3))
    assert "not publishing" in str(info.value)
    saved = json.loads((tmp_path / "serving_check.json").read_text())
    assert saved["passed"] is False
    if failed is not None:
        assert {c["name"] for c in saved["checks"] if not c["passed"]} == failed


def test_serving_check_passes_the_model_that_was_evaluated(models, good_eval_dir):
    from components.ctr.serving_check import ServingCheckSpec, run
    result = run(ServingCheckSpec(model_dir=models["good"], eval_dir=str(good_eval_dir),
                                  latency_requests=3))
    assert result["passed"] and result["max_abs_diff"] < 1e-6  # batching: float32 rounding


def test_failed_serving_check_fails_the_step_with_its_reason(models, good_eval_dir):
    """What the push task sees: the step exits non-zero with the check's own message."""
    from retrain.orchestration.launch import StepFailed, run_step
    with pytest.raises(StepFailed, match=r"ServingCheckFailed: .*finite: 500 of 500 scores "
                                         r"are NaN or inf.*not publishing"):
        run_step("components.ctr.serving_check", {"model_dir": models["nan"],
                                              "eval_dir": str(good_eval_dir),
                                              "latency_requests": 3})
