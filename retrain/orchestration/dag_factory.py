"""One DAG factory for every model family: resolve the span -> wait for its `_SUCCESS`
marker -> validate -> preprocess -> train -> wait for the publishing turn -> evaluate ->
approve (a person, when the run asks) -> push.

Every stage runs through the same tracked launcher (`retrain.orchestration.lineage.run_tracked`:
a child process, a lineage record, reuse of a finished artifact with the same
fingerprint), so every family gets the same sensor, pools, quarantine and override, typed
bad-data failures (not retried), shadow backfills, publishing and alerts. What differs between
families is in their descriptor (`retrain.orchestration.families`): the step modules, the spec
builders, the extra params, the pools and the headline metrics.

This module only wires named parts, each testable alone:
`family_params` (the trigger form), `run_assets` (the Assets of a run's lineage),
`span_tasks` (resolve the span, wait for it), `stage_tasks` (validate, preprocess, train,
evaluate; with `window_days`, `handoff_checks` and `tracked_stage` behind them) and
`publish_tasks` (the publishing turn, approval, push).

Thin on purpose: airflow.sdk + stdlib + the descriptor at import; a family's steps and
builders are imported inside the tasks, so DAG parsing stays cheap.
"""
from __future__ import annotations

from airflow.sdk import dag

from retrain.orchestration.dag_defaults import daily as _daily
from retrain.orchestration.families import Family
from retrain.orchestration.family_params import family_params
from retrain.orchestration.publish_tasks import approve_task, push_task, wait_for_turn_task
from retrain.orchestration.run_assets import run_assets
from retrain.orchestration.span_tasks import (resolve_span_task, span_poke_seconds,
                                              wait_for_span_task)
from retrain.orchestration.stage_tasks import (evaluate_task, preprocess_task, train_task,
                                               validate_task)
from retrain.orchestration.timeouts import execution_timeouts
from retrain.orchestration.tracked_stage import raw_ref_or_fail
from retrain.orchestration.window_days import left_out_problem

# Importers of this module's former contents (tests, bench) keep their names.
__all__ = ["make_dag", "family_params", "left_out_problem", "raw_ref_or_fail",
           "span_poke_seconds"]


def make_dag(family: Family):
    """The family's `@dag` function; calling it builds the DAG (as the DAG file does)."""
    assets = run_assets(family)
    # Every task may run only so long (retrain.orchestration.timeouts): a hung step is
    # stopped, its process group ended, and the task retried once, then failed.
    limit = execution_timeouts()

    @dag(dag_id=family.dag_id, **_daily(), tags=list(family.tags), doc_md=family.doc,
         params=family_params(family))
    def daily():
        # The tasks are built here, when the DAG is built: the sensors read their poke
        # interval from the environment of each parse.
        ctx = resolve_span_task(family, limit)()
        checked = validate_task(family, assets, limit)(ctx)
        wait_for_span_task(limit)(ctx) >> checked
        pre = preprocess_task(family, assets, limit)(ctx, checked)
        model = train_task(family, assets, limit)(ctx, pre)
        evaluation = evaluate_task(family, limit)(ctx, pre, model)
        wait_for_turn_task(family, limit)(ctx, model) >> evaluation
        # A person answers in Required Actions when the run's `approval` param asks for it.
        approve = approve_task(family, limit)
        evaluation >> approve
        push_task(family, assets, limit)(ctx, checked, pre, model, evaluation, approve.output)

    daily.__name__ = family.dag_id
    return daily
