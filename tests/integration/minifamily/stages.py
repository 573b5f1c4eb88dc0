"""Spec builders of the test family (stdlib only, as the factory expects)."""
from retrain.common.run_context import Built
from retrain.common.window import left_out_spans


def validate(ctx, params, upstream):
    return {"span_dir": ctx.span_dir, "out_dir": f"{ctx.run_dir}/validation"}


def preprocess(ctx, params, upstream):
    # the window's days the factory left out (bad data, not delivered): skipped, as a
    # user's own family must
    left_out = left_out_spans(upstream)
    return Built({"raw_root": ctx.raw_root, "span": ctx.span,
                  "window_days": params["window_days"], "exclude_spans": left_out,
                  "output_dir": f"{ctx.run_dir}/preprocess"}, left_out=tuple(left_out))


def train(ctx, params, upstream):
    return {"preprocess_dir": upstream["preprocess"]["output_dir"],
            "out_dir": f"{ctx.run_dir}/model"}


def evaluate(ctx, params, upstream):
    return {"preprocess_dir": upstream["preprocess"]["output_dir"],
            "candidate_model_dir": upstream["train"]["model_dir"],
            "baseline_model_dir": upstream["published"], "max_rmse": params["max_rmse"],
            "out_dir": f"{ctx.run_dir}/evaluation",
            "force_reason": params.get("force_bless_reason")}
