"""Deployment settings are read in one place: every RETRAIN_* variable the code names is a
field of retrain.common.settings.Settings (or a family descriptor's param default), a bad
value names its variable and rule, and docs/configuration.md lists every one."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from retrain.common.errors import ConfigError
from retrain.common.settings import Settings, env_name, settings
from retrain.orchestration.families import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
# Not settings: the launcher's own hand-off to its child (the parent's pid), and variables
# of the shell scripts / compose files that set up Airflow itself (`retrain settings check`
# names the scripts' ones so that it does not report them as unknown).
INTERNAL = {"RETRAIN_STEP_PARENT_PID", "RETRAIN_AIRFLOW_HOME", "RETRAIN_ADMIN_PASSWORD",
            "RETRAIN_OPENLINEAGE_URL", "RETRAIN_"}


def _named_in_code() -> set[str]:
    found = set()
    for package in ("retrain", "components", "beam_jobs", "dags"):
        for path in (ROOT / package).rglob("*.py"):
            found.update(re.findall(r"RETRAIN_[A-Z0-9_]*", path.read_text()))
    return found


def test_every_variable_the_code_names_is_a_setting_or_a_family_default():
    fields = {env_name(f) for f in Settings.model_fields}
    family = {v for f in FAMILIES.values() for v in (f.raw_root_env, f.config_env)}
    unknown = _named_in_code() - fields - family - INTERNAL
    assert not unknown, f"read outside retrain.common.settings: {sorted(unknown)}"


def test_no_module_but_settings_parses_a_setting_from_the_environment():
    reads = re.compile(r"""os\.(?:environ\.get|getenv)\(\s*["']RETRAIN_|"""
                       r"""os\.environ\[["']RETRAIN_\w*["']\](?!\s*=[^=])""")
    offenders = []
    for package in ("retrain", "components", "beam_jobs"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name != "settings.py" and reads.search(path.read_text()):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_the_configuration_page_lists_every_setting():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert [env_name(f) for f in Settings.model_fields if env_name(f) not in page] == []


@pytest.mark.parametrize("variable, value, rule", [
    ("RETRAIN_SPAN_POKE_SECONDS", "0", "greater than 0"),
    ("RETRAIN_MAX_WINDOW_DAYS", "lots", "valid integer"),
    ("RETRAIN_STEP_LAUNCHER", "ssh", "'subprocess' or 'kubernetes'"),
    ("RETRAIN_STEP_NODE_SELECTOR", "{not json", "JSON"),
])
def test_a_bad_value_names_its_variable_and_rule(monkeypatch, variable, value, rule):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as e:
        settings()
    assert f"{variable}={value}" in str(e.value) and rule.lower() in str(e.value).lower()


def test_empty_or_padded_values_mean_the_default_or_the_value(monkeypatch):
    monkeypatch.setenv("RETRAIN_SCHEDULE", "")
    monkeypatch.setenv("RETRAIN_STEP_LAUNCHER", "  kubernetes ")
    monkeypatch.setenv("RETRAIN_STEP_RESOURCES", '{"limits": {"nvidia.com/gpu": 1}}')
    s = settings()
    assert s.schedule == "@daily" and s.step_launcher == "kubernetes"
    assert s.step_resources == {"limits": {"nvidia.com/gpu": 1}}


def test_run_inputs_names_the_variables_of_the_settings_it_reads():
    # run_inputs imports the settings (and pydantic) only when it reads one, so a step
    # process that never does (the CTR preprocessing job) does not pay for the import.
    from retrain.common import run_inputs
    assert run_inputs.DATA_ROOTS_ENV == env_name("allowed_data_roots")
    assert run_inputs.CONFIG_ROOTS_ENV == env_name("config_roots")


# Issue 45, item 8: every field bounded, each bad value named with its rule (never a bare
# OverflowError, never a DAG import error that names no setting, never a silent relative path).
@pytest.mark.parametrize("variable, value, rule", [
    ("RETRAIN_PUBLISH_DEADLINE_HOURS", "1e308", "less than or equal to 87840"),
    ("RETRAIN_PUBLISH_DEADLINE_HOURS", "inf", "finite"),
    ("RETRAIN_MODEL_MAX_AGE_HOURS", "nan", "finite"),
    ("RETRAIN_MODEL_MAX_AGE_HOURS", "-1", "greater than or equal to 0"),
    ("RETRAIN_SPAN_POKE_SECONDS", "inf", "finite"),
    ("RETRAIN_MAX_WINDOW_DAYS", "999999999999", "less than or equal to 3660"),
    ("RETRAIN_MAX_FUTURE_DAYS", "1000000000", "less than or equal to 3660"),
    ("RETRAIN_MAX_ACTIVE_RUNS", "100000000000000000000", "less than or equal to 1000"),
    ("RETRAIN_MAX_CONFIG_BYTES", "10", "greater than or equal to 65536"),
    ("RETRAIN_SCHEDULE", "every day", "5 fields"),
    ("RETRAIN_SCHEDULE", "61 * * * *", "not a valid cron expression"),
    ("RETRAIN_SCHEDULE", "@dayly", "unknown preset"),
    ("RETRAIN_SCHEDULE", "0 0 * * * *", "5 fields"),
    ("RETRAIN_HOME", "var", "absolute path"),
    ("RETRAIN_STEP_PYTHON", ".venv/bin/python", "absolute path"),
    ("RETRAIN_DOCS_ASSETS", "share/docs", "absolute path"),
    ("RETRAIN_CONFIG_ROOTS", "/srv/configs:configs", "absolute path"),
    ("RETRAIN_ALLOWED_DATA_ROOTS", "data", "absolute path"),
    ("RETRAIN_K8S_NAMESPACE", "Team_A", "namespace"),
    ("RETRAIN_ARTIFACT_CLAIM", "my claim", "object name"),
    ("RETRAIN_K8S_API", "kubernetes.default.svc", "http(s)://"),
    ("RETRAIN_HOSTNAME", "worker 1", "host name"),
    ("RETRAIN_STEP_IMAGE", "retrain/ml latest", "image reference"),
    ("RETRAIN_STEP_RESOURCES", "[1, 2]", "valid dictionary"),
])
def test_each_bad_value_names_itself(monkeypatch, variable, value, rule):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as e:
        settings()
    assert f"{variable}={value}" in str(e.value) and rule.lower() in str(e.value).lower()


@pytest.mark.parametrize("schedule", ["none", "None", "@daily", "@weekly", "@once",
                                      "30 2 * * *", "*/15 * * * 1-5", "0 0 1 */3 *"])
def test_schedules_airflow_takes_are_accepted(monkeypatch, schedule):
    monkeypatch.setenv("RETRAIN_SCHEDULE", schedule)
    assert settings().schedule == schedule


def test_continuous_runs_need_one_active_run(monkeypatch):
    monkeypatch.setenv("RETRAIN_SCHEDULE", "@continuous")
    with pytest.raises(ConfigError, match="RETRAIN_MAX_ACTIVE_RUNS=1"):
        settings()
    monkeypatch.setenv("RETRAIN_MAX_ACTIVE_RUNS", "1")
    assert settings().schedule == "@continuous"


def test_every_bad_value_is_reported_at_once_and_a_long_one_only_by_its_start(monkeypatch):
    from retrain.common.settings import problems
    monkeypatch.setenv("RETRAIN_HOME", "relative/" + "x" * 500)
    monkeypatch.setenv("RETRAIN_STEP_NODE_SELECTOR", "{not json")
    monkeypatch.setenv("RETRAIN_PUBLISH_DEADLINE_HOURS", "1e308")
    found = problems()
    assert [p.split("=")[0] for p in found] == ["RETRAIN_HOME", "RETRAIN_PUBLISH_DEADLINE_HOURS",
                                                "RETRAIN_STEP_NODE_SELECTOR"]
    assert "x" * 100 not in found[0] and "(509 characters)" in found[0]


def test_the_config_size_bounds_agree():
    from retrain.common import run_inputs
    from retrain.common import settings as S
    assert run_inputs.MIN_CONFIG_BYTES_LIMIT == S.MIN_CONFIG_BYTES
    assert run_inputs.CONFIG_BYTES_ENV == env_name("max_config_bytes")
