"""A run's outcome in one line, where a person looks first: "Published ctr v5",
"Unchanged: identical to ctr v4", "Not published: sentiment: 124 labelled eval texts <
min_eval_rows 200", "Failed at validate".

Why a module of its own: a run that goes green and publishes nothing (the gate refused
it, or the candidate is the model already serving) looks, in Airflow's Grid, like one that
published. The Retrain tab leads with this line (retrain.orchestration.airflow_views), its
runs list shows it beside the span, and the DAG run's note carries it
(retrain.orchestration.run_note_listener). Read from the run's folder: `run_summary.json`
(retrain.orchestration.push), `run_context.json` (the span) and `window_policy.json` (a
window the policy stopped), plus the task states Airflow knows.

Stdlib only: the API server and the scheduler import it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from retrain.common import paths, window
from retrain.common.run_context import CONTEXT_FILE

SUMMARY_FILE = "run_summary.json"    # retrain.orchestration.push.SUMMARY_FILE (no import:
                                     # push pulls in the launcher)
# Airflow keeps a run's note in a 1000-character column (dag_run_note.content).
NOTE_LIMIT = 1000
# Task states that end a run's path without the task doing its work.
FAILED_STATES = ("failed", "upstream_failed")


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def run_folders(home: Path, family: str) -> dict[str, Path]:
    """Every run folder of a family, by its folder name (paths.safe_run_id): runs/<family>/
    dt=<span>/<run id>. A run also writes under older days of its window (their
    validation), so its own folder is the one of its latest day."""
    found: dict[str, Path] = {}
    for p in sorted((Path(home) / "runs" / family).glob("dt=*/*")):   # older days first
        if p.is_dir():
            found[p.name] = p
    return found


def run_folder(home: Path, family: str, run_id: str) -> Path | None:
    """The run's own folder (None: the run has written none yet)."""
    found = [p for p in (Path(home) / "runs" / family).glob(
        f"dt=*/{paths.safe_run_id(run_id)}") if p.is_dir()]
    return max(found, key=lambda p: p.parent.name) if found else None


def span_of(folder: Path | None) -> str | None:
    """The run's span as resolve_span pinned it (its folder's day while the context file
    is being written)."""
    if folder is None:
        return None
    return (read_json(folder / SUMMARY_FILE).get("span")
            or read_json(folder / CONTEXT_FILE).get("span") or folder.parent.name[3:])


def negate(line: str) -> str:
    """A rule's line states what it requires ("124 eval texts >= min_eval_rows 200"); a
    failed one is said as what was found ("124 eval texts < min_eval_rows 200"). Lines with
    more than one comparison, or an interval's (whose condition is on the interval's end,
    not the figure shown first), are kept as written."""
    ops = [op for op in (" >= ", " <= ") for _ in range(line.count(op))]
    if len(ops) != 1 or "interval" in line:
        return line
    return line.replace(ops[0], " < " if ops[0] == " >= " else " > ")


def failed_rules(reasons: Iterable[str]) -> list[str]:
    """The gate's failed rules in its order, in words (components.gate writes one reason
    per rule, "<line>: pass" or "<line>: fail")."""
    return [negate(r.removesuffix(": fail")) for r in reasons or ()
            if isinstance(r, str) and r.endswith(": fail")]


def _version(v) -> str:
    return f"v{v}" if v is not None else "none"


def headline(summary: dict, *, model: str, failed_tasks: Iterable[str] = (),
             policy: dict | None = None, run_state: str | None = None) -> str:
    """The run's outcome in a line.

    `summary`: its run_summary.json ({} when push never wrote one); `model`: the family's
    registry name; `failed_tasks`: the run's tasks Airflow marked failed, in the DAG's
    order; `policy`: the window policy's verdict (window_policy.json's "policy") when the
    run has no summary; `run_state`: Airflow's state of the run (None: unknown)."""
    failed_tasks = list(failed_tasks)
    if summary:
        published, unchanged = summary.get("published"), summary.get("unchanged")
        if published:
            return f"Published {model} {_version(published.get('version'))}"
        if unchanged:
            return (f"Unchanged: identical to {unchanged.get('model') or model} "
                    f"{_version(unchanged.get('version'))}, nothing published")
        evaluation = summary.get("evaluation") or {}
        if summary.get("shadow"):
            return ("Shadow run: evaluated, never published (the candidate was "
                    + ("blessed)" if evaluation.get("blessed") else "not blessed)"))
        refused = summary.get("publish_refused")
        if refused:
            return (f"Not published: refused, the current {model} changed since evaluation "
                    f"(compared with {_version(refused.get('expected'))}, current now "
                    f"{_version(refused.get('current'))}); clear evaluate for a fresh "
                    f"verdict")
        check = summary.get("serving_check") or {}
        if check and not check.get("passed", True):
            error = str(check.get("error") or "").strip().splitlines()
            return "Not published: the serving check failed" + (f": {error[0]}" if error
                                                                 else "")
        if not evaluation.get("blessed", True):
            rules = failed_rules(evaluation.get("reasons") or [])
            if not rules:
                return "Not published: the gate did not bless the candidate"
            more = (f" (and {len(rules) - 1} more failed rule"
                    f"{'s' if len(rules) > 2 else ''})" if len(rules) > 1 else "")
            return f"Not published: {rules[0]}{more}"
        if failed_tasks:
            return f"Not published: failed at {', '.join(failed_tasks)} (its log says why)"
        return "Not published: push has not finished"
    if policy and not policy.get("ok", True):
        n = len(policy.get("left_out") or [])
        return (f"Not published: the window policy stopped the run ({n} of "
                f"{policy.get('counted')} day(s) left out, {policy.get('allowed')} may "
                f"be)")
    if failed_tasks:
        return f"Failed at {', '.join(failed_tasks)}: nothing published (its log says why)"
    if run_state == "success":
        return "Not published: the run ended without reaching push"
    if run_state == "failed":
        return "Failed: nothing published (see the task logs)"
    return "Running: nothing published yet"


def outcome_of(folder: Path | None, *, model: str, failed_tasks: Iterable[str] = (),
               run_state: str | None = None) -> str:
    """`headline` of a run folder (None: the run wrote none, e.g. refused at resolve_span)."""
    summary = read_json(folder / SUMMARY_FILE) if folder else {}
    policy = read_json(folder / window.POLICY_FILE).get("policy") if folder else None
    return headline(summary, model=model, failed_tasks=failed_tasks, policy=policy,
                    run_state=run_state)


def note(span: str | None, line: str) -> str:
    """The DAG run's note: the span first (the runs list shows notes, not params), then
    the outcome; within Airflow's column."""
    text = f"span {span}: {line}" if span else line
    return text if len(text) <= NOTE_LIMIT else text[:NOTE_LIMIT - 1] + "…"
