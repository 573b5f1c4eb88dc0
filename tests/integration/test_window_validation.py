"""A window's unvalidated older days are validated in one pass, and every day still gets
the verdict, report and quarantine a one-step-per-day validation gives it.

The pass (`components.{ctr,text}.validate_window`) is run next to the per-day path on the
same raw days: a day broken on purpose fails in both with the same rules, the others pass
with the same expectations (drift against the day before included), each day's report is
in its own folder, and only the broken days are quarantined. A part that cannot be read
makes the shared statistics pass fall back to day by day, so that day alone fails.
"""
from __future__ import annotations

import datetime as dt
import json
import shutil

import pandas as pd
import pytest

from components.ctr import features as F
from components.ctr import validate as ctr_validate
from components.ctr import validate_window as ctr_window
from components.ctr.generate import GenerateSpec, run as generate
from components.text import load
from components.text import validate as text_validate
from components.text import validate_window as text_window
from components.window_validation import SUMMARY_FILE, WindowValidateSpec
from retrain.common.errors import ValidationFailed
from retrain.common.quarantine import marker_path

pytestmark = pytest.mark.integration

START, DAYS = dt.date(2026, 9, 1), 5
BROKEN = "2026-09-03"          # no clicks logged: fails click_rate


def _days(n=DAYS):
    return [(START + dt.timedelta(days=i)).isoformat() for i in range(n)]


@pytest.fixture(scope="module")
def ctr_raw(tmp_path_factory):
    root = tmp_path_factory.mktemp("window-ctr")
    generate(GenerateSpec(out_root=str(root), start=START.isoformat(), days=DAYS,
                          rows_per_day=2000, n_users=3000, n_items=1000, n_categories=20))
    raw = root / "raw" / "ctr"
    part = raw / f"dt={BROKEN}" / "part-00000.parquet"
    df = pd.read_parquet(part)
    df[F.LABEL_KEY] = 0
    df.to_parquet(part)
    return raw


def _ctr_spec(raw, home, day, run_id):
    return {"span_dir": str(raw / f"dt={day}"),
            "out_dir": str(home / "runs" / f"dt={day}" / run_id / "validation"),
            "history_root": str(home / "runs"), "quarantine_dir": str(home / "quarantine"),
            "run_id": run_id}


def _verdict(report: dict) -> dict:
    return {"gate": report["gate"], "rows": report["rows"],
            "failed": sorted(f["rule"] for f in report["failed"]),
            "rules": sorted(r["rule"] for r in report["results"])}


def test_ctr_window_pass_gives_each_day_its_per_day_verdict(ctr_raw, tmp_path):
    one_by_one, in_one_pass = tmp_path / "per-day", tmp_path / "pass"
    expected = {}
    for day in _days():
        spec = ctr_validate.ValidateSpec(**_ctr_spec(ctr_raw, one_by_one, day, "r1"))
        try:
            ctr_validate.run(spec)
        except ValidationFailed:
            pass
        expected[day] = _verdict(json.loads(
            (one_by_one / "runs" / f"dt={day}" / "r1" / "validation" /
             ctr_validate.SUMMARY_FILE).read_text()))
    assert expected[BROKEN]["gate"] == "failed" and "click_rate" in expected[BROKEN]["failed"]
    # the days after the first are judged against the day before (drift rules exist)
    assert any(r.startswith("drift:") for r in expected[_days()[1]]["rules"])

    result = ctr_window.run(WindowValidateSpec(
        days=[_ctr_spec(ctr_raw, in_one_pass, d, "r2") for d in _days()],
        out_dir=str(in_one_pass / "window")))
    assert result["seconds"]["shared_stats_pass"] is True
    outcomes = dict(zip(_days(), result["days"]))
    for day in _days():
        folder = in_one_pass / "runs" / f"dt={day}" / "r2" / "validation"
        report = json.loads((folder / ctr_validate.SUMMARY_FILE).read_text())
        assert _verdict(report) == expected[day], day
        assert ("error" in outcomes[day]) == (day == BROKEN)
        assert marker_path(in_one_pass / "quarantine", f"dt={day}").exists() == (day == BROKEN)
        # Data Docs for the day a person must read; every result is in gx_result.json
        assert (folder / "data_docs" / "index.html").exists() == (day == BROKEN), day
        assert (folder / ctr_validate.GX_RESULT_FILE).exists()
    assert "click_rate" in outcomes[BROKEN]["error"]
    written = json.loads((in_one_pass / "window" / SUMMARY_FILE).read_text())
    assert (written["passed"], written["failed"]) == (DAYS - 1, 1)


def test_an_unreadable_part_fails_its_day_alone(ctr_raw, tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(ctr_raw, raw)
    corrupt = "2026-09-02"
    (raw / f"dt={corrupt}" / "part-00000.parquet").write_bytes(b"PAR1 not really parquet")
    days = ["2026-09-01", corrupt, "2026-09-04"]
    result = ctr_window.run(WindowValidateSpec(
        days=[_ctr_spec(raw, tmp_path, d, "r3") for d in days],
        out_dir=str(tmp_path / "window")))
    assert result["seconds"]["shared_stats_pass"] is False    # fell back to day by day
    outcomes = dict(zip(days, result["days"]))
    assert "result" in outcomes["2026-09-01"] and "result" in outcomes["2026-09-04"]
    assert outcomes[corrupt]["error_kind"] == "bad_data"
    assert "part-00000.parquet" in outcomes[corrupt]["error"]
    assert "not really" not in outcomes[corrupt]["error"]     # names the file, not its bytes
    assert marker_path(tmp_path / "quarantine", f"dt={corrupt}").exists()


def test_text_window_pass_gives_each_day_its_per_day_verdict(tmp_path):
    load.run(load.LoadTextSpec(out_root=str(tmp_path), start="2026-11-01", days=3,
                               max_rows_per_day=80))
    raw = tmp_path / "raw" / "text"
    part = raw / "dt=2026-11-02" / "part-00000.parquet"
    df = pd.read_parquet(part)
    df.loc[:9, "text"] = ""                                   # empty texts
    df.to_parquet(part)
    days = ["2026-11-01", "2026-11-02", "2026-11-03"]

    def spec(day, home):
        return {"span_dir": str(raw / f"dt={day}"),
                "out_dir": str(home / f"dt={day}" / "validation"),
                "quarantine_dir": str(home / "quarantine"), "run_id": "r1"}

    expected = {}
    for day in days:
        try:
            expected[day] = text_validate.run(
                text_validate.TextValidateSpec(**spec(day, tmp_path / "per-day")))["gate"]
        except ValidationFailed:
            expected[day] = "failed"
    assert expected == {"2026-11-01": "passed", "2026-11-02": "failed",
                        "2026-11-03": "passed"}
    home = tmp_path / "pass"
    result = text_window.run(WindowValidateSpec(days=[spec(d, home) for d in days],
                                                out_dir=str(home / "window")))
    for day, outcome in zip(days, result["days"]):
        report = json.loads((home / f"dt={day}" / "validation" /
                             text_validate.SUMMARY_FILE).read_text())
        before = json.loads((tmp_path / "per-day" / f"dt={day}" / "validation" /
                             text_validate.SUMMARY_FILE).read_text())
        assert report["gate"] == expected[day]
        assert [f["rule"] for f in report["failed"]] == [f["rule"] for f in before["failed"]]
        assert ("error" in outcome) == (expected[day] == "failed")
        assert marker_path(home / "quarantine", f"dt={day}").exists() == (day == "2026-11-02")
