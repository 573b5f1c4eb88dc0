"""The publishing end of a family's DAG: wait for the run's turn, ask a person when the run
says so, publish.

Why together: these three hold one protocol (retrain.orchestration.turns). A publishing run
takes its turn after training, so overlapping runs evaluate and publish in the order they
finished training and never compare against a model about to be replaced; push gives the
turn back whatever happens, and a candidate a person approved carries the approver into
the registry entry.

airflow.sdk + stdlib + the descriptor at import; turns and the publish path inside the
tasks.
"""
from __future__ import annotations

import datetime as dt

from airflow.sdk import task

from retrain.common.run_context import RunContext
from retrain.orchestration.approval import ModelApproval
from retrain.orchestration.dag_defaults import SENSOR_RETRIES, publish_or_skip
from retrain.orchestration.families import Family
from retrain.orchestration.run_assets import RunAssets


# A turn waits for other runs' evaluate and push (minutes), so it looks every 30 s. Not
# shorter: Airflow fails a reschedule-mode sensor when the scheduler handles the end of one
# poke after the next poke was queued (apache/airflow#71172, open in 3.3.2), and at 5 s
# pokes a scheduler slowed by a fine-tune on the same 2 cores did so (the first-hour test,
# 2026-12-07: a waiting run failed with no error of its own).
TURN_POKE_SECONDS = 30.0


def wait_for_turn_task(family: Family, limit: dict[str, dt.timedelta]):
    """The `wait_for_turn` sensor (call it with the run and train's result); it looks
    every TURN_POKE_SECONDS."""
    @task.sensor(mode="reschedule", poke_interval=TURN_POKE_SECONDS,
                 timeout=dt.timedelta(days=1), execution_timeout=limit["sensor_poke"],
                 **SENSOR_RETRIES)
    def wait_for_turn(ctx: dict, trained: dict, ti=None) -> bool:
        """A publishing run evaluates and publishes after those that finished training
        before it (retrain.orchestration.turns), so overlapping runs never compare with a
        model that is about to be replaced; a shadow run goes on at once."""
        ctx = RunContext.from_xcom(ctx)
        from retrain.orchestration.pool_wait import mark_ended

        if ctx.shadow:
            mark_ended(ctx.run_dir, "wait_for_turn")   # evaluate was ready from now on
            return True
        import logging

        from retrain.orchestration import turns

        def state_of(run_id: str) -> str:
            try:
                state = ti.get_dagrun_state(dag_id=family.dag_id, run_id=run_id)
                return str(getattr(state, "value", state))      # a DagRunState
            except Exception as e:  # noqa: BLE001 - the Task SDK's error types vary
                if turns.run_not_found(e):   # a run Airflow no longer knows has ended
                    return "unknown"
                raise

        waiting, ended = turns.ahead(ctx.home, family.dag_id, ctx.run_id, state_of)
        log = logging.getLogger("retrain.dag")
        for run_id, state in ended.items():
            log.info("turn: %s is %s, its turn is over", run_id, state)
        if waiting:
            log.info("turn: waiting for %s to evaluate and publish first",
                     ", ".join(waiting))
            return False
        mark_ended(ctx.run_dir, "wait_for_turn")
        return True

    return wait_for_turn


def approve_task(family: Family, limit: dict[str, dt.timedelta]) -> ModelApproval:
    """The `approve` task: a person answers in Required Actions when the run's `approval`
    param asks for it."""
    approve = ModelApproval(task_id="approve", family_name=family.name)
    # Set after construction: the HITL operator turns an execution_timeout given to it
    # into its response timeout. This one bounds asking and recording the answer; the
    # wait for a person is approval_timeout_hours.
    approve.execution_timeout = limit["approve"]
    return approve


def push_task(family: Family, assets: RunAssets, limit: dict[str, dt.timedelta]):
    """The push task (call it with every stage's result and approve's output): an event on
    the model Asset when it publishes."""
    @task(outlets=[assets.model], execution_timeout=limit["push"])
    def push(ctx: dict, validation: dict, preprocessed: dict, trained: dict,
             evaluation: dict, approval: dict, outlet_events=None, dag_run=None) -> dict:
        """Publish a blessed candidate; a rejected one is recorded and left unpublished.
        An approved one carries its approver into the registry entry."""
        from retrain.orchestration import turns

        ctx = RunContext.from_xcom(ctx)
        extra = {k: trained.get(v) for k, v in family.registry_extra.items()}
        if (approval or {}).get("asked"):
            extra["approval"] = approval
        try:
            return publish_or_skip(
                family.name, assets.model, ctx, dag_run=dag_run,
                outlet_events=outlet_events, evaluation=evaluation, validation=validation,
                preprocessed=preprocessed, trained=trained,
                serving_check_module=family.serving_check,
                headline=tuple(m.name for m in family.headline), extra_metadata=extra)
        finally:
            turns.give_back(ctx.home, family.dag_id, ctx.run_id)

    return push
