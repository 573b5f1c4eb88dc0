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

MODEL_NAME = "ctr"
CTR_MODEL = Asset(name="ctr_model", uri="file:///retrain/registry/ctr")
DEFAULT_HOME = Path(__file__).resolve().parents[1] / "var"


def _home() -> Path:
    return Path(os.environ.get("RETRAIN_HOME") or DEFAULT_HOME).resolve()


@dag(
    dag_id="ctr_daily_retrain",
    schedule="@daily",
    start_date=dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": dt.timedelta(minutes=1)},
    tags=["retrain", "ctr"],
    doc_md=__doc__,
    params={
        "span": Param(None, type=["null", "string"], format="date",
                      description="Day of data to train on (YYYY-MM-DD). "
                                  "Empty: the day before the run's logical date."),
        "window_days": Param(3, type="integer", minimum=1, maximum=60,
                             description="Days of logs analysed and trained on, ending at the span."),
        "eval_percent": Param(20, type="integer", minimum=1, maximum=50,
                              description="Share of the span held out for evaluation."),
        "epochs": Param(None, type=["null", "integer"], minimum=1, maximum=50,
                        description="Training epochs. Empty: the trainer's tuned default."),
        "min_auc": Param(0.6, type="number", minimum=0, maximum=1,
                         description="Absolute AUC a candidate must reach to be published."),
        "shadow": Param(None, type=["null", "boolean"],
                        description="Train and evaluate but never publish. Empty: shadow for "
                                    "backfill runs, publish for scheduled and manual runs."),
        "force_bless_reason": Param(None, type=["null", "string"],
                                    description="Publish even if the gate rejects; "
                                                "the reason is recorded in the registry."),
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
        return {"span": span.isoformat(), "home": str(home), "run_id": run_id,
                "raw_root": str(home / "raw" / MODEL_NAME),
                "span_dir": str(paths.raw_span_dir(home, MODEL_NAME, span)),
                "run_dir": str(run_dir),
                "shadow": is_shadow(params.get("shadow"), getattr(dag_run, "run_type", None))}

    @task
    def validate(ctx: dict) -> dict:
        from components.common.launch import run_step
        return run_step("components.validate", {
            "span_dir": ctx["span_dir"], "out_dir": f"{ctx['run_dir']}/validation"})

    @task
    def preprocess(ctx: dict, validation: dict, params=None) -> dict:
        from components.common.launch import run_step
        return run_step("components.ctr.preprocess", {
            "raw_root": ctx["raw_root"], "span": ctx["span"],
            "output_dir": f"{ctx['run_dir']}/preprocess",
            "window_days": params["window_days"], "eval_percent": params["eval_percent"]})

    @task
    def train(ctx: dict, preprocessed: dict, params=None) -> dict:
        from components.common.launch import run_step
        spec = {"preprocess_dir": preprocessed["output_dir"], "out_dir": f"{ctx['run_dir']}/model"}
        if params.get("epochs"):
            spec["epochs"] = params["epochs"]
        return run_step("components.ctr.train", spec)

    @task
    def evaluate(ctx: dict, trained: dict, params=None) -> dict:
        from components.common.launch import run_step
        from components.registry import Registry

        registry = Registry(Path(ctx["home"]) / "registry")
        current = registry.current(MODEL_NAME)
        baseline = str(registry.model_path(MODEL_NAME, current["version"])) if current else None
        result = run_step("components.ctr.evaluate", {
            "span_dir": ctx["span_dir"], "candidate_model_dir": trained["model_dir"],
            "baseline_model_dir": baseline, "out_dir": f"{ctx['run_dir']}/evaluation",
            "eval_percent": params["eval_percent"], "min_auc": params["min_auc"],
            "force_reason": params.get("force_bless_reason"),
            "registry_root": str(registry.root), "model_name": MODEL_NAME})
        result["baseline_version"] = current and current["version"]
        return result

    @task(outlets=[CTR_MODEL])
    def push(ctx: dict, validation: dict, preprocessed: dict, trained: dict,
             evaluation: dict, outlet_events=None, dag_run=None) -> dict:
        """Publish a blessed candidate; a rejected one is recorded and left unpublished."""
        from airflow.sdk.exceptions import AirflowSkipException

        from components.push import publish_if_blessed

        summary = publish_if_blessed(
            model_name=MODEL_NAME, registry_root=f"{ctx['home']}/registry",
            run_dir=ctx["run_dir"], dag_id=dag_run.dag_id, run_id=ctx["run_id"],
            span=ctx["span"], span_dir=ctx["span_dir"], validation=validation,
            preprocessed=preprocessed, trained=trained, evaluation=evaluation,
            shadow=ctx["shadow"])
        published = summary["published"]
        if ctx["shadow"]:
            raise AirflowSkipException("shadow run: evaluated, not published "
                                       f"(blessed={evaluation['blessed']})")
        if not published:
            # Skipped, not failed: the run did its job. A skipped task emits no asset
            # event, so nothing downstream sees a model that was never published.
            raise AirflowSkipException("candidate not blessed: " + "; ".join(evaluation["reasons"]))
        outlet_events[CTR_MODEL].extra = {
            "model": MODEL_NAME, "version": published["version"], "span": ctx["span"],
            "auc": published["auc"], "log_loss": published["log_loss"],
            "run_id": ctx["run_id"], "code_version": summary["code_version"]}
        return {"published": published, "blessed": True}

    ctx = resolve_span()
    checked = validate(ctx)
    pre = preprocess(ctx, checked)
    model = train(ctx, pre)
    evaluation = evaluate(ctx, model)
    push(ctx, checked, pre, model, evaluation)


ctr_daily_retrain()
