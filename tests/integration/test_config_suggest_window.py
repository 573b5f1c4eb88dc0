"""`retrain config suggest` on two outside logs (design rule 16): it reads the window a
DAG run validates, says which days it read, never proposes the event time as a feature,
and every day it read passes the real CTR validation with the config it wrote, as the
DAG's validate task runs it over a window's days (`components.ctr.validate_window`, each
day compared with the one before it).

Issue 46: fitted on the 7 newest days, a 60-day rating log then failed validation on 30
of them (allowed values and row counts from one week, the timestamp a feature), and a
one-row day was quarantined for "click rate 0" although the config allowed one-row days.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from components.ctr import feature_config
from outside_logs import income_log, rating_log
from retrain import cli


def _suggest(capsys, raw, out, *args) -> list[str]:
    assert cli.main(["config", "suggest", "--raw-root", str(raw), "--out", str(out),
                     *args]) == 0
    return capsys.readouterr().err.splitlines()


def validate_every_day(raw, config, home) -> dict:
    """{day folder name: outcome} of the DAG's window validation over every day under
    `raw`, oldest first, with a history root (drift, overlap and row-count rules run)."""
    from components.ctr import validate, validate_window
    from components.window_validation import WindowValidateSpec

    days = sorted(p for p in raw.glob("dt=*") if (p / "_SUCCESS").exists())
    specs = [dataclasses.asdict(validate.ValidateSpec(
        span_dir=str(d), out_dir=str(home / "runs" / d.name / "r1" / "validation"),
        history_root=str(home / "runs"), quarantine_dir=str(home / "quarantine"),
        feature_config=str(config), run_id="r1", data_docs=False)) for d in days]
    done = validate_window.run(WindowValidateSpec(days=specs, out_dir=str(home / "window")))
    return {d.name: o for d, o in zip(days, done["days"])}


def _failures(outcomes: dict) -> dict:
    return {day: o["error"][:300] for day, o in outcomes.items() if "error" in o}


@pytest.mark.parametrize("log, days, event_time, label", [
    (income_log, 30, "applied_at", "high_income"),
    (rating_log, 60, "timestamp", "liked"),
])
def test_suggested_config_passes_validation_on_every_day_it_read(tmp_path, capsys, log, days,
                                                                 event_time, label):
    raw, out = tmp_path / "raw", tmp_path / "suggested.yaml"
    folders = log(raw)
    assert len(folders) == days
    err = _suggest(capsys, raw, out)
    # every delivered day read (the default window is the longest a run may ask for: 60)
    first, last = folders[0].name, folders[-1].name
    assert any(f"read {days} day(s), {first} .. {last}" in line for line in err), err
    assert any("of the 60 days asked for are delivered" in line for line in err) == (days < 60)
    text = out.read_text()
    assert f"read {days} day(s), {first} .. {last}" in text.splitlines()[0]
    cfg = feature_config.load(out)
    assert cfg.label == label
    # the event time is recognised, said so, declared, and never a feature
    assert event_time not in {f.name for f in cfg.features}
    assert event_time in dict(cfg.validation.extra_columns)
    assert f"Event time: column {event_time!r} reads as the event time" in text
    assert any(f"column {event_time!r} reads as the event time" in line for line in err)

    outcomes = validate_every_day(raw, out, tmp_path / "home")
    assert len(outcomes) == days
    assert _failures(outcomes) == {}


def test_a_shorter_window_says_which_days_it_left_out(tmp_path, capsys):
    raw = tmp_path / "raw"
    folders = rating_log(raw)
    err = _suggest(capsys, raw, tmp_path / "week.yaml", "--window-days", "7")
    assert any(f"read 7 day(s), {folders[-7].name} .. {folders[-1].name}" in line
               for line in err), err
    warning = [line for line in err if "older delivered day(s)" in line]
    assert warning and f"53 older delivered day(s) before {folders[-7].name}" in warning[0]
    assert "# WARNING: 53 older delivered day(s)" in (tmp_path / "week.yaml").read_text()


def test_a_one_row_day_is_not_quarantined_for_its_click_rate(tmp_path, capsys):
    """MovieLens holds one rating on 1997-11-04 (not liked): a click rate of 0 on one row
    tells nothing, so the fitted bounds stay live and the day passes; its report keeps
    its real rate beside the one the rule judged."""
    raw, out = tmp_path / "raw", tmp_path / "suggested.yaml"
    folders = rating_log(raw, days=30, last=dt.date(1997, 11, 20))
    one = raw / "dt=1997-11-04"
    assert one in folders
    _suggest(capsys, raw, out)
    cfg = feature_config.load(out)
    low = cfg.validation.threshold("min_label_rate")
    assert low > 0.1 and cfg.validation.threshold("min_rows") <= 1

    outcomes = validate_every_day(raw, out, tmp_path / "home")
    assert _failures(outcomes) == {}
    report = json.loads((tmp_path / "home" / "runs" / one.name / "r1" / "validation"
                         / "validation.json").read_text())
    assert report["rows"] == 1 and report["click_rate"] == 0
    table = report["statistics_table"]
    assert table["click_rate"] == 0 and table["click_rate_judged"] == low
