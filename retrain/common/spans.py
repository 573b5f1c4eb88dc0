"""Which day of data a run trains on.

Airflow 3's `@daily` (a CronTriggerTimetable) gives an empty data interval and a manual
run may have no logical date at all, so the span is derived here, explicitly and the
same way for scheduled, manual and backfill runs: an explicit `span` param wins;
otherwise the day before the run's logical date (or, failing that, its run_after).
"""
from __future__ import annotations

import datetime as dt


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
