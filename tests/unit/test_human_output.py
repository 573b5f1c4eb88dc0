"""What people read is short and fits a screen; what machines read is `--json` (issue 46).

`retrain registry show` (a screen, the whole record with --json), `retrain lineage` (wrapped
to the terminal), the approval request in Airflow's Required Actions (a few lines, links not
server paths), the demo's summary (every line <= 100 characters) and `retrain plan`'s
stage table (one unit a column). Each on realistic, long inputs: run ids with microseconds,
paths under deep temporary folders, a gate with many rules.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from retrain import cli, plan as P
from retrain.common import screen
from retrain.common.registry import Registry
from retrain.orchestration import lineage_graph, ui_links
from retrain.orchestration.approval import request_body
from retrain.orchestration.demo import format_summary
from retrain.orchestration.lineage_query import render

RUN_ID = "manual__2026-12-05T23:12:55.183165+00:00"
DEEP = "/tmp/pytest-of-root/pytest-0/test_a_person_approves_or_reje0/approval-home"
RUN_DIR = f"{DEEP}/runs/ctr/dt=2026-11-03/manual__2026-12-05T23_12_55.183165_00_00"


def _rules(n_slices: int = 20) -> list[dict]:
    rules = [{"name": "min_auc", "observed": 0.7359, "limit": 0.999, "passed": False},
             {"name": "min_eval_rows", "observed": 2981, "limit": 200, "passed": True},
             {"name": "max_auc_drop", "observed": -0.0011, "limit": -0.002, "passed": True,
              "baseline": 0.737}]
    return rules + [{"name": f"slice_auc[category=c{i}]", "observed": 0.0, "limit": -0.03,
                     "passed": True, "baseline": 0.7} for i in range(n_slices)]


def _meta() -> dict:
    """A published version's metadata as push writes it: long paths, a lineage copy,
    a forced gate with a failed rule, an approval (the registry adds digests and history)."""
    rules = _rules()
    return {
        "metrics": {"auc": 0.7359, "log_loss": 0.1716, "n": 2981, "positives": 139,
                    "ci": {"level": 0.95, "auc": {"low": 0.6951, "high": 0.7811},
                           "log_loss": {"low": 0.1516, "high": 0.1989}}},
        "baseline_metrics": {"auc": 0.6953, "log_loss": 0.1774},
        "headline": ["auc", "log_loss"], "data_span": "2026-11-03", "run_id": RUN_ID,
        "dag_id": "ctr_daily_retrain", "code_version": "git:09795c26ed68-dirty",
        "gate": {"blessed": True, "forced": True, "force_reason": "operator override " * 6,
                 "baseline_present": True, "rules": rules,
                 "reasons": [f"rule {r['name']}: a long line " * 8 for r in rules],
                 "thresholds": {"max_auc_drop": 0.002}},
        "approval": {"asked": True, "decision": "approved", "by": "alice",
                     "reason": "looks right", "answered_at": "2026-12-05T23:14:27+00:00"},
        "serving_check": {"passed": True, "max_abs_diff": 0.0,
                          "latency": {"1": {"p99_ms": 0.70}, "256": {"p99_ms": 0.58}}},
        "validation_gate": {"outcome": "passed", "override_reason": None},
        "run_dir": RUN_DIR, "report_uri": f"{RUN_DIR}/evaluation/report.html",
        "source_model_uri": f"{RUN_DIR}/model/serving_model",
        "lineage": {f"step{i}": {"uri": f"{RUN_DIR}/step{i}", "figures": {"x": i} | {
            f"k{j}": "v" * 40 for j in range(20)}} for i in range(8)},
    }


@pytest.fixture
def published(tmp_path) -> Path:
    model = tmp_path / "export"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"")
    (model / "variables" / "variables.index").write_text("m")
    Registry(tmp_path / "registry").publish(model, "ctr", _meta())
    return tmp_path / "registry"


def test_registry_show_is_a_screen_and_json_the_whole_record(published, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")     # a wide terminal: the screen stays at 100
    assert cli.main(["registry", "--root", str(published), "show", "ctr", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record == Registry(published).get("ctr", 1)
    assert record["lineage"] and record["content"]["files"]          # the whole record

    assert cli.main(["registry", "--root", str(published), "show", "ctr"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert len(lines) <= 40 and max(map(len, lines)) <= 100, text
    assert lines[0] == "ctr version 1  [published, serving]"
    flat = " ".join(text.split())
    for needle in ("span 2026-11-03", RUN_ID, "git:09795c26ed68-dirty",
                   record["model_digest"][:12], "auc 0.7359 (95% 0.6951..0.7811)",
                   "on 2,981 eval rows, 139 positives", "baseline auc 0.6953",
                   f"22 of {len(_rules())} rules pass", "failed min_auc",
                   "approved by alice", "evaluation/report.html", "add --json"):
        assert needle in flat, (needle, text)
    assert "v" * 40 not in text and "sha256" not in text          # no lineage, no digests


def test_lineage_wraps_to_the_terminal_and_shortens_paths(published, capsys, monkeypatch):
    tree = {"name": "ctr v3", "type": "registered_model", "uri": f"{DEEP}/registry/ctr/3",
            "stage": "published", "current": True, "producer": {"dag_id": "d", "run_id": RUN_ID},
            "code_version": "git:abc", "data_span": "2026-11-03",
            "figures": {"auc": 0.7, "log_loss": 0.2},
            "inputs": [{"name": "train", "type": "model", "fingerprint": "a" * 16,
                        "uri": f"{RUN_DIR}/model/serving_model",
                        "producer": {"dag_id": "ctr_daily_retrain", "run_id": RUN_ID,
                                     "task_id": "train", "try": 1},
                        "figures": {"window": [f"2026-11-{d:02d}" for d in range(1, 29)],
                                    "content": {"digest": "d" * 32, "files": {
                                        f"part-{i}": "f" * 64 for i in range(9)}},
                                    "report_uri": f"{RUN_DIR}/evaluation/report.html",
                                    "latency": {"1": {"p99_ms": 0.7}}},
                        "inputs": [{"name": "dt=2026-11-03", "type": "raw_span",
                                    "fingerprint": "b" * 32,
                                    "uri": f"file://{DEEP}/raw/ctr/dt=2026-11-03"}]}]}
    for width in (60, 80, 100, 140):
        text = render(tree, width)
        assert max(len(line) for line in text.splitlines()) <= width, (width, text)
        flat = " ".join(text.split())
        for needle in ("ctr v3", RUN_ID, "fp=" + "a" * 16, "dt=2026-11-03", "d" * 32):
            assert needle in flat.replace("/ ", "/"), (needle, width, text)
    text = render(tree, 100)
    assert f"home      {DEEP}" in text                     # named once...
    assert "runs/ctr/dt=2026-11-03/" in text and text.count(DEEP) == 2   # ...and the registry
    assert "f" * 64 not in text                               # a file's digests fold away

    monkeypatch.setenv("COLUMNS", "64")
    assert cli.main(["lineage", "ctr", "--root", str(published)]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 64, out
    assert cli.main(["lineage", "ctr", "--root", str(published), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "ctr v1"


def test_the_lineage_graph_scales_to_the_page():
    svg = lineage_graph.svg({"name": "ctr v1", "type": "registered_model", "fingerprint": "r",
                             "inputs": [{"name": "m", "type": "model", "fingerprint": "m"}]},
                            lambda n: None)
    width, height = re.search(r'width="(\d+)" height="(\d+)"', svg).groups()
    assert f'viewBox="0 0 {width} {height}"' in svg
    assert 'style="max-width:100%;height:auto"' in svg


def test_the_approval_request_is_short_with_links_not_server_paths(tmp_path):
    run_dir = tmp_path / "home" / "runs" / "ctr" / "dt=2026-11-03" / "manual__x"
    for rel in ("evaluation/report.html", "validation/data_docs/index.html"):
        (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / rel).write_text("<html></html>")
    links = ui_links.run_reports("ctr_daily_retrain", RUN_ID, run_dir,
                                 str(run_dir / "evaluation" / "report.html"))
    evaluation = {"candidate": {"auc": 0.7359, "log_loss": 0.1716},
                  "baseline": {"auc": 0.737, "log_loss": 0.1711}, "baseline_version": 4,
                  "blessed": True, "report_uri": str(run_dir / "evaluation" / "report.html"),
                  "reasons": [f"slice c{i}: a long reason " * 5 for i in range(40)]}
    decision = {"rules": _rules()[1:]}
    for why in ("the run asks for approval of every blessed candidate",
                "borderline: passed max_auc_drop only within the rule's allowance"):
        body = request_body("ctr", "2026-11-03", why, evaluation, decision, links, 24)
        assert len(body) <= 650, (len(body), body)
        visible = re.sub(r"\]\([^)]*\)", "]", body)            # what the person reads
        assert len(visible) <= 450 and max(map(len, visible.splitlines())) <= 100, visible
        assert str(tmp_path) not in body and "/tmp/" not in body
        base = "/retrain/runs/ctr_daily_retrain/" + RUN_ID
        assert f"[Report]({base}/files/evaluation/report.html)" in body
        assert f"[Data Docs]({base}/files/validation/data_docs/index.html)" in body
        assert f"[Retrain tab]({base})" in body
        assert "candidate: auc 0.7359, log_loss 0.1716" in body
        assert "published v4: auc 0.7370, log_loss 0.1711" in body
        assert f"{len(decision['rules'])} of {len(decision['rules'])} rules pass" in body
        assert "max_auc_drop" in body and "24 h" in body


def _run(**over) -> dict:
    s = {"ok": True, "seconds": 95, "span": "2026-11-03", "run_id": RUN_ID,
         "log": f"{DEEP}/airflow_home/logs/dag_id=ctr_daily_retrain/run_id={RUN_ID}",
         "validation": {"rows": 50_000, "n_failed": 0},
         "preprocess": {"rows_in": 150_000, "window": ["a", "b", "c"], "rows_train": 100_000,
                        "rows_eval": 30_000, "rows_per_second": 4321},
         "evaluation": {"candidate": {"auc": 0.7359, "log_loss": 0.1716},
                        "baseline": {"auc": 0.6953, "log_loss": 0.1774},
                        "bayes_optimal": {"auc": 0.7674, "log_loss": 0.1655}, "blessed": True,
                        "failed_rules": [],
                        "reasons": [f"slice c{i}: pass " * 10 for i in range(30)]
                        + ["blessed: all 31 rules pass"]},
         "published": {"version": 2}}
    return {**s, **over}


def test_the_demo_summary_is_a_few_short_lines_a_run(tmp_path):
    runs = [_run(published=None, evaluation={**_run()["evaluation"], "blessed": False,
                                             "baseline": None, "failed_rules": ["min_auc"],
                                             "reasons": ["not blessed: failed rules min_auc"]}),
            _run(), _run(published=None, unchanged={"version": 2}),
            {"ok": False, "seconds": 12, "span": "2026-11-04", "run_id": RUN_ID,
             "log": f"{DEEP}/airflow_home/logs/dag_id=ctr_daily_retrain/run_id={RUN_ID}"}]
    text = format_summary(runs, tmp_path)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 100, text
    assert len(lines) <= 8 * len(runs) + 10, text
    for needle in ("span 2026-11-03", "validated", "processed", "Bayes-opt.", "blessed",
                   "not published: not blessed", "published as ctr v2",
                   "unchanged: identical to ctr v2", "FAILED", "make ui", "registry",
                   "/retrain/runs/ctr_daily_retrain/"):
        assert needle in text, needle
    assert "slice c" not in text                     # the rules' lines stay in the report


def _stage_rows(text: str) -> tuple[list[str], list[list[str]]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("stage "))
    header = re.split(r"\s{2,}", lines[start].strip())
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        if not line.startswith(" "):        # an "if distributed" note is indented
            rows.append(re.split(r"\s{2,}", line.strip()))
    return header, rows


@pytest.mark.parametrize("kw", [{}, {"rows_per_day": 10**9},
                                {"rows_per_day": 10**10, "deadline_hours": 2}])
def test_plan_columns_hold_one_unit_each(kw):
    header, rows = _stage_rows(P.render(P.plan(P.PlanSpec(**kw))))
    assert header == ["stage", "share (h)", "machines", "machine kind", "est. wall (s)",
                      "of share"]
    number = re.compile(r"^(\d[\d,]*\.?\d*|-)$")
    assert [r[0] for r in rows] == ["preprocess", "train", "evaluate", "total"]
    for r in rows:
        share, wall = r[1], r[-2]
        assert number.match(share) and number.match(wall), r        # no unit in a cell
        assert re.match(r"^(<1%|\d+%|-)$", r[-1]), r
    total = rows[-1]
    assert float(total[1]) == pytest.approx(kw.get("deadline_hours", 24), abs=0.01)


def test_help_names_json_for_the_commands_that_print_for_people(capsys):
    for argv in (["registry", "show", "--help"], ["lineage", "--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        assert "--json" in capsys.readouterr().out, argv


def test_fit_keeps_every_word_and_the_width():
    text = "a " * 30 + "/very/long/path/" * 12 + " end"
    for width in (40, 72, 100):
        lines = screen.fit(text, width, "  label  ", " " * 11)
        assert max(map(len, lines)) <= width
        assert "".join("".join(line.split()) for line in lines).replace("label", "") == \
            "".join(text.split())
