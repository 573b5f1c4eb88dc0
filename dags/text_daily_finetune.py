"""Daily fine-tuning of the text model (sentiment + topic): validate -> preprocess ->
finetune -> evaluate -> push.

Same shape as `ctr_daily_retrain`: every task builds a spec and runs a step from
`components/text/` in a child process, so TensorFlow, Keras, Beam and great-expectations
never load into the scheduler or the DAG processor. The candidate is published only if the
shared gate blesses it against the published model on the same eval texts and it serves
raw strings in a fresh process. Load data with `retrain load-text` (raw/text/dt=D).
"""
from __future__ import annotations

from pathlib import Path

from airflow.sdk import Asset, Param, dag, task

from retrain.dag_defaults import (DAILY, home as _home, publish_or_skip, publish_params,
                                  span_params)

MODEL_NAME = "text"
FAMILY = "text"
TEXT_MODEL = Asset(name="text_model", uri="file:///retrain/registry/text")


def _dev_slices(params) -> dict:
    """Early-stopping and calibration slices of the eval split (see the dev_examples param)."""
    dev = params["dev_examples"]
    if not dev:
        return {"max_eval_examples": params.get("max_eval_examples")}
    return {"max_eval_examples": dev, "calibration_examples": dev}


@dag(
    dag_id="text_daily_finetune",
    **DAILY,
    tags=["retrain", "text"],
    doc_md=__doc__,
    params={
        **span_params("text", "Days of labelled text read, ending at the span.",
                      "Share of distinct texts held out (stable hash)."),
        **publish_params(),
        "epochs": Param(3, type="integer", minimum=1, maximum=50,
                        description="Maximum epochs (early stopping on the eval split)."),
        "max_seq_length": Param(128, type="integer", minimum=8, maximum=512,
                                description="Tokens per text, incl. [CLS]/[SEP]."),
        "batch_size": Param(16, type="integer", minimum=1, maximum=1024),
        "max_train_examples": Param(None, type=["null", "integer"], minimum=1,
                                    description="Train on at most this many texts."),
        "dev_examples": Param(
            200, type="integer", minimum=0,
            description="The first N eval texts decide early stopping and the next N fit the "
                        "decision offsets; the gate scores only the texts after them, so its "
                        "figures come from texts model selection never saw. 0: early-stop "
                        "and score on the same texts (tiny spans only)."),
        "max_eval_examples": Param(None, type=["null", "integer"], minimum=1,
                                   description="Evaluate on at most this many texts."),
        "strategy": Param("default", enum=["default", "mirrored", "multi_worker_mirrored"],
                          description="tf.distribute strategy of the fine-tuning step."),
        "warm_start": Param(True, type="boolean",
                            description="Start from the published text model when its "
                                        "labels and sequence length match."),
        "min_auc": Param(0.6, type="number", minimum=0, maximum=1,
                         description="Mean per-task macro AUC a candidate must reach."),
        "min_rows": Param(50, type="integer", minimum=1,
                          description="Validation: fewest rows a span may have."),
    },
)
def text_daily_finetune():
    @task
    def resolve_span(params=None, logical_date=None, dag_run=None, run_id=None) -> dict:
        """Pin the span and the run's artifact folder once; every later task reads them."""
        from components.common import paths
        from components.common.spans import derive_span, is_shadow

        span = derive_span(params.get("span"), logical_date, getattr(dag_run, "run_after", None))
        home = _home()
        return {"span": span.isoformat(), "home": str(home), "run_id": run_id,
                "raw_root": str(home / "raw" / FAMILY),
                "span_dir": str(paths.raw_span_dir(home, FAMILY, span)),
                "run_dir": str(paths.run_dir(home, FAMILY, span, run_id)),
                "shadow": is_shadow(params.get("shadow"), getattr(dag_run, "run_type", None))}

    @task
    def validate(ctx: dict, params=None) -> dict:
        from components.common.launch import run_step
        return run_step("components.text.validate", {
            "span_dir": ctx["span_dir"], "out_dir": f"{ctx['run_dir']}/validation",
            "min_rows": params["min_rows"]})

    @task
    def preprocess(ctx: dict, validation: dict, params=None) -> dict:
        from components.common.launch import run_step
        return run_step("components.text.preprocess", {
            "raw_root": ctx["raw_root"], "span": ctx["span"],
            "output_dir": f"{ctx['run_dir']}/preprocess",
            "window_days": params["window_days"], "eval_percent": params["eval_percent"]})

    @task
    def finetune(ctx: dict, preprocessed: dict, params=None) -> dict:
        from components.common.launch import run_step
        from components.registry import Registry

        warm = None
        if params["warm_start"]:
            registry = Registry(Path(ctx["home"]) / "registry")
            current = registry.current(MODEL_NAME)
            warm = current and str(registry.model_path(MODEL_NAME, current["version"]))
        return run_step("components.text.train", {
            "preprocess_dir": preprocessed["output_dir"], "out_dir": f"{ctx['run_dir']}/model",
            "warm_start_model_dir": warm, "epochs": params["epochs"],
            "batch_size": params["batch_size"], "max_seq_length": params["max_seq_length"],
            "max_train_examples": params.get("max_train_examples"),
            **_dev_slices(params), "strategy": params["strategy"]})

    @task
    def evaluate(ctx: dict, preprocessed: dict, trained: dict, params=None) -> dict:
        from components.common.launch import run_step
        from components.registry import Registry

        registry = Registry(Path(ctx["home"]) / "registry")
        current = registry.current(MODEL_NAME)
        baseline = str(registry.model_path(MODEL_NAME, current["version"])) if current else None
        result = run_step("components.text.evaluate", {
            "preprocess_dir": preprocessed["output_dir"],
            "candidate_model_dir": trained["model_dir"], "baseline_model_dir": baseline,
            "out_dir": f"{ctx['run_dir']}/evaluation", "min_auc": params["min_auc"],
            "force_reason": params.get("force_bless_reason"),
            "max_eval_examples": params.get("max_eval_examples"),
            "eval_offset": 2 * params["dev_examples"]})
        result["baseline_version"] = current and current["version"]
        return result

    @task(outlets=[TEXT_MODEL])
    def push(ctx: dict, validation: dict, preprocessed: dict, trained: dict,
             evaluation: dict, outlet_events=None, dag_run=None) -> dict:
        """Publish a blessed candidate; a rejected one is recorded and left unpublished."""
        return publish_or_skip(
            MODEL_NAME, TEXT_MODEL, ctx, dag_run=dag_run, outlet_events=outlet_events,
            evaluation=evaluation, validation=validation, preprocessed=preprocessed,
            trained=trained, serving_check_module="components.text.serving_check",
            extra_metadata={"labels": trained["labels"],
                            "max_seq_length": trained["max_seq_length"],
                            "warm_start_from": trained.get("warm_start_from"),
                            "base_checkpoint": trained.get("checkpoint")})

    ctx = resolve_span()
    checked = validate(ctx)
    pre = preprocess(ctx, checked)
    model = finetune(ctx, pre)
    evaluation = evaluate(ctx, pre, model)
    push(ctx, checked, pre, model, evaluation)


text_daily_finetune()
