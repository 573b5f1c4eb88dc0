"""`retrain demo` end to end, twice on the same home: the second run must work on the
leftovers of the first and leave the registry consistent."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retrain.common.registry import Registry

pytestmark = pytest.mark.integration

RETRAIN = str(Path(sys.executable).with_name("retrain"))


def _demo(home: Path, runs: int = 2) -> subprocess.CompletedProcess:
    # Tiny world: 3 days, 2 daily runs through a real scheduler (retrain.orchestration.local_airflow) on
    # the test AIRFLOW_HOME (inherited from tests/conftest.py through the environment).
    return subprocess.run([RETRAIN, "demo", "--home", str(home), "--days", "3",
                           "--rows-per-day", "8000", "--runs", str(runs), "--window-days", "2"],
                          capture_output=True, text=True, timeout=1200)


def test_demo_runs_twice_and_keeps_the_registry_consistent(airflow_home, tmp_path):
    first = _demo(tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    # The logs end yesterday: the day a scheduled run waits for once the DAG is unpaused.
    today = dt.datetime.now(dt.timezone.utc).date()
    days = [(today - dt.timedelta(days=n)).isoformat() for n in (2, 1)]
    for text in (f"span {days[0]}", f"span {days[1]}", "validated", "processed", "Bayes-opt.",
                 "blessed", "registry", "make ui"):
        assert text in first.stdout, f"summary lacks {text!r}:\n{first.stdout[-3000:]}"

    _every_task_has_its_log_and_a_real_duration(tmp_path)
    # The text DAG's form has data too: the same days of the bundled reviews.
    text_days = sorted(p.parent.name for p in (tmp_path / "raw" / "text").glob("dt=*/_SUCCESS"))
    assert text_days == [f"dt={d}" for d in [(today - dt.timedelta(days=3)).isoformat(), *days]]

    second = _demo(tmp_path, runs=1)      # one run again is enough to test the leftovers
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "skipped" in second.stdout.lower()          # the existing days were reused

    registry = Registry(tmp_path / "registry")
    if "ctr" in registry.models():
        assert registry.check("ctr") == []
        versions = registry.list_versions("ctr")
        assert sum(v["stage"] == "published" for v in versions) == 1
        for v in versions:
            vdir = registry.model_path("ctr", v["version"])
            assert (vdir / "saved_model.pb").exists() and (vdir / "variables").is_dir()
            assert v["run_id"] and v["dag_id"] == "ctr_daily_retrain"
        # "Which data and code made the serving model?" answered from the demo's output.
        lineage = subprocess.run([RETRAIN, "lineage", "ctr", "--root", str(tmp_path / "registry")],
                                 capture_output=True, text=True, timeout=120)
        assert lineage.returncode == 0, lineage.stderr
        current = registry.current("ctr")
        for text in ("raw_span dt=", current["run_id"], current["code_version"], "fp="):
            assert text in lineage.stdout, f"lineage lacks {text!r}:\n{lineage.stdout}"
    # Three DAG runs (the last day twice), each with its own artifact folder and summary.
    summaries = list((tmp_path / "runs" / "ctr").glob("dt=*/*/run_summary.json"))
    assert len(summaries) == 3
    assert len({json.loads(p.read_text())["run_id"] for p in summaries}) == 3


def _every_task_has_its_log_and_a_real_duration(home: Path) -> None:
    """What `make ui` shows for the demo's runs: each task's log in the UI's log folder,
    and run and task times of the run itself (not the logical date's). No warning or error
    in any task's log, but one: the gate's refusal of the second run's candidate, when the
    rules it failed all compare it with the model the first run published (`_a_verdict`)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        runs = [r for r in session.query(DagRun).filter(DagRun.dag_id == "ctr_daily_retrain")
                if r.note and r.note.startswith("retrain demo")]
        assert len(runs) >= 2
        for run in runs[-2:]:
            assert run.state == "success", run
            assert 0 < (run.end_date - run.start_date).total_seconds() < 3600
            assert run.start_date >= run.queued_at    # when it ran, not its logical date
            tis = run.get_task_instances(session=session)
            assert {ti.task_id for ti in tis} == {
                "resolve_span", "wait_for_span", "validate", "preprocess", "train",
                "wait_for_turn", "evaluate", "approve", "push"}
            for ti in tis:
                logs = list((Path(os.environ["AIRFLOW_HOME"]) / "logs" / "dag_id=ctr_daily_retrain"
                             / f"run_id={run.run_id}" / f"task_id={ti.task_id}").glob("*.log"))
                assert logs and logs[0].stat().st_size > 0, (run.run_id, ti.task_id)
                assert ti.duration is not None and ti.duration < 3600, ti
                loud = [line for log in logs for line in _loud_lines(log)
                        if not (ti.task_id == "push" and _a_verdict(line, home, run.run_id))]
                assert not loud, f"{run.run_id} {ti.task_id}: {loud[:5]}"


# How push logs a candidate the gate did not bless (retrain.orchestration.dag_defaults).
REFUSED = "warning retrain.dag: push skipped: candidate not blessed: "


def _a_verdict(line: str, home: Path, run_id: str) -> bool:
    """The push's refusal of a candidate whose failed rules all compare it with the
    published model (each has a `baseline`): at 8,000 rows a day two trainings differ by
    more than the paired interval of their difference, so a second model confidently worse
    than the first (e.g. `not_worse_log_loss`, +0.005 [+0.0015, +0.0091]) is a verdict the
    gate is right to give. An absolute or evidence rule failing, or no such record, is not."""
    from retrain.common import paths

    if not line.startswith(REFUSED):
        return False
    (record,) = home.glob(f"runs/ctr/dt=*/{paths.safe_run_id(run_id)}/evaluation/eval.json")
    rules = json.loads(record.read_text())["decision"]["rules"]
    failed = [r for r in rules if not r["passed"]]
    return bool(failed) and all(r.get("baseline") is not None for r in failed)


# Warnings a clean run logs on purpose, about the data (none in the demo's generated days).
DATA_WARNINGS: tuple[str, ...] = ()


def _loud_lines(log: Path) -> list[str]:
    """The WARNING/ERROR/CRITICAL lines of a task log (Airflow 3 writes one JSON record a
    line), less the data warnings above: a clean run has none (benign lines are INFO)."""
    loud = []
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            loud.append(f"not a log record: {line[:120]}")
            continue
        event = str(record.get("event"))
        if record.get("level") in ("warning", "error", "critical") and not any(
                w in event for w in DATA_WARNINGS):
            loud.append(f"{record.get('level')} {record.get('logger')}: {event[:160]}")
    return loud
