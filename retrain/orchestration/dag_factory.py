"""One DAG factory for every model family: resolve the span -> wait for its `_SUCCESS`
marker -> validate -> preprocess -> train -> wait for the publishing turn -> evaluate ->
approve (a person, when the run asks) -> push.

Every stage runs through the same tracked launcher (`retrain.orchestration.lineage.run_tracked`:
a child process, a lineage record, reuse of a finished artifact with the same
fingerprint), so every family gets the same sensor, pools, quarantine and override, typed
bad-data failures (not retried), shadow backfills, publishing and alerts. What differs between
families is in their descriptor (`retrain.orchestration.families`): the step modules, the spec
builders, the extra params, the pools and the headline metrics.

Thin on purpose: airflow.sdk + stdlib + the descriptor at import; a family's steps and
builders are imported inside the tasks, so DAG parsing stays cheap.
"""
from __future__ import annotations

import datetime as dt
import warnings
from pathlib import Path
from typing import Callable

from airflow.sdk import Asset, Param, dag, task
from airflow.sdk.exceptions import AirflowFailException

from retrain.common.run_context import Built, RunContext
from retrain.common.settings import beam_flags, family_default, settings
from retrain.common.window import DEFAULT_MAX_LEFT_OUT_PERCENT
from retrain.orchestration.approval import ModelApproval, approval_params
from retrain.orchestration.families import Family, resolve
from retrain.orchestration.timeouts import execution_timeouts
from retrain.orchestration.dag_defaults import (daily as _daily, home as _home, publish_or_skip,
                                  publish_params, span_params)

# Airflow's standard provider (1.21.0, the newest) imports `determine_kwargs` for
# @task.sensor from its deprecated location: one DeprecatedImportWarning in every task log,
# about a line of Airflow's own that no user can act on. Only that warning is silenced.
warnings.filterwarnings(
    "ignore", message=r"The `airflow\.utils\.operator_helpers\.determine_kwargs` attribute "
                      r"is deprecated")

def span_poke_seconds() -> float:
    """Seconds between two looks for the span's _SUCCESS marker (reschedule mode: no
    worker slot is held in between). Read from the environment when the DAG is built,
    not when this module is first imported, so each parse sees the current setting
    (tests poke every second; an import-time constant kept the first value: 300 s)."""
    return settings().span_poke_seconds


def family_params(family: Family) -> dict[str, Param]:
    """The params every family has, then the family's own (from its descriptor)."""
    params = {
        **span_params(family.name, "Days of data read, ending at the span.",
                      "Share of the data held out for evaluation (stable hash)."),
        **publish_params(),
        **approval_params(),
        "override_validation_reason": Param(
            None, type=["null", "string"], minLength=1,
            description="Let a span that fails data validation through anyway; the reason "
                        "and the failed rules are recorded in the run's validation.json "
                        "and run_summary.json. Empty: failed validation stops the run."),
        "override_validation_rules": Param(
            None, type=["null", "array"], items={"type": "string"},
            description="With override_validation_reason: the rule ids it lets through "
                        "(as the validation report names them, e.g. click_rate); any other "
                        "failed rule still stops the run. Empty: every failed rule."),
        "include_spans": Param(
            None, type=["null", "array"], items={"type": "string", "format": "date"},
            description="Older days of the window to train on although their validation "
                        "failed, was overridden for another run only, or is quarantined "
                        "(recorded with override_validation_reason). Empty: such days are "
                        "left out of the window, and the run's summary says why."),
        "max_left_out_percent": Param(
            DEFAULT_MAX_LEFT_OUT_PERCENT, type="number", minimum=0, maximum=100,
            description="Window policy: the most of the window's days (a percent, rounded "
                        "down) that may be left out (failed validation, quarantined, not "
                        "delivered) before the run fails, not retried, naming them; days "
                        "before the log's first delivered day do not count, the span never "
                        "goes. Left-out days are listed in the run's summary and the "
                        "Retrain tab and alerted. 10: a 30-day window may lose 3 days, a "
                        "3-day window none."),
        "span_timeout_minutes": Param(
            720, type="number", minimum=0,
            description="How long to wait for the span's _SUCCESS marker before failing."),
        # The user's data: where it is and what it holds. Deployment defaults come from the
        # environment; a run may override.
        "raw_root": Param(family_default(family.raw_root_env),
                          type=["null", "string"],
                          description="Folder holding the dt=YYYY-MM-DD partitions. "
                                      f"Empty: <RETRAIN_HOME>/raw/{family.name}."),
        family.config_param: Param(family_default(family.config_env),
                                   type=["null", "string"], description=family.config_help),
    }
    for name, schema in family.params.items():
        schema = dict(schema)
        params[name] = Param(schema.pop("default"), **schema)
    return params


