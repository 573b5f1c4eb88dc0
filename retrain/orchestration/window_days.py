"""The window's older days, as preprocess sees them: validated if no run has yet, screened
(which may be trained on), judged by the window policy.

Why: a model is trained on a window of days ending at the span, and this run's validate
task validates only the span; bad data in an older day must not train a model either.
Each older day is validated as its own run would be (report, quarantine, lineage, content
digest), left out with a reason when it fails, and the run fails without retry when more
days are left out than `max_left_out_percent` allows (retrain.common.window).

Stdlib + airflow.sdk's exceptions at import; the window rules, the launcher and the alerts
inside the functions, which run inside the preprocess task.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

from airflow.sdk.exceptions import AirflowFailException

from retrain.common.run_context import Built, RunContext
from retrain.common.window import DEFAULT_MAX_LEFT_OUT_PERCENT
from retrain.orchestration.families import Family, resolve
from retrain.orchestration.handoff_checks import validated_content
from retrain.orchestration.tracked_stage import raw_ref_or_fail, run_stage


def left_out_problem(family: str, built: Built, screened: dict) -> str | None:
    """Why a preprocess spec may not run: the window screen left days out (bad data) and the
    family's builder did not say it skips exactly those (a builder returning a plain dict
    cannot skip any). None: nothing to say."""
    must = sorted(i["span"] for i in screened.get("left_out", []))
    if must and sorted(built.left_out or ()) != must:
        return (f"family {family}: its preprocess spec builder does not leave out {must} "
                f"(it answered left_out={built.left_out}): bad data would train a model")
    return None


def validate_day(family: Family, ctx: RunContext, params: dict, day: str) -> bool:
    """Validate an older day of the window that no run has validated yet (its report
    and lineage go to that day's folder under this run's id); False: bad data."""
    from retrain.orchestration.lineage import config_refs

    day_ctx = ctx.for_day(day)
    try:
        raw = raw_ref_or_fail(day_ctx.span_dir)
        run_stage(family, "validate", day_ctx,
                  {**params, "override_validation_reason": None},
                  {}, [raw, *config_refs(ctx.config, family.config_param)],
                  **validated_content(ctx, day, day_ctx.span_dir, raw))
    except AirflowFailException:
        return False
    return True


def validate_days(family: Family, ctx: RunContext, params: dict,
                  days: list[str]) -> dict[str, bool]:
    """Validate the window's older days no run has validated yet in one pass (the
    stage's window_module: one process, one statistics pass), each day recorded
    as its own validation would be: report, quarantine, lineage, content digest
    checked after. A family without a window step validates them one by one."""
    stage = family.stages["validate"]
    if stage.window_module is None:
        return {day: validate_day(family, ctx, params, day) for day in days}
    import logging

    from retrain.common import results
    from retrain.common.errors import BadData, BadDataFailed
    from retrain.orchestration import custody
    from retrain.orchestration.launch import run_step
    from retrain.orchestration.lineage import config_refs, raw_span_ref, record_fresh

    log = logging.getLogger("retrain.dag")
    plain = {**params, "override_validation_reason": None}
    contexts, raws, passed = {}, {}, {}
    for day in days:   # a day whose files cannot be read as data is left out
        contexts[day] = ctx.for_day(day)
        try:
            raws[day] = raw_span_ref(contexts[day].span_dir)
        except BadData as e:
            log.warning("older day %s did not pass validation: %s", day, e)
            passed[day] = False
    days = [day for day in days if day in raws]
    if not days:
        return passed
    specs = {day: Built.of(resolve(stage.build)(contexts[day], plain, {})).spec
             for day in days}
    config = config_refs(ctx.config, family.config_param)
    log.info("validating %d older day(s) of the window in one pass: %s .. %s",
             len(days), days[0], days[-1])
    try:
        done = run_step(stage.window_module, {
            "days": [specs[day] for day in days],
            "out_dir": f"{ctx.run_dir}/window_validation"})
    except BadDataFailed as e:     # the pass itself refused its input
        raise AirflowFailException(str(e)) from None
    for day, outcome in zip(days, done["days"]):
        day_ctx = contexts[day]
        try:
            if "error" in outcome:
                raise BadData(outcome["error"])
            result = outcome["result"]
            results.read("validate", result, stage.module)
            custody.verify(day, day_ctx.span_dir, raws[day]["content"],
                           stage="validate", quarantine_dir=ctx.quarantine_dir,
                           run_id=ctx.run_id)
        except (BadData, results.ContractError) as e:
            log.warning("older day %s did not pass validation: %s", day, e)
            passed[day] = False
            continue
        record_fresh("validate", stage.module, specs[day], result,
                     run_dir=day_ctx.run_dir, inputs=[raws[day], *config],
                     uri_key=results.URI_FIELD["validate"],
                     artifact_type=stage.artifact_type,
                     figures=(*stage.figures, *results.RECORDED.get("validate", ())),
                     extra_figures={"content": raws[day]["content"]})
        passed[day] = True
    return passed


def screen_window(family: Family, ctx: RunContext, params: dict) -> dict:
    """The window's days that may be trained on, and the others with reasons
    (retrain.common.window); logged, since a shorter window changes the model."""
    import logging

    from retrain.common import window
    from retrain.common.spans import window as days_of

    days = [d.isoformat() for d in days_of(dt.date.fromisoformat(ctx.span),
                                           params["window_days"])]
    screened = window.screen(
        days, ctx.span, history_root=ctx.history_root,
        quarantine_dir=ctx.quarantine_dir, include=params.get("include_spans"),
        validate_days=lambda days: validate_days(family, ctx, params, days),
        raw_root=ctx.raw_root)
    if screened["included_by_override"] and not params.get("override_validation_reason"):
        raise AirflowFailException(
            "include_spans names days that did not pass validation "
            f"({[i['span'] for i in screened['included_by_override']]}): say why in "
            "override_validation_reason")
    log = logging.getLogger("retrain.dag")
    for item in screened["left_out"]:
        log.warning("left out of the window: %s (%s)", item["span"], item["reason"])
    for item in screened["included_by_override"]:
        log.warning("in the window by override: %s although %s (%s)", item["span"],
                    item["reason"], params.get("override_validation_reason"))
    return screened


def judge_window(family: Family, ctx: RunContext, params: dict, screened: dict) -> dict:
    """The window policy on the screened window (retrain.common.window.policy):
    recorded in the run's folder (the Retrain tab shows it, also for a run it
    stopped), alerted whenever days are left out, and past the policy a
    WindowTooShort that fails the task without retry, naming the days."""
    from retrain.common import window
    from retrain.common.atomic import write_json
    from retrain.orchestration import alerts

    verdict = window.policy(
        screened, ctx.span, raw_root=ctx.raw_root,
        max_left_out_percent=float(params.get("max_left_out_percent",
                                              DEFAULT_MAX_LEFT_OUT_PERCENT)))
    write_json(Path(ctx.run_dir) / window.POLICY_FILE,
               {"span": ctx.span, "screen": screened, "policy": verdict})
    # Older days this run's validation quarantined: each its own alert.
    alerts.spans_quarantined(ctx, family.dag_id,
                             [i["span"] for i in screened["left_out"]])
    if verdict["left_out"]:
        alerts.window_days_left_out(ctx, family.dag_id, verdict)
    try:
        window.enforce(verdict, ctx.span)
    except window.WindowTooShort as e:
        raise AirflowFailException(str(e)) from None
    return verdict
