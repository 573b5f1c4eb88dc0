"""The four stage tasks of a family's DAG: validate, preprocess, train, evaluate.

Why one builder per task: each is a `@task` with its own pool, timeout, assets and
hand-off checks, and a test can build one alone (inside any DAG) and look at what Airflow
will run. The family's descriptor decides the task id (text's train is `finetune`), the
pool and the step; each task runs its step through `tracked_stage.run_stage`, so every
family gets the same lineage, reuse and typed failures.

Each task says at the top of its log how long it waited for a slot of its pool, when it
did, and records its end for the next one (retrain.orchestration.pool_wait).

airflow.sdk + stdlib + the descriptor at import; a family's builders and steps are
imported inside the tasks, so DAG parsing stays cheap.
"""
from __future__ import annotations

import datetime as dt

from airflow.sdk import task
from airflow.sdk.exceptions import AirflowFailException

from retrain.common.run_context import Built, RunContext
from retrain.orchestration.families import Family, resolve
from retrain.orchestration import pool_wait
from retrain.orchestration.handoff_checks import (check_examples_custody, validated_content,
                                                  verify_window)
from retrain.orchestration.run_assets import RunAssets
from retrain.orchestration.tracked_stage import published, raw_ref_or_fail, run_stage
from retrain.orchestration.window_days import judge_window, left_out_problem, screen_window


# The task each stage runs after (the DAG is one chain): its end is when the stage was ready.
AFTER = {"validate": "wait_for_span", "preprocess": "validate", "train": "preprocess",
         "evaluate": "wait_for_turn"}


def started(family: Family, stage: str, ctx: RunContext, ti, dag_run) -> str | None:
    """At the stage task's start: the pool-wait line in its log, when it waited."""
    after = AFTER[stage]
    return pool_wait.log_wait(ctx.run_dir, family.task_id(after) if after in family.stages
                              else after, family.stages[stage].pool, ti, dag_run)


def ended(family: Family, stage: str, ctx: RunContext) -> None:
    """The stage's end, from which the next task's wait is measured."""
    pool_wait.mark_ended(ctx.run_dir, family.task_id(stage))


def validate_task(family: Family, assets: RunAssets, limit: dict[str, dt.timedelta]):
    """The validate task (call it with resolve_span's output): an event on the raw Asset."""
    @task(task_id=family.task_id("validate"), pool=family.stages["validate"].pool,
          outlets=[assets.raw], execution_timeout=limit["validate"])
    def validate(ctx: dict, params=None, outlet_events=None, ti=None, dag_run=None) -> dict:
        """The family's validation suite; a failed gate quarantines the span and fails
        the task without retry (an override param lets it through, recorded)."""
        ctx = RunContext.from_xcom(ctx)
        started(family, "validate", ctx, ti, dag_run)
        import logging

        from retrain.orchestration.lineage import config_refs

        # Never reused: the verdict also depends on the history of earlier spans.
        config = config_refs(ctx.config, family.config_param)
        raw = raw_ref_or_fail(ctx.span_dir)
        result = run_stage(family, "validate", ctx, params, {}, [raw, *config],
                           **validated_content(ctx, ctx.span, ctx.span_dir, raw))
        outlet_events[assets.raw].extra = {
            "span": ctx.span, "uri": raw["uri"], "fingerprint": raw["fingerprint"],
            "gate": result.get("gate"), "rows": result.get("rows"), "run_id": ctx.run_id}
        if result.get("gate") == "overridden":
            logging.getLogger("retrain.dag").warning(
                "validation failed %s error rule(s) and was overridden: %s",
                result["n_failed"], result["override_reason"])
        ended(family, "validate", ctx)
        return result

    return validate


