"""The production-shaped stack's configuration, checked without starting it (that needs
root: tests/integration/test_airflow_ui.py runs it): Celery on PostgreSQL, steps in the ML
environment, and no secret in any process's environment."""
from __future__ import annotations

import sys

from retrain.orchestration import stack as S


def _stack(tmp_path) -> S.Stack:
    spec = S.StackSpec(root=str(tmp_path / "stack"), retrain_home=str(tmp_path / "home"),
                       ml_python=sys.executable, subnet="10.213.250", api_port=18080)
    st = S.Stack(spec)
    for name in ("postgres_password", "fernet_key", "jwt_secret", "api_secret_key"):
        S._secret(st.root, name)
    S._put_secret(st.root, "sql_alchemy_conn", "postgresql+psycopg2://airflow:"
                  f"{(st.root / 'secrets' / 'postgres_password').read_text()}@h/airflow")
    return st


def test_airflow_runs_on_celery_and_postgres_with_steps_in_the_ml_env(tmp_path):
    st = _stack(tmp_path)
    env = st.worker_env(1, st.airflow_env())
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD"].startswith("cat ")
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in env     # not SQLite, not a value
    assert env["RETRAIN_STEP_PYTHON"] == sys.executable
    assert env["RETRAIN_HOSTNAME"] == "10.213.250.11"           # worker 1's own address
    assert env["AIRFLOW__LOGGING__BASE_LOG_FOLDER"] == str(st.worker_logs(1))
    assert env["AIRFLOW__CORE__HOSTNAME_CALLABLE"] == "retrain.orchestration.hostname.task_host"
    assert env["AIRFLOW__API__HOST"] == "10.213.250.1" and env["AIRFLOW__API__PORT"] == "18080"
    assert env["PATH"].startswith(str(S.StackSpec().airflow_venv))   # Airflow's own venv
    assert env["RETRAIN_HOME"] == str(tmp_path / "home")


def test_no_secret_is_in_the_environment_and_secret_files_are_private(tmp_path):
    st = _stack(tmp_path)
    env = st.airflow_env()
    secrets = {p.name: p.read_text() for p in (st.root / "secrets").iterdir()}
    assert len(secrets) >= 5
    for name, value in secrets.items():
        assert not any(value in v for v in env.values()), name
        assert (st.root / "secrets" / name).stat().st_mode & 0o077 == 0, name


def test_a_secret_is_made_once_and_kept(tmp_path):
    first = S._secret(tmp_path, "k").read_text()
    assert S._secret(tmp_path, "k").read_text() == first


def test_the_command_line_says_when_no_stack_is_recorded(tmp_path, capsys):
    from retrain.cli import main
    assert main(["stack", "status", "--root", str(tmp_path)]) == 1
    assert "no stack recorded" in capsys.readouterr().err
    assert main(["stack", "down", "--root", str(tmp_path)]) == 0


def test_extra_settings_reach_every_airflow_process(tmp_path):
    st = _stack(tmp_path)
    st.spec.env = S.parse_env(["RETRAIN_SCHEDULE=none", "AIRFLOW__CELERY__WORKER_CONCURRENCY=4"])
    env = st.airflow_env()
    assert env["RETRAIN_SCHEDULE"] == "none"
    assert env["AIRFLOW__CELERY__WORKER_CONCURRENCY"] == "4"


def test_a_malformed_setting_is_refused_with_its_text():
    import pytest
    with pytest.raises(S.StackError, match="'oops': expected NAME=VALUE"):
        S.parse_env(["oops"])
