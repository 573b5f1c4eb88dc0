"""Spec builders of the test family (stdlib only, as the factory expects)."""


def validate(ctx, params, upstream):
    return {"span_dir": ctx.span_dir, "out_dir": f"{ctx.run_dir}/validation"}


def preprocess(ctx, params, upstream):
    return {"raw_root": ctx.raw_root, "span": ctx.span,
            "window_days": params["window_days"], "output_dir": f"{ctx.run_dir}/preprocess"}


def train(ctx, params, upstream):
    return {"preprocess_dir": upstream["preprocess"]["output_dir"],
            "out_dir": f"{ctx.run_dir}/model"}


def evaluate(ctx, params, upstream):
    return {"preprocess_dir": upstream["preprocess"]["output_dir"],
            "candidate_model_dir": upstream["train"]["model_dir"],
            "baseline_model_dir": upstream["published"], "max_rmse": params["max_rmse"],
            "out_dir": f"{ctx.run_dir}/evaluation",
            "force_reason": params.get("force_bless_reason")}
