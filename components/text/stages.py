"""The text family's spec builders: DAG params + run context -> each step's spec.

Called by the DAG factory inside the task (stdlib only). Dataset settings (columns, tasks,
labels, checkpoint, validation bounds, gate limits) are not here: they come from the
config file the steps read; params only carry per-run knobs.
"""
from __future__ import annotations

from components.common.window import left_out_spans


def validate(ctx: dict, params: dict, upstream: dict) -> dict:
    return {"span_dir": ctx["span_dir"], "out_dir": f"{ctx['run_dir']}/validation",
            "text_config": ctx["config"], "run_id": ctx["run_id"],
            "quarantine_dir": ctx["quarantine_dir"],
            "override_reason": params.get("override_validation_reason"),
            "override_rules": params.get("override_validation_rules")}


def preprocess(ctx: dict, params: dict, upstream: dict) -> dict:
    return {"raw_root": ctx["raw_root"], "span": ctx["span"],
            "output_dir": f"{ctx['run_dir']}/preprocess", "text_config": ctx["config"],
            "window_days": params["window_days"], "eval_percent": params["eval_percent"],
            "exclude_spans": left_out_spans(upstream)}


def _dev_slices(params: dict) -> dict:
    """Early-stopping and calibration slices of the eval split (see the dev_examples param)."""
    dev = params["dev_examples"]
    if not dev:
        return {"max_eval_examples": params.get("max_eval_examples")}
    return {"max_eval_examples": dev, "calibration_examples": dev}


def train(ctx: dict, params: dict, upstream: dict) -> dict:
    return {"preprocess_dir": upstream["preprocess"]["output_dir"],
            "out_dir": f"{ctx['run_dir']}/model",
            "warm_start_model_dir": upstream["published"] if params["warm_start"] else None,
            "epochs": params["epochs"], "batch_size": params["batch_size"],
            "max_seq_length": params.get("max_seq_length"),
            "max_train_examples": params.get("max_train_examples"),
            "strategy": params["strategy"], **_dev_slices(params)}


def evaluate(ctx: dict, params: dict, upstream: dict) -> dict:
    return {"preprocess_dir": upstream["preprocess"]["output_dir"],
            "candidate_model_dir": upstream["train"]["model_dir"],
            "baseline_model_dir": upstream["published"],
            "out_dir": f"{ctx['run_dir']}/evaluation", "min_auc": params.get("min_auc"),
            "beat_classical_baseline": params.get("beat_classical_baseline"),
            "force_reason": params.get("force_bless_reason"),
            "max_eval_examples": params.get("max_eval_examples"),
            "max_train_examples": params.get("max_train_examples"),
            "eval_offset": 2 * params["dev_examples"]}
