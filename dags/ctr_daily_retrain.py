"""Daily retraining of the CTR model: validate -> preprocess -> train -> evaluate -> push.

Thin on purpose: every task builds a typed spec and runs a step from `components/`
in a child process (`python -m components...`), so TensorFlow, Beam and
great-expectations never load into the scheduler or the DAG processor. XCom carries
only paths and small JSON; artifacts live under RETRAIN_HOME keyed by span and run id.
"""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from airflow.sdk import Asset, Param, dag, task

from retrain.dag_defaults import (DAILY, home as _home, publish_or_skip, publish_params,
                                  span_params)

MODEL_NAME = "ctr"
CTR_MODEL = Asset(name="ctr_model", uri="file:///retrain/registry/ctr")
# Pools from scripts/pools.json; backfill runs' heavy tasks are moved to a one-slot pool
# of their own by retrain.airflow_policy, so they never starve the daily run.
HEAVY_POOL = "retrain_heavy"
# Parameter-server trainings (a GPU pool in production) are capped by their own pool.
TRAINING_POOL = "gpu_training"
# Seconds between two looks for the span's _SUCCESS marker (reschedule mode: no worker
# slot is held in between). An environment setting so tests can poke every second.
SPAN_POKE_SECONDS = float(os.environ.get("RETRAIN_SPAN_POKE_SECONDS", "300"))


