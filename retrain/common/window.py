"""Which days of a training window may be trained on: bad data never trains a model.

A run validates its own span; the older days of its window were validated by earlier runs,
or never. The verdict is read from the validate step's lineage record, which the DAG
factory writes for every family (`gate` and `override_reason` are always recorded), so no
family's report format matters here. A day is used only if its latest validation passed. A quarantined day, a day
whose failed validation was overridden for another run only, or a day that fails when it
is validated now (days never validated, or validated before content digests were recorded,
are validated by this run) is left out, with the
reason, unless the run's override names it. The run's summary and lineage list both sets.
The days to validate now are validated together, in one call.

How many days may go is the window policy (`policy`): at most `max_left_out_percent` of
the window's days (rounded down; default 10) may be left out before the run fails with
`WindowTooShort` (bad data: not retried), and never the run's own span. Days before the
raw log's first delivered day are not counted: a window that reaches back before the log
began lost nothing. Why 10: the examples that prompted it (2 of 14 days of a text window,
4 of 30 of a loans window, each trained on and published without a word) both lie past
it; a loss of one day in ten or less changes a model little and is told (the run's
summary, the Retrain tab, an alert), more is a person's decision, made by naming the days
in include_spans or raising the share for that run. A 3-day window (the default) may
lose none: one day is a third of its data.

Stdlib only: the DAG factory calls it inside the preprocess task.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable

from retrain.common.errors import BadData
from retrain.common.quarantine import marker_path
from retrain.common import paths

VALIDATION_RECORD = "lineage/validate.json"
# The run's window, screened and judged (run folder): what the Retrain tab shows, also for
# a run the policy stopped (it has no run_summary.json).
POLICY_FILE = "window_policy.json"
DEFAULT_MAX_LEFT_OUT_PERCENT = 10


class WindowTooShort(BadData):
    """More of a window's days left out than the run's policy allows."""


def latest_validation(history_root: str | os.PathLike, day: str) -> dict | None:
    """The newest validation verdict of `day` by any run: {"gate", "override_reason",
    "content", "run_id"} (None: no run let it through; a failed validation leaves no record)."""
    found = []
    for path in Path(paths.partition(history_root, day)).glob(f"*/{VALIDATION_RECORD}"):
        try:
            rec = json.loads(path.read_text())
            found.append((path.stat().st_mtime_ns, {
                **{k: rec["figures"].get(k) for k in ("gate", "override_reason", "content")},
                "run_id": (rec.get("recorded_by") or rec.get("producer") or {}).get("run_id")}))
        except (OSError, ValueError, KeyError, AttributeError):
            continue            # a half-visible or broken record is no evidence of a pass
    return max(found, key=lambda x: x[0])[1] if found else None


def screen(days: list[str], span: str, *, history_root: str, quarantine_dir: str,
           include: list[str] | None = None,
           validate_days: Callable[[list[str]], dict[str, bool]] | None = None,
           raw_root: str | None = None) -> dict:
    """{"used": [...], "left_out": [{"span", "reason"}], "included_by_override": [...]}.

    `span` is validated by this run (its gate let it through, or the run would have
    stopped); `include` names days trained on whatever their validation said;
    `validate_days(days) -> {day: passed}` validates, in one call, every day no run has
    validated yet (a long window's first run: one pass, not one step per day). With a
    local `raw_root`, a day never delivered (no `dt=D/_SUCCESS`: before the log began, or
    a gap) is left out as such instead of failing the run on it."""
    include = set(include or ())
    reasons: dict[str, str | None] = {}
    not_delivered: dict[str, str] = {}
    pending: list[str] = []
    for day in days:
        if day == span:
            continue
        missing = _not_delivered(raw_root, day)
        if missing:
            not_delivered[day] = missing
            continue
        reason = _recorded_reason(day, history_root, quarantine_dir)
        if reason in (_NEVER, _NO_DIGEST) and validate_days is not None:
            pending.append(day)
        else:
            reasons[day] = ("never validated" if reason is _NEVER
                            else None if reason is _NO_DIGEST else reason)
    if pending:
        passed = validate_days(pending)
        reasons.update({day: None if passed.get(day) else
                        "failed validation in this run (quarantined)" for day in pending})
    used, left_out, forced = [], [], []
    for day in days:
        if day == span:
            used.append(day)
        elif day in not_delivered:
            left_out.append({"span": day, "reason": not_delivered[day]})
        elif reasons[day] is None:
            used.append(day)
        elif day in include:
            used.append(day)
            forced.append({"span": day, "reason": reasons[day]})
        else:
            left_out.append({"span": day, "reason": reasons[day]})
    return {"used": used, "left_out": left_out, "included_by_override": forced}


def _not_delivered(raw_root: str | None, day: str) -> str | None:
    if not raw_root or "://" in raw_root:   # a remote root: the job checks it
        return None
    marker = os.path.join(paths.partition(raw_root, day), "_SUCCESS")
    return None if os.path.exists(marker) else f"not delivered: no {marker}"


# A day no run has validated, and one validated before content digests were recorded
# (nothing binds those bytes to the verdict, so it is validated again, which records it).
_NEVER, _NO_DIGEST = "never validated", "passed, with no content digest"


def _recorded_reason(day: str, history_root: str, quarantine_dir: str) -> str | None:
    """Why the records leave `day` out (None: its last validation passed); _NEVER or
    _NO_DIGEST: only validating it now can tell."""
    marker = marker_path(quarantine_dir, paths.partition_name(day))
    if marker.exists():
        try:
            info = json.loads(marker.read_text())
        except (OSError, ValueError):
            info = {}
        return (f"quarantined: failed validation in run {info.get('run_id')} "
                f"({'; '.join(info.get('failed') or []) or 'see ' + str(marker)})")
    last = latest_validation(history_root, day)
    if last is None:
        return _NEVER
    gate = last.get("gate")
    if gate == "passed":
        return None if last.get("content") else _NO_DIGEST
    if gate == "overridden":
        return (f"failed validation; its gate was overridden for run {last.get('run_id')} "
                f"only ({last.get('override_reason')!r})")
    return f"its last validation ended {gate!r}"


def left_out_spans(upstream: dict) -> list[str]:
    """For spec builders: the days of the window the preprocessing job must skip."""
    return [item["span"] for item in (upstream.get("window") or {}).get("left_out", [])]


def policy(screened: dict, span: str, *, max_left_out_percent: float,
           raw_root: str | None = None) -> dict:
    """The window policy's verdict on a `screen` answer: {"ok", "window_days", "counted",
    "before_log", "left_out" (the counted ones, {"span", "reason"}), "allowed",
    "max_left_out_percent", "rule"}. `counted`: the window's days from the raw log's first
    delivered day on (a local `raw_root`; else every day of the window)."""
    items = list(screened.get("left_out") or [])
    n_days = len(screened.get("used") or []) + len(items)
    start = _log_start(raw_root)
    before = [i["span"] for i in items if start and i["span"] < start
              and _not_delivered(raw_root, i["span"])]
    left_out = [i for i in items if i["span"] not in before]
    counted = n_days - len(before)
    allowed = math.floor(counted * max_left_out_percent / 100 + 1e-9)
    span_out = any(i["span"] == span for i in left_out)
    rule = (f"at most {max_left_out_percent:g} % of the window's {counted} day(s) "
            f"(max_left_out_percent, rounded down: {allowed}) may be left out, never the "
            f"span {span}")
    return {"ok": len(left_out) <= allowed and not span_out, "window_days": n_days,
            "counted": counted, "before_log": before, "left_out": left_out,
            "allowed": allowed, "max_left_out_percent": max_left_out_percent, "rule": rule}


def enforce(verdict: dict, span: str) -> None:
    """Raise WindowTooShort, naming the days, their reasons and the rule, when the verdict
    says the run may not train on what is left."""
    if verdict["ok"]:
        return
    left_out, counted = verdict["left_out"], verdict["counted"]
    need = math.ceil(100 * len(left_out) / counted) if counted else 100
    days = "; ".join(f"{i['span']} ({i['reason']})" for i in left_out)
    raise WindowTooShort(
        f"window policy: {len(left_out)} of the {counted} day(s) of the window ending "
        f"{span} are left out, more than the policy allows ({verdict['rule']}): {days}. "
        "Not retried (the days stay bad until a person acts): to train anyway, name them "
        "in include_spans with override_validation_reason, or run with "
        f"max_left_out_percent >= {need}")


def _log_start(raw_root: str | None) -> str | None:
    """The first delivered day (`dt=D/_SUCCESS`) of a local raw root; None: a remote root,
    or none delivered."""
    if not raw_root or "://" in raw_root:
        return None
    try:
        names = sorted(n for n in os.listdir(raw_root)
                       if n.startswith(paths.PARTITION_PREFIX))
    except OSError:
        return None
    for name in names:
        if os.path.exists(os.path.join(raw_root, name, "_SUCCESS")):
            return name.removeprefix(paths.PARTITION_PREFIX)
    return None
