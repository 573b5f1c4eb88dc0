"""Bad data never trains a model: which days of a window are used, which are left out and
why (quarantined, overridden for another run only, failing when validated now), and the
override that names days to use anyway."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from retrain.common import window
from retrain.common.quarantine import settle
from retrain.common.spans import span_list, window as days_of


def _validated(root, day, run, gate, reason=None):
    """The validate step's lineage record, as the DAG factory writes it."""
    path = root / "runs" / f"dt={day}" / run / "lineage" / "validate.json"
    path.parent.mkdir(parents=True)
    content = {"digest": f"d-{day}", "files": {"part-0.parquet": f"d-{day}"}}
    path.write_text(json.dumps({"figures": {"gate": gate, "override_reason": reason,
                                            "content": content},
                                "recorded_by": {"run_id": run}}))


def test_only_days_whose_validation_passed_are_used(tmp_path):
    runs, q = tmp_path / "runs", tmp_path / "quarantine"
    _validated(tmp_path, "2026-11-01", "r1", "passed")
    _validated(tmp_path, "2026-11-02", "r2", "overridden", "labels late")
    settle(str(q), span="dt=2026-11-03", span_dir="/raw/dt=2026-11-03", gate="failed",
           run_id="r3", failed=["[click_rate] observed 0"], report="/r")
    asked = []

    def validate_now(days):
        asked.append(days)
        return {day: day == "2026-11-04" for day in days}

    days = ["2026-10-31", "2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05"]
    out = window.screen(days, "2026-11-05", history_root=str(runs), quarantine_dir=str(q),
                        validate_days=validate_now)
    assert out["used"] == ["2026-11-01", "2026-11-04", "2026-11-05"]
    reasons = {i["span"]: i["reason"] for i in out["left_out"]}
    assert set(reasons) == {"2026-10-31", "2026-11-02", "2026-11-03"}
    assert "failed validation in this run" in reasons["2026-10-31"]
    assert "overridden for run r2 only" in reasons["2026-11-02"]
    assert reasons["2026-11-03"].startswith("quarantined: failed validation in run r3")
    assert "click_rate" in reasons["2026-11-03"]
    # only never-validated days, all in one call (one pass, not one step per day)
    assert asked == [["2026-10-31", "2026-11-04"]]

    forced = window.screen(days[2:], "2026-11-05", history_root=str(runs),
                           quarantine_dir=str(q), include=["2026-11-03"],
                           validate_days=lambda ds: dict.fromkeys(ds, True))
    assert forced["used"] == ["2026-11-03", "2026-11-04", "2026-11-05"]
    assert [i["span"] for i in forced["left_out"]] == ["2026-11-02"]
    assert [i["span"] for i in forced["included_by_override"]] == ["2026-11-03"]
    assert window.left_out_spans({"window": out}) == ["2026-10-31", "2026-11-02",
                                                      "2026-11-03"]


def test_window_days_can_be_excluded_but_never_the_span():
    span = dt.date(2026, 11, 5)
    assert days_of(span, 3, span_list("2026-11-04")) == [dt.date(2026, 11, 3), span]
    with pytest.raises(ValueError, match="cannot be excluded"):
        days_of(span, 3, [span])


def test_a_day_never_delivered_is_left_out_not_validated(tmp_path):
    """A 60-day window over a log that began 59 days ago (an outside-data trial: the run
    failed on the missing first day, retried as transient)."""
    raw = tmp_path / "raw"
    for day in ("2026-11-02", "2026-11-03"):
        (raw / f"dt={day}").mkdir(parents=True)
        (raw / f"dt={day}" / "_SUCCESS").touch()
    (raw / "dt=2026-11-01").mkdir()                  # a folder, but never finished
    asked = []
    out = window.screen(["2026-10-31", "2026-11-01", "2026-11-02", "2026-11-03"], "2026-11-03",
                        history_root=str(tmp_path / "runs"), quarantine_dir=str(tmp_path / "q"),
                        validate_days=lambda ds: asked.append(ds) or dict.fromkeys(ds, True),
                        raw_root=str(raw))
    assert out["used"] == ["2026-11-02", "2026-11-03"] and asked == [["2026-11-02"]]
    assert out["left_out"] == [
        {"span": "2026-10-31", "reason": f"not delivered: no {raw}/dt=2026-10-31/_SUCCESS"},
        {"span": "2026-11-01", "reason": f"not delivered: no {raw}/dt=2026-11-01/_SUCCESS"}]


def test_no_call_when_every_older_day_has_a_verdict(tmp_path):
    runs = tmp_path / "runs"
    _validated(tmp_path, "2026-11-01", "r1", "passed")
    out = window.screen(["2026-11-01", "2026-11-02"], "2026-11-02", history_root=str(runs),
                        quarantine_dir=str(tmp_path / "q"),
                        validate_days=lambda ds: pytest.fail(f"validated {ds} again"))
    assert out["used"] == ["2026-11-01", "2026-11-02"]


def test_a_day_the_pass_does_not_answer_for_is_left_out(tmp_path):
    """A pass that returns no verdict for a day (it crashed on it) never lets it in."""
    out = window.screen(["2026-11-01", "2026-11-02", "2026-11-03"], "2026-11-03",
                        history_root=str(tmp_path / "runs"), quarantine_dir=str(tmp_path / "q"),
                        validate_days=lambda ds: {"2026-11-02": True})
    assert out["used"] == ["2026-11-02", "2026-11-03"]
    assert [i["span"] for i in out["left_out"]] == ["2026-11-01"]
