"""The trigger form of a family's DAG: the params every family has, then its own.

Why one function: the UI's form, `airflow dags trigger --conf` and the bench's bad-input
cases all read the same params, and a family adds its own through its descriptor
(`Family.params`) without an edit here. Deployment defaults (raw root, config file) are
read from the environment when the DAG is built.

airflow.sdk + stdlib + the descriptor: the DAG files import it.
"""
from __future__ import annotations

from airflow.sdk import Param

from retrain.common.settings import family_default
from retrain.common.window import DEFAULT_MAX_LEFT_OUT_PERCENT
from retrain.orchestration.approval import approval_params
from retrain.orchestration.dag_defaults import publish_params, span_params
from retrain.orchestration.families import Family


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
