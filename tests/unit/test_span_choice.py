"""Which day a run trains on when no span is given: a manual run takes the newest delivered
day when the day before its logical date is not there (the Trigger form as opened, after
`make demo`); scheduled and backfill runs keep waiting for the day before."""
from __future__ import annotations

import datetime as dt

import pytest

from retrain.common.spans import latest_delivered, span_for_run

UTC = dt.timezone.utc
TRIGGERED = dt.datetime(2026, 12, 3, 9, 30, tzinfo=UTC)      # the form's logical date: now


def deliver(root, *days, marker=True):
    for day in days:
        d = root / f"dt={day}"
        d.mkdir(parents=True)
        (d / "part-0.csv").write_text("x\n")
        if marker:
            (d / "_SUCCESS").write_text("")


def test_a_manual_run_without_span_takes_the_newest_delivered_day_and_says_why(tmp_path):
    deliver(tmp_path, "2026-11-05", "2026-11-07", "2026-11-06")
    deliver(tmp_path, "2026-11-08", marker=False)           # still being written
    (tmp_path / "dt=not-a-day").mkdir()
    (tmp_path / "notes.txt").write_text("")
    span, why = span_for_run(None, TRIGGERED, TRIGGERED, "manual", str(tmp_path))
    assert span == dt.date(2026, 11, 7)
    assert "newest delivered" in why and "2026-12-02" in why


def test_the_day_before_wins_when_it_is_delivered(tmp_path):
    deliver(tmp_path, "2026-12-01", "2026-12-02")
    assert span_for_run(None, TRIGGERED, None, "manual", str(tmp_path))[0] == dt.date(2026, 12, 2)


def test_a_day_after_the_day_before_is_never_taken(tmp_path):
    deliver(tmp_path, "2026-11-01", "2026-11-09")
    logical = dt.datetime(2026, 11, 5, tzinfo=UTC)
    assert span_for_run(None, logical, None, "manual", str(tmp_path))[0] == dt.date(2026, 11, 1)


@pytest.mark.parametrize("run_type", ["scheduled", "backfill", "asset_triggered"])
def test_scheduled_and_backfill_runs_wait_for_the_day_before(tmp_path, run_type):
    deliver(tmp_path, "2026-11-07")
    span, why = span_for_run(None, TRIGGERED, None, run_type, str(tmp_path))
    assert span == dt.date(2026, 12, 2) and run_type in why


def test_an_explicit_span_is_waited_for_even_when_missing(tmp_path):
    deliver(tmp_path, "2026-11-07")
    assert span_for_run("2026-12-01", TRIGGERED, None, "manual", str(tmp_path)) == (
        dt.date(2026, 12, 1), "the span param")


def test_a_remote_root_is_not_listed(tmp_path):
    assert span_for_run(None, TRIGGERED, None, "manual", "gs://bucket/raw")[0] == dt.date(2026, 12, 2)


def test_nothing_delivered_refuses_the_run_naming_the_folder(tmp_path):
    deliver(tmp_path, "2026-11-07", marker=False)
    with pytest.raises(ValueError, match=f"nothing to train on.*{tmp_path}"):
        span_for_run(None, TRIGGERED, None, "manual", str(tmp_path))
    with pytest.raises(ValueError, match="nothing to train on"):
        span_for_run(None, TRIGGERED, None, "manual", str(tmp_path / "missing"))


def test_latest_delivered_of_an_empty_or_missing_root_is_none(tmp_path):
    assert latest_delivered(str(tmp_path)) is None
    assert latest_delivered(str(tmp_path / "missing")) is None
