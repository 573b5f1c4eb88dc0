"""The local setup's security default: what `make ui` / `make demo` start (SQLite, the
LocalExecutor, scripts/airflow-ui.sh) listens on 127.0.0.1 alone. The log servers, which
bind every interface, are not started (--skip-serve-logs). The production-shaped stack
has its own check (test_airflow_ui.py)."""
from __future__ import annotations

import ipaddress
import os

import psutil
import pytest

from retrain.orchestration.local_airflow import LocalAirflow

pytestmark = pytest.mark.integration


def test_every_local_airflow_socket_listens_on_loopback(tmp_path, monkeypatch):
    for name in [k for k in os.environ if k.startswith("AIRFLOW")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    with LocalAirflow(tmp_path / "home", "ctr_daily_retrain", tmp_path) as af:
        listening = {}
        for p in psutil.Process(af.proc.pid).children(recursive=True):
            try:
                conns, name = p.net_connections(kind="inet"), " ".join(p.cmdline()[:3])
            except psutil.NoSuchProcess:
                continue
            for c in conns:
                if c.status == psutil.CONN_LISTEN:
                    listening[(c.laddr.ip, c.laddr.port)] = name
    assert ("127.0.0.1", af.port) in listening, listening          # the api-server
    exposed = {a: n for a, n in listening.items() if not ipaddress.ip_address(a[0]).is_loopback}
    assert not exposed, f"listening beyond loopback: {exposed}"
