"""The container files parse and agree with the repo (no Docker engine here to build them)."""
from __future__ import annotations

from pathlib import Path

import yaml

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def test_compose_defines_the_local_cluster():
    spec = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = spec["services"]
    assert {"postgres", "migrate", "api-server", "scheduler", "dag-processor"} <= set(services)
    for name in ("api-server", "scheduler", "dag-processor"):
        env = services[name]["environment"]
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
        assert env["RETRAIN_HOME"] == "/data"
        assert services[name]["command"].startswith("airflow ")
    assert services["api-server"]["ports"] == ["127.0.0.1:8080:8080"]


def test_dockerfile_installs_the_locked_stack():
    text = (DOCKER / "Dockerfile").read_text()
    assert "requirements.lock" in text and "FROM python:3.11" in text
    assert "psycopg2" in text   # the compose file's Postgres connection needs it