@dag(
    dag_id="ctr_daily_retrain",
    **DAILY,
    tags=["retrain", "ctr"],
    doc_md=__doc__,
    params={
        **span_params("data", "Days of logs analysed and trained on, ending at the span.",
                      "Share of the span held out for evaluation."),
        **publish_params(),
        "epochs": Param(None, type=["null", "integer"], minimum=1, maximum=50,
                        description="Training epochs. Empty: the trainer's tuned default."),
        "min_auc": Param(0.6, type="number", minimum=0, maximum=1,
                         description="Absolute AUC a candidate must reach to be published."),
        "override_validation_reason": Param(
            None, type=["null", "string"], minLength=1,
            description="Let a span that fails data validation through anyway; the reason "
                        "and the failed rules are recorded in the run's validation.json "
                        "and run_summary.json. Empty: failed validation stops the run."),
        "ps_count": Param(1, type="integer", minimum=1, maximum=64,
                          description="Parameter servers of the training cluster "
                                      "(the ID embedding tables are split over them)."),
        "worker_count": Param(1, type="integer", minimum=1, maximum=256,
                              description="Training workers (GPU workers in production)."),
        "span_timeout_minutes": Param(
            720, type="number", minimum=0,
            description="How long to wait for the span's _SUCCESS marker before failing."),
        # Your own logs: where they are and what they hold. Deployment defaults come from
        # the environment (RETRAIN_RAW_ROOT, RETRAIN_FEATURE_CONFIG); a run may override.
        "raw_root": Param(os.environ.get("RETRAIN_RAW_ROOT", ""), type="string",
                          description="Folder (or gs://, s3://) holding the dt=YYYY-MM-DD "
                                      "partitions. Empty: <RETRAIN_HOME>/raw/ctr."),
        "feature_config": Param(
            os.environ.get("RETRAIN_FEATURE_CONFIG", ""), type="string",
            description="YAML/JSON feature config of the logs (columns, types, transforms, "
                        "label, validation rules). Empty: the generated demo logs' config."),
    },
)
def ctr_daily_retrain():
    @task
    def resolve_span(params=None, logical_date=None, dag_run=None, run_id=None) -> dict:
        """Pin the span and the run's artifact folder once; every later task reads them."""
        from components.common import paths
        from components.common.spans import derive_span, is_shadow

        span = derive_span(params.get("span"), logical_date, getattr(dag_run, "run_after", None))
        home = _home()
        run_dir = paths.run_dir(home, MODEL_NAME, span, run_id)
        raw_root = params.get("raw_root") or str(home / "raw" / MODEL_NAME)
        config = params.get("feature_config") or ""
        if config and not Path(config).is_file():
            raise FileNotFoundError(f"feature_config {config!r} does not exist")
        return {"span": span.isoformat(), "home": str(home), "run_id": run_id,
                "raw_root": raw_root, "span_dir": f"{raw_root}/dt={span.isoformat()}",
                "feature_config": config and str(Path(config).resolve()),
                "run_dir": str(run_dir),
                "shadow": is_shadow(params.get("shadow"), getattr(dag_run, "run_type", None))}

    @task.sensor(mode="reschedule", poke_interval=SPAN_POKE_SECONDS,
                 timeout=dt.timedelta(days=7))
    def wait_for_span(ctx: dict, params=None, ti=None, **context) -> bool:
        """Wait (holding no worker slot) for the producer's _SUCCESS marker of the span.
        The timeout is the `span_timeout_minutes` param (AirflowSensorTimeout: no retry)."""
        from airflow.sdk import timezone
        from airflow.sdk.exceptions import AirflowSensorTimeout

        marker = Path(ctx["span_dir"]) / "_SUCCESS"
        if marker.exists():
            return True
        first = ti.get_first_reschedule_date(context) or timezone.utcnow()
        waited = (timezone.utcnow() - first).total_seconds()
        limit = float(params["span_timeout_minutes"]) * 60
        if waited >= limit:
            raise AirflowSensorTimeout(
                f"span {ctx['span']} not delivered: no {marker} after waiting "
                f"{waited / 60:.1f} min (span_timeout_minutes={params['span_timeout_minutes']}). "
                "Check the upstream export of that day, then clear this task to wait again.")
        return False

    @task
    def validate(ctx: dict, params=None) -> dict:
        """Statistics + GX suites; fails (and quarantines the span) on an error rule."""
        import logging

        from airflow.sdk.exceptions import AirflowFailException

        from components.common.launch import StepFailed
        from components.common.lineage import config_refs, raw_span_ref, run_tracked
        try:
            # Never reused: the verdict also depends on the history of earlier spans.
            result = run_tracked("validate", "components.validate", {
                "span_dir": ctx["span_dir"], "out_dir": f"{ctx['run_dir']}/validation",
                "history_root": f"{ctx['home']}/runs/{MODEL_NAME}",
                "quarantine_dir": f"{ctx['home']}/quarantine/{MODEL_NAME}",
                "run_id": ctx["run_id"], "feature_config": ctx["feature_config"],
                "override_reason": params.get("override_validation_reason")},
                home=ctx["home"], family=MODEL_NAME, run_dir=ctx["run_dir"],
                inputs=[raw_span_ref(ctx["span_dir"]), *config_refs(ctx["feature_config"])],
                uri_key="uri",
                artifact_type="validation_report", reuse=False,
                figures=("rows", "n_failed", "gate", "data_docs"))
        except StepFailed as e:
            if "ValidationFailed:" in str(e):  # bad data is not transient: no retry
                raise AirflowFailException(str(e)) from None
            raise
        log = logging.getLogger("retrain.dag")
        log.info("Data Docs of this validation: %s", result.get("data_docs"))
        if result.get("gate") == "overridden":
            log.warning("validation failed %s error rule(s) and was overridden: %s",
                        result["n_failed"], result["override_reason"])
        return result

    @task(pool=HEAVY_POOL)
    def preprocess(ctx: dict, validation: dict, params=None) -> dict:
        """Beam + tf.Transform over the window; reused when inputs, code and params match."""
        from components.common.lineage import config_refs, raw_span_refs, run_tracked
        return run_tracked(
            "preprocess", "components.ctr.preprocess", {
                "raw_root": ctx["raw_root"], "span": ctx["span"],
                "output_dir": f"{ctx['run_dir']}/preprocess",
                "window_days": params["window_days"], "eval_percent": params["eval_percent"],
                "analysis_cache_dir": f"{ctx['home']}/cache/{MODEL_NAME}/tft_analysis",
                "feature_config": ctx["feature_config"]},
            home=ctx["home"], family=MODEL_NAME, run_dir=ctx["run_dir"],
            inputs=[*raw_span_refs(ctx["raw_root"], ctx["span"], params["window_days"]),
                    *config_refs(ctx["feature_config"])],
            uri_key="output_dir", artifact_type="transformed_examples",
            figures=("rows_in", "rows_train", "rows_eval", "window", "seconds"))

    @task(pool=TRAINING_POOL)
    def train(ctx: dict, preprocessed: dict, params=None) -> dict:
        """Parameter-server training on a local cluster (ps_count parameter servers,
        worker_count workers, a coordinator); a retry resumes from its checkpoints.
        Reused when inputs, code and params match."""
        from components.common.lineage import run_tracked
        train_spec = {"epochs": params["epochs"]} if params.get("epochs") else {}
        return run_tracked(
            "train", "components.ctr.cluster",
            {"preprocess_dir": preprocessed["output_dir"], "out_dir": f"{ctx['run_dir']}/model",
             "train": train_spec, "num_ps": params["ps_count"],
             "num_workers": params["worker_count"]},
            home=ctx["home"], family=MODEL_NAME, run_dir=ctx["run_dir"],
            inputs=[preprocessed["artifact"]], uri_key="model_dir", artifact_type="model",
            figures=("val_auc", "val_log_loss", "train_seconds"))

    @task(pool=HEAVY_POOL)
    def evaluate(ctx: dict, trained: dict, params=None) -> dict:
        from components.common.lineage import raw_span_ref, run_tracked
        from components.registry import Registry

        registry = Registry(Path(ctx["home"]) / "registry")
        current = registry.current(MODEL_NAME)
        baseline = str(registry.model_path(MODEL_NAME, current["version"])) if current else None
        inputs = [raw_span_ref(ctx["span_dir"])]
        if trained.get("artifact"):
            inputs.append(trained["artifact"])
        if current:
            inputs.append({"name": f"{MODEL_NAME}-v{current['version']}", "type": "published_model",
                           "uri": baseline, "fingerprint": current.get("fingerprint") or baseline})
        # Always recomputed: the verdict depends on what is published right now.
        result = run_tracked(
            "evaluate", "components.ctr.evaluate", {
                "span_dir": ctx["span_dir"], "candidate_model_dir": trained["model_dir"],
                "baseline_model_dir": baseline, "out_dir": f"{ctx['run_dir']}/evaluation",
                "eval_percent": params["eval_percent"], "min_auc": params["min_auc"],
                "force_reason": params.get("force_bless_reason"),
                "registry_root": str(registry.root), "model_name": MODEL_NAME},
            home=ctx["home"], family=MODEL_NAME, run_dir=ctx["run_dir"], inputs=inputs,
            uri_key="eval_uri", artifact_type="evaluation", reuse=False,
            figures=("blessed", "candidate", "baseline", "bayes_optimal", "rows", "report_uri"))
        result["baseline_version"] = current and current["version"]
        return result

    @task(outlets=[CTR_MODEL])
    def push(ctx: dict, validation: dict, preprocessed: dict, trained: dict,
             evaluation: dict, outlet_events=None, dag_run=None) -> dict:
        """Publish a blessed candidate; a rejected one is recorded and left unpublished."""
        return publish_or_skip(MODEL_NAME, CTR_MODEL, ctx, dag_run=dag_run,
                               outlet_events=outlet_events, evaluation=evaluation,
                               validation=validation, preprocessed=preprocessed,
                               trained=trained)

    ctx = resolve_span()
    checked = validate(ctx)
    wait_for_span(ctx) >> checked
    pre = preprocess(ctx, checked)
    model = train(ctx, pre)
    evaluation = evaluate(ctx, model)
    push(ctx, checked, pre, model, evaluation)


ctr_daily_retrain()
