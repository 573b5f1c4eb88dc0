"""`retrain demo` end to end, twice on the same home: the second run must work on the
leftovers of the first and leave the registry consistent."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.registry import Registry

pytestmark = pytest.mark.integration

RETRAIN = str(Path(sys.executable).with_name("retrain"))


def _demo(home: Path) -> subprocess.CompletedProcess:
    # Tiny world: 3 days, 2 daily runs of `airflow dags test` against the test AIRFLOW_HOME
    # (inherited from tests/conftest.py through the environment).
    return subprocess.run([RETRAIN, "demo", "--home", str(home), "--days", "3",
                           "--rows-per-day", "8000", "--runs", "2", "--window-days", "2"],
                          capture_output=True, text=True, timeout=1200)


def test_demo_runs_twice_and_keeps_the_registry_consistent(airflow_home, tmp_path):
    first = _demo(tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for text in ("span 2026-11-02", "span 2026-11-03", "validated", "processed", "Bayes-opt.",
                 "blessed", "registry", "make ui"):
        assert text in first.stdout, f"summary lacks {text!r}:\n{first.stdout[-3000:]}"

    second = _demo(tmp_path)
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
    # Four DAG runs, each with its own artifact folder and summary.
    summaries = list((tmp_path / "runs" / "ctr").glob("dt=*/*/run_summary.json"))
    assert len(summaries) == 4
    assert len({json.loads(p.read_text())["run_id"] for p in summaries}) == 4
