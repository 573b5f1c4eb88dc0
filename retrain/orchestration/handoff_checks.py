"""The DAG tasks' side of design rule 19 (hand-offs are bound by content): what a task
consumes is checked against what the task before it recorded, by the digest of the bytes.

Why apart from `retrain.orchestration.custody` (which computes, records and compares the
digests): these checks speak Airflow, turning a mismatch into a failure without retry
(AirflowFailException) and returning the lineage references the stage records. Used by
validate (the span and older days), preprocess (the window), train (the examples) and
evaluate (the held-out raw rows).

Stdlib + airflow.sdk's exceptions at import; custody and lineage inside the functions.
"""
from __future__ import annotations

from pathlib import Path

from airflow.sdk.exceptions import AirflowFailException

from retrain.common.run_context import RunContext
from retrain.orchestration.tracked_stage import raw_ref_or_fail


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
