"""Evaluation of the test family: RMSE of candidate and baseline on the same eval rows,
decided by the shared gate on a "min" headline metric."""
import dataclasses
import json
import sys
from pathlib import Path

from retrain.common.atomic import write_json
from retrain.common.step import main


@dataclasses.dataclass
class Spec:
    preprocess_dir: str
    candidate_model_dir: str
    out_dir: str
    baseline_model_dir: str | None = None
    max_rmse: float = 1.0
    max_rmse_regression: float = 0.05
    force_reason: str | None = None


def predict(model_dir, xs):
    import tensorflow as tf
    serve = tf.saved_model.load(model_dir).signatures["serving_default"]
    return serve(x=tf.constant(xs, tf.float32))["y"].numpy()


def run(spec: Spec) -> dict:
    import numpy as np

    from components.gate import MetricLimit, decide, headline_rules

    rows = json.loads((Path(spec.preprocess_dir) / "eval.json").read_text())
    xs, ys = [r["x"] for r in rows], np.array([r["y"] for r in rows])

    def metrics(model_dir):
        return {"rmse": float(np.sqrt(np.mean((predict(model_dir, xs) - ys) ** 2)))}

    candidate = metrics(spec.candidate_model_dir)
    baseline = metrics(spec.baseline_model_dir) if spec.baseline_model_dir else None
    limits = [MetricLimit("rmse", "min", absolute=spec.max_rmse,
                          max_regression=spec.max_rmse_regression)]
    decision = decide(candidate, baseline, None, spec.force_reason,
                      extra_rules=headline_rules(candidate, baseline, limits))
    out = write_json(Path(spec.out_dir) / "eval.json", {
        "candidate": candidate, "baseline": baseline, "decision": decision.to_dict(),
        "sample": {"x": xs[:8], "y": predict(spec.candidate_model_dir, xs[:8]).tolist()}})
    return {"eval_uri": str(out), "blessed": decision.blessed, "reasons": decision.reasons,
            "candidate": candidate, "baseline": baseline}


if __name__ == "__main__":
    sys.exit(main(Spec, run))
