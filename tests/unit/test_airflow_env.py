"""Airflow's own environment holds no ML library, and tasks hand steps to the ML one.

The Airflow components (scheduler, dag-processor, triggerer, api-server, Celery workers)
run from requirements-airflow.lock; a step runs with RETRAIN_STEP_PYTHON. The live stack
test (tests/integration/test_airflow_ui.py) checks the running processes; these check the
lock and the launcher's choice of interpreter.
"""
from __future__ import annotations

import importlib
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from retrain.orchestration import launch

REPO = Path(__file__).resolve().parents[2]
ML_ONLY = ("tensorflow", "tensorflow-transform", "tfx-bsl", "apache-beam",
           "great-expectations", "keras", "keras-hub", "tf-keras")


def _pins(lock: Path) -> dict[str, str]:
    pins = {}
    for line in lock.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def test_the_airflow_lock_has_no_ml_library_and_agrees_with_the_ml_lock():
    airflow, ml = _pins(REPO / "requirements-airflow.lock"), _pins(REPO / "requirements.lock")
    assert airflow["apache-airflow"] == ml["apache-airflow"] == "3.3.2"
    assert {"apache-airflow-providers-celery", "apache-airflow-providers-postgres",
            "celery", "redis"} <= set(airflow)
    assert not set(ML_ONLY) & set(airflow), set(ML_ONLY) & set(airflow)
    # Both environments run the DAG files and task code: shared packages, same versions.
    differ = {name: (v, ml[name]) for name, v in airflow.items() if name in ml and ml[name] != v}
    assert not differ, differ


def test_every_requirement_of_the_airflow_env_is_locked():
    wanted = [line.split("==")[0].strip().lower() for line in
              (REPO / "requirements-airflow.in").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert wanted and set(wanted) <= set(_pins(REPO / "requirements-airflow.lock"))


def test_steps_run_with_the_configured_interpreter(monkeypatch, tmp_path):
    monkeypatch.delenv(launch.STEP_PYTHON_ENV, raising=False)
    assert launch.step_python() == sys.executable
    monkeypatch.setenv(launch.STEP_PYTHON_ENV, "/bin/sh")
    assert launch.step_python() == "/bin/sh"


def test_a_step_runs_in_the_named_interpreter(monkeypatch, tmp_path):
    """A wrapper interpreter that records its use: the step went through it."""
    marker = tmp_path / "used"
    wrapper = tmp_path / "ml-python"
    wrapper.write_text(f"#!/bin/sh\necho used > {marker}\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv(launch.STEP_PYTHON_ENV, str(wrapper))
    with pytest.raises(launch.StepFailed):
        # A module that does not exist: the child (through the wrapper) fails, as it should.
        launch.run_step("components.no_such_step", {})
    assert marker.read_text().strip() == "used"


def test_a_bad_interpreter_setting_says_what_to_fix(monkeypatch, tmp_path):
    monkeypatch.setenv(launch.STEP_PYTHON_ENV, str(tmp_path / "missing" / "python"))
    with pytest.raises(FileNotFoundError, match="RETRAIN_STEP_PYTHON=.*ML environment"):
        launch.step_python()


def test_a_worker_is_recorded_under_its_own_host_name(monkeypatch):
    from retrain.orchestration import hostname
    monkeypatch.setenv(hostname.HOSTNAME_ENV, "10.213.7.11")
    assert hostname.task_host() == "10.213.7.11"
    monkeypatch.delenv(hostname.HOSTNAME_ENV)
    import socket
    assert hostname.task_host() == socket.getfqdn()


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    out = subprocess.run(["bash", "-c", "source scripts/airflow-env.sh && env -0"], cwd=REPO,
                         env={"PATH": "/usr/bin:/bin",
                              "RETRAIN_AIRFLOW_HOME": str(tmp_path / "home"), **extra},
                         capture_output=True, text=True, check=True).stdout
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def test_a_sqlite_writer_waits_30_s_for_the_lock(tmp_path):
    """sqlite3 gives up after 5 s; on a loaded machine the API server then answered a
    Trigger with HTTP 500 "database is locked" (retrain/orchestration/sqlite_db.py)."""
    env = _env(tmp_path)
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("sqlite:///")
    for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC"):
        module, name = env[key].rsplit(".", 1)     # what Airflow's conf.getimport reads
        args = getattr(importlib.import_module(module), name)
        with sqlite3.connect(tmp_path / "db.sqlite", **args) as conn:
            assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000


def test_another_database_gets_no_sqlite_arguments(tmp_path):
    env = _env(tmp_path, AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg2://h/db")
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS" not in env
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC" not in env
