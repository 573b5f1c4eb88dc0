"""The admin password never reaches stdout or stderr (issue 45, item 10: `make ui` and
`retrain stack up` printed it, so it landed in CI and terminal logs). Both code paths that
announce the credentials run here; their output names the password's file, the file has
mode 600, and the password appears nowhere in what they print."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retrain.orchestration import stack as S

ROOT = Path(__file__).resolve().parents[2]
PLANTED = "Planted-Admin-Pw-93417"


def _ui(tmp_path, **env) -> subprocess.CompletedProcess:
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "RETRAIN_"))}
    keep["VENV"] = str(Path(sys.executable).parent.parent)
    return subprocess.run(["scripts/airflow-ui.sh", "--check-only"], cwd=ROOT, text=True,
                          capture_output=True, timeout=120,
                          env={**keep, "RETRAIN_AIRFLOW_HOME": str(tmp_path / "ah"), **env})


def test_make_ui_prints_the_password_file_never_the_password(tmp_path):
    run = _ui(tmp_path, RETRAIN_ADMIN_PASSWORD=PLANTED)
    assert run.returncode == 0, run.stderr
    pwfile = tmp_path / "ah" / "simple_auth_manager_passwords.json.generated"
    assert PLANTED in pwfile.read_text()
    assert pwfile.stat().st_mode & 0o777 == 0o600
    assert str(pwfile) in run.stdout
    assert PLANTED not in run.stdout + run.stderr


def test_a_generated_password_is_not_printed_and_an_old_wide_file_is_narrowed(tmp_path):
    run = _ui(tmp_path)
    pwfile = tmp_path / "ah" / "simple_auth_manager_passwords.json.generated"
    generated = json.loads(pwfile.read_text())["admin"]
    assert run.returncode == 0 and generated not in run.stdout + run.stderr
    pwfile.chmod(0o644)                       # a file from before this rule
    run = _ui(tmp_path)
    assert run.returncode == 0 and generated not in run.stdout + run.stderr
    assert pwfile.stat().st_mode & 0o777 == 0o600


def test_make_ui_checks_the_settings_before_starting_anything(tmp_path):
    run = _ui(tmp_path, RETRAIN_SCHEDULE="every day", RETRAIN_HOME="var")
    assert run.returncode == 1
    assert "RETRAIN_SCHEDULE=every day" in run.stderr and "RETRAIN_HOME=var" in run.stderr
    assert not (tmp_path / "ah" / "simple_auth_manager_passwords.json.generated").exists()


def test_stack_up_prints_the_password_file_never_the_password(tmp_path, monkeypatch, capsys):
    root = tmp_path / "stack"
    seen = {}

    def fake_up(self, install=False, timeout=240):
        S._secret(self.root, "admin_password", lambda: PLANTED)
        seen["passwords"] = self.write_passwords_file()
        return self

    monkeypatch.setattr(S.Stack, "up", fake_up)
    monkeypatch.setattr(S.Stack, "status", lambda self: {"api-server": "running"})
    assert S.main(["up", "--root", str(root), "--retrain-home", str(tmp_path / "home"),
                   "--no-install"]) == 0
    out = capsys.readouterr()
    secret = root / "secrets" / "admin_password"
    assert secret.read_text() == PLANTED and str(secret) in out.out
    assert PLANTED not in out.out + out.err
    for path in (secret, seen["passwords"]):
        assert path.stat().st_mode & 0o777 == 0o600, path
    assert PLANTED in seen["passwords"].read_text()


def test_stack_up_checks_the_settings_its_airflow_gets(tmp_path):
    st = S.Stack(S.StackSpec(root=str(tmp_path / "stack"), retrain_home=str(tmp_path / "h"),
                             ml_python=sys.executable, subnet="10.213.251",
                             env={"RETRAIN_PUBLISH_DEADLINE_HOURS": "1e308"}))
    with pytest.raises(S.StackError) as e:
        st.check_settings(python=sys.executable)
    assert "RETRAIN_PUBLISH_DEADLINE_HOURS=1e308" in str(e.value)
    ok = S.Stack(S.StackSpec(root=str(tmp_path / "stack2"), retrain_home=str(tmp_path / "h"),
                             ml_python=sys.executable, subnet="10.213.251"))
    assert ok.check_settings(python=sys.executable) == []
