"""Planted secrets never reach a log, an artifact or a lineage record.

An Airflow Connection with a password (`AIRFLOW_CONN_<ID>`, JSON form), an Airflow
Variable and two plain environment variables, each a fresh random token, are in the
environment of a full `ctr_daily_retrain` run (`dag.test()`: every step runs in a child
process that inherits that environment). Afterwards no byte of any file under RETRAIN_HOME
(raw data, run folder, artifacts, metadata and lineage records, registry, reports) or under
the test AIRFLOW_HOME (the OpenLineage event file, the metadata DB with its XComs and
rendered fields, task log files if any) contains a token, nor do the task logs:
`dag.test()` writes them to the console (stdout/stderr, read with capfd) and to Python
logging (caplog), with every step's output relayed line by line by the launcher.
Same data sizes as the cheapest full-DAG CTR test (test_validation_gate_dag.py), one run.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import secrets
from pathlib import Path

import pytest

from components.ctr.generate import GenerateSpec, run as generate

from dag_helpers import environ, load_dag, task_states

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
TOKENS = {name: f"planted{secrets.token_hex(16)}"
          for name in ("connection password", "variable", "AWS_SECRET_ACCESS_KEY",
                       "RETRAIN_TEST_SECRET")}


def _files_with(roots: list[Path], token: bytes) -> list[str]:
    hits = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink() and token in path.read_bytes():
                hits.append(str(path))
    return hits


def test_planted_secrets_leak_nowhere(airflow_home, tmp_path, capfd, caplog):
    home = tmp_path / "retrain-home"
    generate(GenerateSpec(out_root=str(home), start="2026-11-01", days=2, rows_per_day=3000,
                          n_users=3000, n_items=2000, n_categories=40))
    connection = json.dumps({"conn_type": "generic", "host": "warehouse.invalid",
                             "login": "retrain", "password": TOKENS["connection password"]})
    planted = {"AIRFLOW_CONN_RETRAIN_PLANTED": connection,
               "AIRFLOW_VAR_RETRAIN_PLANTED": TOKENS["variable"],
               "AWS_SECRET_ACCESS_KEY": TOKENS["AWS_SECRET_ACCESS_KEY"],
               "RETRAIN_TEST_SECRET": TOKENS["RETRAIN_TEST_SECRET"]}
    with environ(RETRAIN_HOME=str(home), **planted):
        from airflow.sdk import Connection, Variable
        # Planted where tasks would find them (both read here, so the test checks a real secret).
        assert Connection.get("retrain_planted").password == TOKENS["connection password"]
        assert Variable.get("retrain_planted") == TOKENS["variable"]
        dag = load_dag("ctr_daily_retrain", "ctr_daily_retrain_secrets").ctr_daily_retrain()
        run = dag.test(logical_date=dt.datetime(2026, 11, 3, tzinfo=UTC),
                       run_conf={"window_days": 2, "eval_percent": 25, "min_auc": 0.0})
    printed = capfd.readouterr()
    states = task_states(run)
    assert all(s == "success" for s in states.values()), states
    run_dirs = list((home / "runs" / "ctr" / "dt=2026-11-02").iterdir())
    assert len(run_dirs) == 1 and (run_dirs[0] / "run_summary.json").is_file()
    assert any((home / "registry").rglob("*.json")), "the run published"

    leaks = {}
    for name, token in TOKENS.items():
        where = _files_with([home, airflow_home], token.encode())
        where += [s for s, text in (("stdout", printed.out), ("stderr", printed.err),
                                    ("log records", caplog.text)) if token in text]
        if where:
            leaks[name] = where
    assert not leaks, f"planted secrets found in: {leaks}"
    # The scan did see the task logs and the lineage records.
    assert "[DAG TEST] end task task_id=push" in printed.out + caplog.text
    assert "[train]" in caplog.text or "[cluster]" in caplog.text   # a step's relayed output
    events = Path(json.loads(os.environ["AIRFLOW__OPENLINEAGE__TRANSPORT"])["log_file_path"])
    assert run.run_id in events.read_text()