def preprocess_task(family: Family, assets: RunAssets, limit: dict[str, dt.timedelta]):
    """The preprocess task (call it with the run and validate's result): an event on the
    transformed-examples Asset."""
    @task(task_id=family.task_id("preprocess"), pool=family.stages["preprocess"].pool,
          outlets=[assets.examples], execution_timeout=limit["preprocess"])
    def preprocess(ctx: dict, validation: dict, params=None, outlet_events=None, ti=None,
                   dag_run=None) -> dict:
        """Beam over the window's days that passed validation (bad data never trains a
        model), if no more were left out than the window policy allows; reused when
        inputs, code and params match."""
        ctx = RunContext.from_xcom(ctx)
        started(family, "preprocess", ctx, ti, dag_run)
        from retrain.orchestration.lineage import config_refs

        screened = screen_window(family, ctx, params)
        built = Built.of(resolve(family.stages["preprocess"].build)(
            ctx, params, {"validate": validation, "window": screened}))
        problem = left_out_problem(family.name, built, screened)
        if problem:
            raise AirflowFailException(problem)
        spec = built.spec
        overridden = tuple(i["span"] for i in screened["included_by_override"])
        inputs = verify_window(ctx, screened["used"], "preprocess", overridden)
        # after the days used are checked: a day rewritten since its validation is
        # quarantined and named whatever the policy says of the others
        judged = judge_window(family, ctx, params, screened)
        result = run_stage(family, "preprocess", ctx, params, {}, [
            *inputs, *config_refs(ctx.config, family.config_param)], spec=spec,
            extra_figures={"window_used": screened["used"],
                           "window_left_out": screened["left_out"],
                           "window_included_by_override":
                               screened["included_by_override"]},
            # the bytes the job read are still the validated ones when it ends
            after=lambda: verify_window(ctx, screened["used"], "preprocess", overridden))
        outlet_events[assets.examples].extra = {
            "span": ctx.span, "window": screened["used"],
            "uri": result["artifact"]["uri"], "fingerprint": result["artifact"]["fingerprint"],
            "reused_from": result.get("reused_from"), "run_id": ctx.run_id}
        ended(family, "preprocess", ctx)
        return {**result, "window_screen": screened, "window_policy": judged}

    return preprocess


def train_task(family: Family, assets: RunAssets, limit: dict[str, dt.timedelta]):
    """The train task (text: `finetune`; call it with the run and preprocess's result):
    the transformed-examples Asset is its inlet."""
    @task(task_id=family.task_id("train"), pool=family.stages["train"].pool,
          inlets=[assets.examples], execution_timeout=limit["train"])
    def train(ctx: dict, preprocessed: dict, params=None, ti=None, dag_run=None) -> dict:
        """Train (or fine-tune) on the preprocessed window; a retry resumes from its
        checkpoints where the trainer keeps them. Reused when inputs, code and params
        match."""
        ctx = RunContext.from_xcom(ctx)
        started(family, "train", ctx, ti, dag_run)
        check_examples_custody(ctx, preprocessed)
        path, refs = published(family, ctx) if family.warm_start else (None, [])
        upstream = {"preprocess": preprocessed, "published": path}
        built = Built.of(resolve(family.stages["train"].build)(ctx, params, upstream))
        result = run_stage(family, "train", ctx, params, upstream,
                           [preprocessed["artifact"],
                            *(refs if built.reads_published else [])], spec=built.spec)
        ended(family, "train", ctx)
        return result

    return train


def evaluate_task(family: Family, limit: dict[str, dt.timedelta]):
    """The evaluate task (call it with the run, preprocess's and train's results)."""
    @task(task_id=family.task_id("evaluate"), pool=family.stages["evaluate"].pool,
          execution_timeout=limit["evaluate"])
    def evaluate(ctx: dict, preprocessed: dict, trained: dict, params=None, ti=None,
                 dag_run=None) -> dict:
        """Candidate against the published model on the same held-out rows; the gate's
        verdict is always recomputed (it depends on what is published now)."""
        ctx = RunContext.from_xcom(ctx)
        started(family, "evaluate", ctx, ti, dag_run)
        path, refs = published(family, ctx)
        if family.evaluate_reads == "raw_span":   # the window's held-out raw rows
            screened = preprocessed.get("window_screen") or {}
            data = verify_window(ctx, screened.get("used") or [ctx.span], "evaluate",
                                 tuple(i["span"] for i in
                                       screened.get("included_by_override", [])))
        else:
            data = [preprocessed["artifact"]]
        inputs = [*data, *([trained["artifact"]] if trained.get("artifact") else []), *refs]
        result = run_stage(family, "evaluate", ctx, params,
                           {"preprocess": preprocessed, "train": trained,
                            "published": path}, inputs)
        result["baseline_version"] = refs[0]["version"] if refs else None
        return result

    return evaluate
