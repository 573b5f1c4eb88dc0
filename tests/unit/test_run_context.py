"""The run context is pinned once and derives every folder of the run; a spec builder's
answer says what the factory must know (published model read, window days left out)."""
from __future__ import annotations

import datetime as dt
import json

from retrain.common import paths
from retrain.common.run_context import Built, RunContext
from retrain.orchestration.dag_factory import left_out_problem


def test_the_folders_of_a_run_come_from_one_place(tmp_path):
    ctx = RunContext.create("ctr", dt.date(2026, 11, 3), tmp_path, "manual__2026-11-04T00:00")
    assert ctx.span == "2026-11-03"
    assert ctx.raw_root == str(tmp_path / "raw" / "ctr")
    assert ctx.span_dir == str(paths.raw_span_dir(tmp_path, "ctr", dt.date(2026, 11, 3)))
    assert ctx.run_dir == str(paths.run_dir(tmp_path, "ctr", dt.date(2026, 11, 3),
                                            "manual__2026-11-04T00:00"))
    assert ctx.quarantine_dir == f"{tmp_path}/quarantine/ctr"
    assert ctx.history_root == f"{tmp_path}/runs/ctr"
    older = ctx.for_day("2026-11-01")
    assert older.span_dir.endswith("/dt=2026-11-01") and older.run_id == ctx.run_id
    assert older.run_dir == str(paths.run_dir(tmp_path, "ctr", dt.date(2026, 11, 1),
                                              ctx.run_id))


def test_a_url_raw_root_stays_a_url():
    ctx = RunContext.create("ctr", "2026-11-03", "/h", "r", raw_root="gs://logs/ctr/")
    assert ctx.span_dir == "gs://logs/ctr/dt=2026-11-03"
    assert ctx.partition("2026-11-01") == "gs://logs/ctr/dt=2026-11-01"


def test_it_travels_as_json_and_comes_back_equal(tmp_path):
    ctx = RunContext.create("text", "2026-11-03", tmp_path, "r1", config="/c/text.yaml",
                            shadow=True)
    wire = json.loads(json.dumps(ctx.to_xcom()))
    assert wire["span_dir"] == ctx.span_dir and wire["run_dir"] == ctx.run_dir  # shown in the UI
    assert RunContext.from_xcom(wire) == ctx
    assert RunContext.from_xcom(ctx) is ctx


def test_a_builder_answer_says_what_the_window_needs():
    screened = {"left_out": [{"span": "2026-11-02", "reason": "quarantined"}]}
    assert left_out_problem("ctr", Built({"a": 1}, left_out=("2026-11-02",)), screened) is None
    assert left_out_problem("ctr", Built.of({"a": 1}), {"left_out": []}) is None
    plain = left_out_problem("mini", Built.of({"a": 1}), screened)
    assert plain and "mini" in plain and "2026-11-02" in plain
    wrong = left_out_problem("ctr", Built({}, left_out=("2026-11-01",)), screened)
    assert wrong and "2026-11-02" in wrong
    assert Built.of({"x": 1}) == Built({"x": 1}) and not Built.of({"x": 1}).reads_published
