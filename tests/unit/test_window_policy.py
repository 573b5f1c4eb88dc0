"""The window policy (retrain.common.window.policy): how many days of a training window may
be left out before the run fails. The issue's cases (2 of 14 days of a text window, 4 of
30 of a loans window, both trained on and published without a word) are past the
default; days before the raw log began do not count, a gap after it does; a refusal names
the days, their reasons and the rule; the `days_left_out` alert names days and rule ids,
never data. The DAG side (the run goes on / stops, the summary, the Retrain tab) is run in
tests/integration/test_window_policy_dag.py."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from alert_receivers import webhook, webhook_connection
from retrain.common import quarantine, window
from retrain.common.errors import BadData, kind_of
from retrain.common.run_context import RunContext

SPAN = "2026-11-30"
PLANTED = "planted-row-value-7f3a"


def _days(n: int, end: str = SPAN) -> list[str]:
    last = dt.date.fromisoformat(end)
    return [(last - dt.timedelta(days=i)).isoformat() for i in range(n - 1, -1, -1)]


def _screened(n: int, out: list[str], reason: str = "quarantined: failed validation") -> dict:
    days = _days(n)
    return {"used": [d for d in days if d not in out],
            "left_out": [{"span": d, "reason": reason} for d in out],
            "included_by_override": []}


def _raw(tmp_path, delivered: list[str]):
    raw = tmp_path / "raw"
    for day in delivered:
        (raw / f"dt={day}").mkdir(parents=True)
        (raw / f"dt={day}" / "_SUCCESS").touch()
    return raw


@pytest.mark.parametrize("n, out, ok, allowed", [
    (30, 3, True, 3),        # one day in ten may go
    (30, 4, False, 3),       # the loans window that lost 4 of 30
    (14, 1, True, 1),
    (14, 2, False, 1),       # the text window that lost 2 of 14
    (3, 0, True, 0),
    (3, 1, False, 0),        # the default window may lose none: a day is a third of it
    (1, 0, True, 0),
])
def test_the_default_allows_one_day_in_ten_rounded_down(n, out, ok, allowed):
    lost = _days(n)[:out]
    verdict = window.policy(_screened(n, lost), SPAN,
                            max_left_out_percent=window.DEFAULT_MAX_LEFT_OUT_PERCENT)
    assert (verdict["ok"], verdict["allowed"], verdict["counted"]) == (ok, allowed, n)
    assert [i["span"] for i in verdict["left_out"]] == lost


def test_a_refusal_names_the_days_the_reasons_and_the_rule():
    lost = _days(14)[3:5]
    verdict = window.policy(_screened(14, lost, "its last validation ended 'failed'"), SPAN,
                            max_left_out_percent=10)
    with pytest.raises(window.WindowTooShort) as e:
        window.enforce(verdict, SPAN)
    msg = str(e.value)
    assert isinstance(e.value, BadData) and kind_of(e.value) == "bad_data"   # not retried
    for day in lost:
        assert f"{day} (its last validation ended 'failed')" in msg
    assert "2 of the 14 day(s) of the window ending 2026-11-30" in msg
    assert "at most 10 % of the window's 14 day(s)" in msg and "max_left_out_percent" in msg
    assert "include_spans" in msg and "max_left_out_percent >= 15" in msg
    # a run that allows more goes on
    window.enforce(window.policy(_screened(14, lost), SPAN, max_left_out_percent=15), SPAN)


def test_the_span_itself_never_goes():
    verdict = window.policy(_screened(30, [SPAN]), SPAN, max_left_out_percent=100)
    assert not verdict["ok"]


def test_days_before_the_log_began_do_not_count_a_gap_does(tmp_path):
    days = _days(10)
    # the log began on the 5th day of the window; the 8th was never delivered (a gap)
    raw = _raw(tmp_path, [d for i, d in enumerate(days) if i >= 4 and i != 7])
    screened = window.screen(days, SPAN, history_root=str(tmp_path / "runs"),
                             quarantine_dir=str(tmp_path / "q"), raw_root=str(raw),
                             validate_days=lambda ds: dict.fromkeys(ds, True))
    verdict = window.policy(screened, SPAN, raw_root=str(raw), max_left_out_percent=20)
    assert verdict["before_log"] == days[:4]
    assert [i["span"] for i in verdict["left_out"]] == [days[7]]
    assert verdict["counted"] == 6 and verdict["allowed"] == 1 and verdict["ok"]
    # an older delivered day elsewhere in the root: the window's first days are a gap too
    (raw / "dt=2026-10-01").mkdir()
    (raw / "dt=2026-10-01" / "_SUCCESS").touch()
    again = window.policy(screened, SPAN, raw_root=str(raw), max_left_out_percent=20)
    assert again["before_log"] == [] and len(again["left_out"]) == 5 and not again["ok"]


def test_a_remote_root_counts_every_left_out_day():
    verdict = window.policy(_screened(10, _days(10)[:2]), SPAN, raw_root="gs://bucket/raw",
                            max_left_out_percent=10)
    assert verdict["before_log"] == [] and not verdict["ok"]


def test_the_alert_names_days_rules_and_outcome_never_data(tmp_path, monkeypatch):
    from retrain.orchestration import alerts

    ctx = RunContext.create("ctr", SPAN, tmp_path, "manual__window")
    bad = _days(14)[5]
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"failed": [{"rule": "click_rate",
                                              "observed": PLANTED}]}))
    quarantine.settle(ctx.quarantine_dir, span=f"dt={bad}", span_dir="/raw", gate="failed",
                      run_id="scheduled__earlier", failed=[f"click_rate: {PLANTED}"],
                      report=str(report))
    gap = _days(14)[8]
    screened = _screened(14, [bad, gap])
    screened["left_out"][0]["reason"] = f"quarantined: ({PLANTED})"
    screened["left_out"][1]["reason"] = f"not delivered: no /raw/dt={gap}/_SUCCESS"
    verdict = window.policy(screened, SPAN, max_left_out_percent=10)
    with webhook() as (port, received):
        monkeypatch.setenv("AIRFLOW_CONN_RETRAIN_ALERTS", webhook_connection(port))
        assert alerts.window_days_left_out(ctx, "ctr_daily_retrain", verdict)
    [got] = [a for a in received if a["kind"] == "days_left_out"]
    assert (got["run_id"], got["span"]) == ("manual__window", SPAN)
    assert got["details"]["left_out"] == [
        {"span": bad, "why": "quarantined (click_rate)"},
        {"span": gap, "why": f"not delivered: no /raw/dt={gap}/_SUCCESS"}]
    assert got["details"]["stopped"] is True and got["details"]["allowed"] == 1
    assert "2 of the 14 day(s)" in got["reason"] and "run is stopped" in got["reason"]
    assert PLANTED not in json.dumps(got)
