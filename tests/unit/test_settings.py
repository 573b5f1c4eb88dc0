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
# of the shell scripts / compose files that set up Airflow itself.
INTERNAL = {"RETRAIN_STEP_PARENT_PID", "RETRAIN_AIRFLOW_HOME", "RETRAIN_"}


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
