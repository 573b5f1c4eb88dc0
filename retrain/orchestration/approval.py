"""A person approves a candidate before it is published, when the run asks for it.

Why: a gate decides on rules, and some verdicts are close calls a person should see, with
the report in front of them. The `approve` task sits between evaluate and push; it is
Airflow's own human-in-the-loop `ApprovalOperator` (Airflow 3.3 parks the task in
"awaiting input" and lists it under Required Actions; no worker slot, no triggerer), asked
only when the run's `approval` param says so:

- `never` (default): no question, the gate's verdict stands;
- `borderline`: asked when the gate blessed a candidate that used a rule's allowance,
  i.e. a relative rule passed with the candidate worse than the published model (say an
  AUC drop within `max_auc_drop`); `borderline_rules` names them;
- `always`: asked for every blessed candidate.

A rejected candidate (by the gate) is never put to a person. Approve: push publishes and
the registry entry records who approved and when. Reject (with a reason typed in the
form): push is skipped; the decision, who and why go to `<run_dir>/approval.json` and the
run's publishing turn is handed back, and an `unapproved` alert goes out
(retrain.orchestration.alerts). No answer within `approval_timeout_hours`: Airflow
takes the default, Reject, so a timeout publishes nothing.
"""
from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Param

log = logging.getLogger("retrain.approval")

MODES = ("never", "borderline", "always")
RECORD_FILE = "approval.json"
REASON_PARAM = "reason"


def approval_params() -> dict[str, Param]:
    """The DAG params that decide whether a person is asked."""
    return {
        "approval": Param("never", enum=list(MODES),
                          description="Ask a person before publishing a blessed candidate: "
                                      "never, borderline (it passed a rule only thanks to "
                                      "the rule's allowance), always."),
        "approval_timeout_hours": Param(24, type="number", exclusiveMinimum=0,
                                        description="Hours to wait for an answer; then "
                                                    "nothing is published."),
    }


def borderline_rules(decision: dict) -> list[str]:
    """Relative rules the candidate passed while worse than the published model: the
    difference lies strictly between 0 and the rule's allowance. A rule judged on an
    interval records the difference as `observed` and the allowance as `limit`; one
    judged on point estimates (`test: point`) records the values, the baseline and the
    `delta`, so its allowance is `limit - baseline`."""
    out = []
    for rule in decision.get("rules", []):
        observed, limit = rule.get("observed"), rule.get("limit")
        if rule.get("test") == "point" and "delta" in rule and _number(limit) \
                and _number(rule.get("baseline")):
            observed, limit = rule["delta"], limit - rule["baseline"]
        if (rule.get("passed") and rule.get("baseline") is not None
                and isinstance(observed, (int, float)) and isinstance(limit, (int, float))
                and limit != 0 and min(0.0, limit) < observed < max(0.0, limit)):
            out.append(rule["name"])
    return out


def question(mode: str, evaluation: dict) -> str | None:
    """Why a person is asked (None: not asked)."""
    from retrain.common import evaluated

    if mode == "never" or not evaluation.get("blessed"):
        return None
    if mode == "always":
        return "the run asks for approval of every blessed candidate"
    rules = borderline_rules(evaluated.read_record(evaluation).get("decision") or {})
    if rules:
        return f"borderline: passed {', '.join(rules)} only within the rule's allowance"
    return None


def _scores(metrics: dict | None) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in (metrics or {}).items()
                     if isinstance(v, (int, float)) and not isinstance(v, bool)) or "-"


def request_body(family: str, span: str, why: str, evaluation: dict, decision: dict,
                 links: list[tuple[str, str]], timeout_hours: float) -> str:
    """What Required Actions shows (markdown): why the person is asked, the candidate's
    headline metrics beside the published model's, the verdict with its rule count and any
    borderline rule, and links to the run's reports as the UI serves them. A few short
    lines; the report holds the rest."""
    rules = [r for r in decision.get("rules") or [] if isinstance(r, dict)]
    passed = sum(1 for r in rules if r.get("passed"))
    version = evaluation.get("baseline_version")
    published = (f"published{f' v{version}' if version is not None else ''}: "
                 f"{_scores(evaluation.get('baseline'))}" if evaluation.get("baseline")
                 else "published: none yet (absolute thresholds only)")
    borderline = borderline_rules(decision)
    lines = [f"**{family}**, span {span}: {why}.", "",
             f"- candidate: {_scores(evaluation.get('candidate'))}",
             f"- {published}",
             f"- gate: {'blessed' if evaluation.get('blessed') else 'not blessed'}, "
             f"{passed} of {len(rules)} rules pass"
             + (f"; borderline: {', '.join(borderline)}" if borderline
                and not why.startswith("borderline") else ""), "",
             " · ".join(f"[{title}]({href})" for title, href in links), "",
             f"Approve publishes; Reject (say why) or no answer in {timeout_hours:g} h "
             f"publishes nothing."]
    return "\n".join(lines)


