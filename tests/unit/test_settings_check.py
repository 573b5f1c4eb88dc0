"""`retrain settings check` (issue 45, item 8): every bad setting on its own line naming its
variable and rule, exit 1; a misspelt RETRAIN_* variable is a warning; a value a script keeps
secret is never shown. And a bad schedule, seen where the DAG is built, names its setting."""
from __future__ import annotations

import pytest

from retrain.cli import main
from retrain.common.errors import ConfigError


def _clean(monkeypatch):
    import os
    for name in list(os.environ):
        if name.startswith("RETRAIN_"):
            monkeypatch.delenv(name)


def test_each_bad_setting_is_printed_naming_its_variable(monkeypatch, capsys):
    _clean(monkeypatch)
    monkeypatch.setenv("RETRAIN_PUBLISH_DEADLINE_HOURS", "1e308")
    monkeypatch.setenv("RETRAIN_SCHEDULE", "every day")
    monkeypatch.setenv("RETRAIN_HOME", "var")
    monkeypatch.setenv("RETRAIN_RAW_ROOT", "data/raw")
    monkeypatch.setenv("RETRAIN_SCHEDUEL", "@daily")          # misspelt
    monkeypatch.setenv("RETRAIN_ADMIN_PASSWORD", "never-shown-77")
    assert main(["settings", "check"]) == 1
    err = capsys.readouterr().err
    for variable in ("RETRAIN_PUBLISH_DEADLINE_HOURS=1e308", "RETRAIN_SCHEDULE=every day",
                     "RETRAIN_HOME=var", "RETRAIN_RAW_ROOT=data/raw"):
        assert f"retrain settings: {variable}:" in err, variable
    assert "warning: RETRAIN_SCHEDUEL: not a setting" in err
    assert "never-shown-77" not in err and "RETRAIN_ADMIN_PASSWORD" not in err
    assert "4 bad setting(s)" in err


def test_good_settings_pass(monkeypatch, capsys, tmp_path):
    _clean(monkeypatch)
    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path))
    monkeypatch.setenv("RETRAIN_SCHEDULE", "30 2 * * *")
    assert main(["settings", "check"]) == 0
    assert "ok" in capsys.readouterr().out


def test_a_step_python_that_is_not_executable_is_named(monkeypatch, capsys, tmp_path):
    _clean(monkeypatch)
    monkeypatch.setenv("RETRAIN_STEP_PYTHON", str(tmp_path / "missing" / "python"))
    assert main(["settings", "check"]) == 1
    assert "RETRAIN_STEP_PYTHON=" in capsys.readouterr().err


def test_the_cli_builds_with_bad_settings(monkeypatch, capsys):
    # Building the parser reads no setting, so `retrain --help` and the check itself work.
    monkeypatch.setenv("RETRAIN_HOME", "var")
    from retrain.cli import build_parser
    build_parser()


def test_a_bad_schedule_where_the_dag_is_built_names_the_setting(monkeypatch):
    from retrain.orchestration import dag_defaults
    monkeypatch.setenv("RETRAIN_SCHEDULE", "0 25 * * *")
    with pytest.raises(ConfigError, match=r"RETRAIN_SCHEDULE=0 25 \* \* \*: not a valid cron"):
        dag_defaults.daily()


def test_a_huge_deadline_is_named_not_an_overflow(monkeypatch):
    from retrain.orchestration import alerts
    monkeypatch.setenv("RETRAIN_PUBLISH_DEADLINE_HOURS", "1e308")
    with pytest.raises(ConfigError, match="RETRAIN_PUBLISH_DEADLINE_HOURS=1e308"):
        alerts.publish_deadline()