def left_out_problem(family: str, built: Built, screened: dict) -> str | None:
    """Why a preprocess spec may not run: the window screen left days out (bad data) and the
    family's builder did not say it skips exactly those (a builder returning a plain dict
    cannot skip any). None: nothing to say."""
    must = sorted(i["span"] for i in screened.get("left_out", []))
    if must and sorted(built.left_out or ()) != must:
        return (f"family {family}: its preprocess spec builder does not leave out {must} "
                f"(it answered left_out={built.left_out}): bad data would train a model")
    return None


def raw_ref_or_fail(day_dir) -> dict:
    """The day's lineage reference; a day whose files cannot be read as data (a FIFO, a
    link out of the root: UnsafeInput) fails the task at once: a retry cannot help."""
    from retrain.common.errors import BadData
    from retrain.orchestration.lineage import raw_span_ref

    try:
        return raw_span_ref(day_dir)
    except BadData as e:
        raise AirflowFailException(str(e)) from None


def make_dag(family: Family):
    """The family's `@dag` function; calling it builds the DAG (as the DAG file does)."""
    model_asset = Asset(name=family.model_asset, uri=f"file:///retrain/registry/{family.name}")
    # Lineage in the UI: each validated raw partition and each transformed window is an
    # asset event (span and fingerprint in its extra), next to the model's.
    raw_asset = Asset(name=f"{family.name}_raw_logs", uri=f"file:///retrain/raw/{family.name}")
    examples_asset = Asset(name=f"{family.name}_transformed_examples",
                           uri=f"file:///retrain/transformed/{family.name}")
    stages = family.stages
    # Every task may run only so long (retrain.orchestration.timeouts): a hung step is
    # stopped, its process group ended, and the task retried once, then failed.
    limit = execution_timeouts()

    @dag(dag_id=family.dag_id, **_daily(), tags=list(family.tags), doc_md=family.doc,
         params=family_params(family))
    def daily():
        @task(execution_timeout=limit["resolve_span"])
        def resolve_span(params=None, logical_date=None, dag_run=None, run_id=None) -> dict:
            """Pin the span and the run's artifact folder once; every later task reads them."""
            import logging

            from retrain.common import paths, run_inputs
            from retrain.common.spans import derive_span, is_shadow, span_for_run

            run_after = getattr(dag_run, "run_after", None)
            span, why = derive_span(params.get("span"), logical_date, run_after), ""
            home = _home()
            config = params.get(family.config_param) or ""
            problems = run_inputs.check(span, raw_root=params.get("raw_root"), config=config,
                                        config_param=family.config_param)
            if not problems:   # only a root the checks allow is looked into
                raw_root = params.get("raw_root") or str(paths.default_raw_root(home, family.name))
                try:
                    span, why = span_for_run(params.get("span"), logical_date, run_after,
                                             getattr(dag_run, "run_type", None), raw_root)
                except ValueError as e:
                    problems.append(str(e))
                else:
                    logging.getLogger("retrain.dag").info("span %s: %s", span, why)
            if config and not problems:
                from retrain.common.errors import BadDataFailed
                from retrain.orchestration.launch import run_step

                try:   # a broken config fails now, not after the sensor's wait; parsed
                    run_step("components.config_check", {   # in a step, not in Airflow
                        "loader": family.config_loader, "path": str(Path(config).resolve())})
                except BadDataFailed as e:   # the loader names every problem, not content
                    problems.append(f"{family.config_param} {config}: {e}")
            if problems:
                raise AirflowFailException("refusing the run: " + "; ".join(problems))
            from retrain.common.atomic import write_json
            from retrain.common.run_context import CONTEXT_FILE

            ctx = RunContext.create(
                family.name, span, home, run_id, raw_root=params.get("raw_root"),
                config=config and str(Path(config).resolve()),
                shadow=is_shadow(params.get("shadow"), getattr(dag_run, "run_type", None)),
                span_reason=why,
                beam_args=beam_flags(settings().beam_args)).to_xcom()
            write_json(Path(ctx["run_dir"]) / CONTEXT_FILE, ctx)
            return ctx

        @task.sensor(mode="reschedule", poke_interval=span_poke_seconds(),
                     timeout=dt.timedelta(days=7), execution_timeout=limit["sensor_poke"])
        def wait_for_span(ctx: dict, params=None, ti=None, **context) -> bool:
            """Wait (holding no worker slot) for the producer's _SUCCESS marker of the span.
            The timeout is the `span_timeout_minutes` param (AirflowSensorTimeout: no retry)."""
            ctx = RunContext.from_xcom(ctx)
            import logging

            from airflow.sdk import timezone
            from airflow.sdk.exceptions import AirflowSensorTimeout

            marker = Path(ctx.span_dir) / "_SUCCESS"
            if marker.exists():
                return True
            first = ti.get_first_reschedule_date(context) or timezone.utcnow()
            waited = (timezone.utcnow() - first).total_seconds()
            limit = float(params["span_timeout_minutes"]) * 60
            if waited >= limit:
                raise AirflowSensorTimeout(
                    f"span {ctx.span} not delivered: no {marker} after waiting "
                    f"{waited / 60:.1f} min (span_timeout_minutes="
                    f"{params['span_timeout_minutes']}). Check the upstream export of that "
                    "day, then clear this task to wait again.")
            logging.getLogger("retrain.dag").info(
                "waiting for %s (%.1f of %s min waited)", marker, waited / 60,
                params["span_timeout_minutes"])
            return False

        def run_stage(name: str, ctx: RunContext, params: dict, upstream: dict,
                      inputs: list[dict], spec: dict | None = None,
                      extra_figures: dict | None = None,
                      after: Callable[[], object] | None = None) -> dict:
            """`after()`: a hand-off check run once the step has finished and before its
            artifact is recorded (a BadData from it fails the task without retry)."""
            from retrain.common import results
            from retrain.common.errors import BadData
            from retrain.common.errors import BadDataFailed
            from retrain.orchestration.lineage import run_tracked

            def check(r: dict) -> None:
                results.read(name, r, stage.module)
                if after is not None:
                    after()

            stage = stages[name]
            if spec is None:
                spec = Built.of(resolve(stage.build)(ctx, params, upstream)).spec
            try:
                result = run_tracked(name, stage.module, spec, home=ctx.home,
                                     family=family.name, run_dir=ctx.run_dir,
                                     inputs=inputs, uri_key=results.URI_FIELD[name],
                                     artifact_type=stage.artifact_type,
                                     figures=(*stage.figures,
                                              *results.RECORDED.get(name, ())),
                                     reuse=stage.reuse,
                                     check=check, extra_figures=extra_figures)
            except (BadDataFailed, BadData, results.ContractError) as e:   # a retry cannot help
                raise AirflowFailException(str(e)) from None
            return result

        def published(ctx: RunContext) -> tuple[str | None, list[dict]]:
            """The serving model's folder and its lineage reference (none yet: None, [])."""
            from retrain.common.registry import Registry

            registry = Registry(Path(ctx.home) / "registry")
            current = registry.current(family.name)
            if not current:
                return None, []
            path = str(registry.model_path(family.name, current["version"]))
            return path, [{"name": f"{family.name}-v{current['version']}",
                           "type": "published_model", "uri": path,
                           "fingerprint": current.get("fingerprint") or path,
                           "version": current["version"]}]

        def validated_content(ctx: RunContext, day: str, day_dir: str, raw: dict) -> dict:
            """run_stage arguments that bind a validation to the bytes it read: the digest
            taken before the step is recorded with the verdict, and checked again after it
            (a partition rewritten while it was being validated is refused)."""
            from retrain.orchestration import custody

            return {"extra_figures": {"content": raw["content"]},
                    "after": lambda: custody.verify(
                        day, day_dir, raw["content"], stage="validate",
                        quarantine_dir=ctx.quarantine_dir, run_id=ctx.run_id)}

        def verify_window(ctx: RunContext, days: list[str], stage: str,
                          unchecked: tuple[str, ...] = ()) -> list[dict]:
            """Each day's raw partition against the digest its validation recorded (the
            span: this run's validation); returns their lineage references. Days in
            `unchecked` (trained on by a recorded override) are referenced, not checked."""
            from retrain.orchestration import custody

            refs = []
            for day in days:
                day_dir = ctx.partition(day)
                if not Path(day_dir).is_dir():
                    continue
                ref = raw_ref_or_fail(day_dir)
                if day not in unchecked:
                    expected = custody.validated(
                        ctx.history_root, day,
                        run_dir=ctx.run_dir if day == ctx.span else None)
                    try:
                        custody.verify(day, day_dir, expected, stage=stage,
                                       quarantine_dir=ctx.quarantine_dir,
                                       run_id=ctx.run_id, actual=ref["content"])
                    except custody.ContentChanged as e:
                        raise AirflowFailException(str(e)) from None
                refs.append(ref)
            return refs

        @task(task_id=family.task_id("validate"), pool=stages["validate"].pool,
              outlets=[raw_asset], execution_timeout=limit["validate"])
        def validate(ctx: dict, params=None, outlet_events=None) -> dict:
            """The family's validation suite; a failed gate quarantines the span and fails
            the task without retry (an override param lets it through, recorded)."""
            ctx = RunContext.from_xcom(ctx)
            import logging

            from retrain.orchestration.lineage import config_refs

            # Never reused: the verdict also depends on the history of earlier spans.
            config = config_refs(ctx.config, family.config_param)
            raw = raw_ref_or_fail(ctx.span_dir)
            result = run_stage("validate", ctx, params, {}, [raw, *config],
                               **validated_content(ctx, ctx.span, ctx.span_dir, raw))
            outlet_events[raw_asset].extra = {
                "span": ctx.span, "uri": raw["uri"], "fingerprint": raw["fingerprint"],
                "gate": result.get("gate"), "rows": result.get("rows"), "run_id": ctx.run_id}
            if result.get("gate") == "overridden":
                logging.getLogger("retrain.dag").warning(
                    "validation failed %s error rule(s) and was overridden: %s",
                    result["n_failed"], result["override_reason"])
            return result

        def validate_day(ctx: RunContext, params: dict, day: str) -> bool:
            """Validate an older day of the window that no run has validated yet (its report
            and lineage go to that day's folder under this run's id); False: bad data."""
            from retrain.orchestration.lineage import config_refs

            day_ctx = ctx.for_day(day)
            try:
                raw = raw_ref_or_fail(day_ctx.span_dir)
                run_stage("validate", day_ctx, {**params, "override_validation_reason": None},
                          {}, [raw, *config_refs(ctx.config, family.config_param)],
                          **validated_content(ctx, day, day_ctx.span_dir, raw))
            except AirflowFailException:
                return False
            return True

        def validate_days(ctx: RunContext, params: dict, days: list[str]) -> dict[str, bool]:
            """Validate the window's older days no run has validated yet in one pass (the
            stage's window_module: one process, one statistics pass), each day recorded
            as its own validation would be: report, quarantine, lineage, content digest
            checked after. A family without a window step validates them one by one."""
            stage = stages["validate"]
            if stage.window_module is None:
                return {day: validate_day(ctx, params, day) for day in days}
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

        def screen_window(ctx: RunContext, params: dict) -> dict:
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
                validate_days=lambda days: validate_days(ctx, params, days),
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

        def judge_window(ctx: RunContext, params: dict, screened: dict) -> dict:
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

        @task(task_id=family.task_id("preprocess"), pool=stages["preprocess"].pool,
              outlets=[examples_asset], execution_timeout=limit["preprocess"])
        def preprocess(ctx: dict, validation: dict, params=None, outlet_events=None) -> dict:
            """Beam over the window's days that passed validation (bad data never trains a
            model), if no more were left out than the window policy allows; reused when
            inputs, code and params match."""
            ctx = RunContext.from_xcom(ctx)
            from retrain.orchestration.lineage import config_refs

            screened = screen_window(ctx, params)
            built = Built.of(resolve(stages["preprocess"].build)(
                ctx, params, {"validate": validation, "window": screened}))
            problem = left_out_problem(family.name, built, screened)
            if problem:
                raise AirflowFailException(problem)
            spec = built.spec
            overridden = tuple(i["span"] for i in screened["included_by_override"])
            inputs = verify_window(ctx, screened["used"], "preprocess", overridden)
            # after the days used are checked: a day rewritten since its validation is
            # quarantined and named whatever the policy says of the others
            judged = judge_window(ctx, params, screened)
            result = run_stage("preprocess", ctx, params, {}, [
                *inputs, *config_refs(ctx.config, family.config_param)], spec=spec,
                extra_figures={"window_used": screened["used"],
                               "window_left_out": screened["left_out"],
                               "window_included_by_override":
                                   screened["included_by_override"]},
                # the bytes the job read are still the validated ones when it ends
                after=lambda: verify_window(ctx, screened["used"], "preprocess", overridden))
            outlet_events[examples_asset].extra = {
                "span": ctx.span, "window": screened["used"],
                "uri": result["artifact"]["uri"], "fingerprint": result["artifact"]["fingerprint"],
                "reused_from": result.get("reused_from"), "run_id": ctx.run_id}
            return {**result, "window_screen": screened, "window_policy": judged}

        def check_examples_custody(ctx: RunContext, preprocessed: dict) -> None:
            """The examples were made from the validated bytes of every window day: the
            digests preprocess recorded for its raw inputs are those validation recorded."""
            from retrain.orchestration import custody
            from retrain.orchestration.lineage import read_records

            rec = read_records(ctx.run_dir).get("preprocess") or {}
            overridden = {i["span"] for i in
                          (preprocessed.get("window_screen") or {}).get("included_by_override", [])}
            for ref in rec.get("inputs", []):
                if ref.get("type") != "raw_span" or ref["name"].removeprefix("dt=") in overridden:
                    continue
                day = ref["name"].removeprefix("dt=")
                expected = custody.validated(
                    ctx.history_root, day,
                    run_dir=ctx.run_dir if day == ctx.span else None)
                if expected is None or expected["digest"] != ref["fingerprint"]:
                    raise AirflowFailException(
                        f"train: refusing the examples of {rec.get('uri')}: they were made "
                        f"from day {day} with content digest {ref['fingerprint']}, but its "
                        f"validation recorded {expected and expected['digest']}")

        @task(task_id=family.task_id("train"), pool=stages["train"].pool,
              inlets=[examples_asset], execution_timeout=limit["train"])
        def train(ctx: dict, preprocessed: dict, params=None) -> dict:
            """Train (or fine-tune) on the preprocessed window; a retry resumes from its
            checkpoints where the trainer keeps them. Reused when inputs, code and params
            match."""
            ctx = RunContext.from_xcom(ctx)
            check_examples_custody(ctx, preprocessed)
            path, refs = published(ctx) if family.warm_start else (None, [])
            upstream = {"preprocess": preprocessed, "published": path}
            built = Built.of(resolve(stages["train"].build)(ctx, params, upstream))
            return run_stage("train", ctx, params, upstream,
                             [preprocessed["artifact"], *(refs if built.reads_published else [])],
                             spec=built.spec)

        @task.sensor(mode="reschedule", poke_interval=min(span_poke_seconds(), 15.0),
                     timeout=dt.timedelta(days=1), execution_timeout=limit["sensor_poke"])
        def wait_for_turn(ctx: dict, trained: dict, ti=None) -> bool:
            """A publishing run evaluates and publishes after those that finished training
            before it (retrain.orchestration.turns), so overlapping runs never compare with a
            model that is about to be replaced; a shadow run goes on at once."""
            ctx = RunContext.from_xcom(ctx)
            if ctx.shadow:
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
            return not waiting

        @task(task_id=family.task_id("evaluate"), pool=stages["evaluate"].pool,
              execution_timeout=limit["evaluate"])
        def evaluate(ctx: dict, preprocessed: dict, trained: dict, params=None) -> dict:
            """Candidate against the published model on the same held-out rows; the gate's
            verdict is always recomputed (it depends on what is published now)."""
            ctx = RunContext.from_xcom(ctx)
            path, refs = published(ctx)
            if family.evaluate_reads == "raw_span":   # the window's held-out raw rows
                screened = preprocessed.get("window_screen") or {}
                data = verify_window(ctx, screened.get("used") or [ctx.span], "evaluate",
                                     tuple(i["span"] for i in
                                           screened.get("included_by_override", [])))
            else:
                data = [preprocessed["artifact"]]
            inputs = [*data, *([trained["artifact"]] if trained.get("artifact") else []), *refs]
            result = run_stage("evaluate", ctx, params,
                               {"preprocess": preprocessed, "train": trained,
                                "published": path}, inputs)
            result["baseline_version"] = refs[0]["version"] if refs else None
            return result

        @task(outlets=[model_asset], execution_timeout=limit["push"])
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
                    family.name, model_asset, ctx, dag_run=dag_run,
                    outlet_events=outlet_events, evaluation=evaluation, validation=validation,
                    preprocessed=preprocessed, trained=trained,
                    serving_check_module=family.serving_check,
                    headline=tuple(m.name for m in family.headline), extra_metadata=extra)
            finally:
                turns.give_back(ctx.home, family.dag_id, ctx.run_id)

        ctx = resolve_span()
        checked = validate(ctx)
        wait_for_span(ctx) >> checked
        pre = preprocess(ctx, checked)
        model = train(ctx, pre)
        evaluation = evaluate(ctx, pre, model)
        wait_for_turn(ctx, model) >> evaluation
        # A person answers in Required Actions when the run's `approval` param asks for it.
        approve = ModelApproval(task_id="approve", family_name=family.name)
        # Set after construction: the HITL operator turns an execution_timeout given to it
        # into its response timeout. This one bounds asking and recording the answer; the
        # wait for a person is approval_timeout_hours.
        approve.execution_timeout = limit["approve"]
        evaluation >> approve
        push(ctx, checked, pre, model, evaluation, approve.output)

    daily.__name__ = family.dag_id
    return daily