def record(run_dir: str, decision: dict) -> Path:
    from retrain.common.atomic import write_json
    return write_json(Path(run_dir) / RECORD_FILE, decision)


class ModelApproval(ApprovalOperator):
    """ApprovalOperator that asks only when `question()` says so, with the verdict and the
    report in its body, and records the answer for push and the registry."""

    def __init__(self, *, family_name: str, params=None, **kwargs):
        from airflow.sdk.definitions.param import ParamsDict

        # The DAG's params arrive here too; only this task's own field goes into the form.
        form = params if isinstance(params, ParamsDict) else ParamsDict(params or {})
        form[REASON_PARAM] = Param("", type="string", description="Why (kept with the run)",
                                   source="task")
        super().__init__(subject="Publish this candidate?", defaults="Reject", params=form,
                         **kwargs)
        self.family_name = family_name

    def _inputs(self, context) -> tuple[dict, dict]:
        ti = context["ti"]
        ctx = ti.xcom_pull(task_ids="resolve_span")
        evaluation = ti.xcom_pull(task_ids="evaluate")
        return ctx, evaluation

    def execute(self, context):
        ctx, evaluation = self._inputs(context)
        params = context["params"]
        why = None if ctx.get("shadow") else question(params.get("approval", "never"),
                                                     evaluation)
        if why is None:
            log.info("approval not asked (approval=%s, blessed=%s)", params.get("approval"),
                     evaluation.get("blessed"))
            return {"asked": False}
        self.response_timeout = dt.timedelta(hours=float(params["approval_timeout_hours"]))
        from retrain.common import evaluated
        from retrain.orchestration import ui_links

        decision = evaluated.read_record(evaluation).get("decision") or {}
        links = ui_links.run_reports(context["dag_run"].dag_id, ctx["run_id"],
                                     ctx.get("run_dir"), evaluation.get("report_uri"))
        self.body = request_body(self.family_name, ctx["span"], why, evaluation, decision,
                                 links, params["approval_timeout_hours"])
        record(ctx["run_dir"], {"asked": True, "why": why, "decision": "waiting",
                                "asked_at": _now()})
        return super().execute(context)

    def execute_complete(self, context, event):
        ctx, _ = self._inputs(context)
        timed_out = bool(event.get("timedout")) or event.get("responded_by_user") is None
        chosen = (event.get("chosen_options") or ["Reject"])[0]
        by = event.get("responded_by_user") or {}
        answer = {"asked": True, "decision": "approved" if chosen == self.APPROVE else
                  "rejected", "by": by.get("name") or by.get("id"),
                  "reason": ((event.get("params_input") or {}).get(REASON_PARAM) or
                             ("no answer in time" if timed_out else "")),
                  "answered_at": _now(), "timed_out": timed_out}
        record(ctx["run_dir"], answer)
        if chosen != self.APPROVE:
            from retrain.common.run_context import RunContext
            from retrain.orchestration import alerts, turns
            log.warning("candidate rejected by %s: %s; push is skipped",
                        answer["by"] or "timeout", answer["reason"] or "no reason given")
            dag_id = context["dag_run"].dag_id
            turns.give_back(ctx["home"], dag_id, ctx["run_id"])
            alerts.candidate_rejected(
                RunContext.from_xcom(ctx), dag_id, [answer["reason"] or "no reason given"],
                decided_by=(f"reviewer {answer['by']}" if answer["by"]
                            else "no answer in time"))
        super().execute_complete(context, event)
        return answer


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
