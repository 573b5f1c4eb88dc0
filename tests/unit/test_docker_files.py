"""The container files parse and agree with the repo (no Docker engine here to build them)."""
from __future__ import annotations

import re
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
    assert "components.common.docs_assets fetch" in text   # Data Docs render offline


REPO = DOCKER.parent
_INTERPOLATED = re.compile(r"\$\{(\w+):\?[^}]+\}")      # ${NAME:?message}: required, no default


def test_no_password_is_committed_in_docker_files():
    """Secrets come only from the uncommitted docker/.env: compose interpolates them, the
    template has empty values, and neither git nor the image build context takes .env."""
    spec = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    secret_name = re.compile(r"PASSWORD|SECRET|FERNET|_KEY$|TOKEN")
    needed = set()
    for name, service in spec["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if secret_name.search(key):
                assert _INTERPOLATED.fullmatch(str(value)), f"{name}: {key} is a literal"
                needed.add(_INTERPOLATED.fullmatch(str(value))[1])
        url = (service.get("environment") or {}).get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "")
        if "@" in url:
            password = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
            assert _INTERPOLATED.fullmatch(password), f"{name}: literal password in the DB URL"
            needed.add(_INTERPOLATED.fullmatch(password)[1])
    assert "POSTGRES_PASSWORD" in needed

    template = {}
    for line in (DOCKER / "env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            template[key] = value
    assert set(template) == needed, "docker/env.example lists exactly what compose needs"
    assert all(v == "" for v in template.values()), "the template holds no values"

    # No `password: something` / `SECRET=...` / `user:pass@host` literal in any docker/ file.
    literal = re.compile(r"(?i)(password|secret|fernet_key)\w*\s*[:=]\s*[\"']?(?!\$\{)[^\s\"'#]+"
                         r"|://[^/\s:@]+:(?!\$\{)[^@\s]+@")
    for path in sorted(DOCKER.rglob("*")):
        if path.is_file() and path.name != ".env":
            for line in path.read_text().splitlines():
                if not line.lstrip().startswith("#") and "python3 -c" not in line:
                    bare = _INTERPOLATED.sub("${X}", line)
                    assert not literal.search(bare), f"{path.relative_to(REPO)}: {line.strip()}"

    assert "/docker/.env" in (REPO / ".gitignore").read_text().splitlines()
    assert "docker/.env" in (REPO / ".dockerignore").read_text().splitlines()
