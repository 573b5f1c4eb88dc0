"""Which day of data a run trains on.

Airflow 3's `@daily` (a CronTriggerTimetable) gives an empty data interval and a manual
run may have no logical date at all, so the span is derived here, explicitly and the
same way for scheduled, manual and backfill runs: an explicit `span` param wins;
otherwise the day before the run's logical date (or, failing that, its run_after).

A manual run with no `span` whose day before has not been delivered trains on the newest
delivered day before it instead (`span_for_run`), and says so: the Trigger form as opened
runs on data that is there instead of waiting 12 hours for a day nobody will export.
Scheduled and backfill runs keep "the day before" (they wait for it: that is their job).
"""
from __future__ import annotations

import datetime as dt
import os

from retrain.common import paths


def derive_span(
    span_param: str | None,
    logical_date: dt.datetime | None,
    run_after: dt.datetime | None = None,
) -> dt.date:
    if span_param:
        try:
            return dt.date.fromisoformat(str(span_param))
        except ValueError as e:
            raise ValueError(f"span param must be YYYY-MM-DD, got {span_param!r}") from e
    anchor = logical_date or run_after
    if anchor is None:
        raise ValueError("cannot derive a span: no span param, logical date or run_after")
    return anchor.date() - dt.timedelta(days=1)


def span_for_run(span_param: str | None, logical_date: dt.datetime | None,
                 run_after: dt.datetime | None, run_type, raw_root: str) -> tuple[dt.date, str]:
    """The run's span and, in words, why that day (for the task log and the run context).

    Raises ValueError when a manual run has no span and its local `raw_root` holds no
    delivered day on or before the day before (nothing to train on: say so now)."""
    span = derive_span(span_param, logical_date, run_after)
    if span_param:
        return span, "the span param"
    kind = getattr(run_type, "value", run_type)
    if kind != "manual" or "://" in raw_root or _delivered(raw_root, span):
        return span, f"the day before the run's logical date ({kind or 'run'})"
    latest = latest_delivered(raw_root, on_or_before=span)
    if latest is None:
        raise ValueError(
            f"nothing to train on: no delivered day (dt=YYYY-MM-DD/_SUCCESS) on or before "
            f"{span} under raw_root {raw_root}. Deliver a day there, point raw_root at "
            "your data, or give a span to wait for.")
    return latest, (f"the newest delivered day: {span}, the day before the logical date, "
                    "is not delivered and no span was given")


def latest_delivered(raw_root: str, on_or_before: dt.date | None = None) -> dt.date | None:
    """The newest delivered day of a local `raw_root` (optionally not after
    `on_or_before`); None when there is none."""
    days = [d for d in delivered_days(raw_root) if on_or_before is None or d <= on_or_before]
    return days[-1] if days else None


def delivered_days(raw_root: str | os.PathLike) -> list[dt.date]:
    """Every `dt=YYYY-MM-DD` folder of a local `raw_root` with its `_SUCCESS` marker,
    oldest first (none when the folder does not exist)."""
    try:
        names = os.listdir(raw_root)
    except OSError:
        return []
    days = []
    for name in names:
        if not name.startswith(paths.PARTITION_PREFIX):
            continue
        try:
            day = dt.date.fromisoformat(name.removeprefix(paths.PARTITION_PREFIX))
        except ValueError:
            continue
        if _delivered(str(raw_root), day):
            days.append(day)
    return sorted(days)


def _delivered(raw_root: str, day: dt.date) -> bool:
    return os.path.isfile(os.path.join(paths.partition(raw_root, day), "_SUCCESS"))


def window(span: dt.date, days: int, exclude=()) -> list[dt.date]:
    """The `days` spans ending at `span`, oldest first, less the `exclude`d ones (days whose
    validation did not let them through; the span itself can never be left out)."""
    if days < 1:
        raise ValueError(f"window_days must be at least 1 day, got {days}")
    if span in set(exclude):
        raise ValueError(f"the span {span} itself cannot be excluded from its window")
    skip = set(exclude)
    return [d for d in (span - dt.timedelta(days=i) for i in range(days - 1, -1, -1))
            if d not in skip]


def span_list(text: str) -> list[dt.date]:
    """`--exclude-spans 2026-11-01,2026-11-03` -> dates (argparse type)."""
    return [dt.date.fromisoformat(x.strip()) for x in text.split(",") if x.strip()]


def is_shadow(shadow_param: bool | None, run_type: str | None) -> bool:
    """Shadow runs rebuild data, train and evaluate but never publish.

    Backfills are shadow runs unless the user opts in (shadow=False), so re-running old
    days never replaces the serving model nor triggers asset-driven consumers.
    """
    if shadow_param is not None:
        return bool(shadow_param)
    return getattr(run_type, "value", run_type) == "backfill"  # Airflow's DagRunType value
