"""The text family's spec builders: DAG params + run context -> each step's spec.

Called by the DAG factory inside the task (stdlib only). Dataset settings (columns, tasks,
labels, checkpoint, validation bounds, gate limits) are not here: they come from the
config file the steps read; params only carry per-run knobs.
"""
from __future__ import annotations

from retrain.common.run_context import Built, RunContext
from retrain.common.window import left_out_spans


def validate(ctx: RunContext, params: dict, upstream: dict) -> dict:
    return {"span_dir": ctx.span_dir, "out_dir": f"{ctx.run_dir}/validation",
            "text_config": ctx.config, "run_id": ctx.run_id,
            "quarantine_dir": ctx.quarantine_dir,
            "override_reason": params.get("override_validation_reason"),
            "override_rules": params.get("override_validation_rules")}


def preprocess(ctx: RunContext, params: dict, upstream: dict) -> Built:
    left_out = left_out_spans(upstream)
    return Built(ctx.with_beam_args({
        "raw_root": ctx.raw_root, "span": ctx.span, "output_dir": f"{ctx.run_dir}/preprocess",
        "text_config": ctx.config, "window_days": params["window_days"],
        "eval_percent": params["eval_percent"], "exclude_spans": left_out}),
        left_out=tuple(left_out))


# The DAG form's dev_examples default (retrain.orchestration.families: Airflow's side
# cannot import step code; tests/unit/test_text_stages.py holds the two equal).
DEV_EXAMPLES = 200


def dev_examples(params: dict, upstream: dict) -> int:
    """The size of each dev slice: the dev_examples param, shrunk on a small eval split to
    a quarter of it, so that at least half is left for the gate to score (a day of a few
    hundred texts would otherwise leave the gate nothing: 'no eval rows')."""
    dev = params["dev_examples"]
    n_eval = (upstream.get("preprocess") or {}).get("rows_eval")
    if dev and n_eval is not None and 4 * dev > n_eval:
        return n_eval // 4
    return dev


def _dev_slices(params: dict, upstream: dict) -> dict:
    """Early-stopping and calibration slices of the eval split (see the dev_examples param)."""
    dev = dev_examples(params, upstream)
    if not dev:
        return {"max_eval_examples": params.get("max_eval_examples")}
    return {"max_eval_examples": dev, "calibration_examples": dev}


def train(ctx: RunContext, params: dict, upstream: dict) -> Built:
    warm = upstream["published"] if params["warm_start"] else None
    return Built({"preprocess_dir": upstream["preprocess"]["output_dir"],
                  "out_dir": f"{ctx.run_dir}/model", "warm_start_model_dir": warm,
                  "epochs": params["epochs"], "batch_size": params["batch_size"],
                  "max_seq_length": params.get("max_seq_length"),
                  "max_train_examples": params.get("max_train_examples"),
                  "strategy": params["strategy"], "precision": params["precision"],
                  **_dev_slices(params, upstream)},
                 reads_published=warm is not None)


def evaluate(ctx: RunContext, params: dict, upstream: dict) -> dict:
    return {"preprocess_dir": upstream["preprocess"]["output_dir"],
            "candidate_model_dir": upstream["train"]["model_dir"],
            "baseline_model_dir": upstream["published"],
            "out_dir": f"{ctx.run_dir}/evaluation", "min_auc": params.get("min_auc"),
            "beat_classical_baseline": params.get("beat_classical_baseline"),
            "force_reason": params.get("force_bless_reason"),
            "max_eval_examples": params.get("max_eval_examples"),
            "max_train_examples": params.get("max_train_examples"),
            "classical_max_train_examples": params.get("classical_max_train_examples"),
            "min_eval_rows": params.get("min_eval_rows"),
            "min_eval_positives": params.get("min_eval_positives"),
            "eval_offset": 2 * dev_examples(params, upstream)}
