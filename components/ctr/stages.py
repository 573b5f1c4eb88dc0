"""The CTR family's spec builders: DAG params + run context -> each step's spec.

Called by the DAG factory inside the task (stdlib only, no step imports), so the factory
never knows a CTR knob. `upstream` holds the earlier stages' results ("validate",
"preprocess", "train") and "published", the serving model's folder or None.
"""
from __future__ import annotations

from retrain.common.run_context import Built, RunContext
from retrain.common.window import left_out_spans


def validate(ctx: RunContext, params: dict, upstream: dict) -> dict:
    return ctx.with_beam_args({
        "span_dir": ctx.span_dir, "out_dir": f"{ctx.run_dir}/validation",
        "history_root": ctx.history_root,
        "quarantine_dir": ctx.quarantine_dir, "run_id": ctx.run_id,
        "feature_config": ctx.config,
        "override_reason": params.get("override_validation_reason"),
        "override_rules": params.get("override_validation_rules")})


def preprocess(ctx: RunContext, params: dict, upstream: dict) -> Built:
    left_out = left_out_spans(upstream)
    return Built(ctx.with_beam_args({
        "raw_root": ctx.raw_root, "span": ctx.span, "output_dir": f"{ctx.run_dir}/preprocess",
        "window_days": params["window_days"], "eval_percent": params["eval_percent"],
        "exclude_spans": left_out,
        "analysis_cache_dir": f"{ctx.home}/cache/{ctx.family}/tft_analysis",
        "feature_config": ctx.config}), left_out=tuple(left_out))


def train(ctx: RunContext, params: dict, upstream: dict) -> dict:
    return {"preprocess_dir": upstream["preprocess"]["output_dir"],
            "out_dir": f"{ctx.run_dir}/model",
            "train": {k: params[k] for k in ("train_examples", "epochs") if params.get(k)},
            "num_ps": params["ps_count"], "num_workers": params["worker_count"]}


def evaluate(ctx: RunContext, params: dict, upstream: dict) -> dict:
    used = (upstream["preprocess"].get("window_screen") or {}).get("used", [ctx.span])
    return ctx.with_beam_args({
        "span_dir": ctx.span_dir, "candidate_model_dir": upstream["train"]["model_dir"],
        "baseline_model_dir": upstream["published"],
        "out_dir": f"{ctx.run_dir}/evaluation",
        "window_span_dirs": [ctx.partition(d) for d in used],
        "eval_percent": params["eval_percent"], "min_auc": params["min_auc"],
        "min_eval_rows": params.get("min_eval_rows"),
        "min_eval_positives": params.get("min_eval_positives"),
        "force_reason": params.get("force_bless_reason"),
        "registry_root": f"{ctx.home}/registry", "model_name": ctx.family})
