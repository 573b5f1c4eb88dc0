"""Chain of custody inside the real `ctr_daily_retrain` DAG (`dag.test()`, SQLite): what
was validated is what trains.

The attacker of issue "Chain of custody" rewrote a span's part file after it passed
validation (every row `hour=25`) and an older window day (`device=toaster`), keeping
`_SUCCESS` and the files' mtimes; preprocess, train, evaluate and push all succeeded and a
model was published. Here the same rewrites happen with real files between real tasks:
the run fails in preprocess (bad data: one try), names the day and the file, quarantines
the day, and nothing is trained or published.
"""
from __future__ import annotations

import datetime as dt
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from retrain.common import window
from components.ctr.generate import GenerateSpec, run as generate

from dag_helpers import environ, load_dag, task_states, try_number

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc


@pytest.fixture(scope="module")
def custody_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("custody-home")
    generate(GenerateSpec(out_root=str(home), start="2026-11-01", days=3, rows_per_day=2000,
                          n_users=2000, n_items=1000, n_categories=20))
    with environ(RETRAIN_HOME=str(home), RETRAIN_SPAN_POKE_SECONDS="1"):
        yield home


def _rewrite(part, column: str, value) -> None:
    """Every row's `column` set to `value`; the file's mtime kept (what `touch -r` does)."""
    st = part.stat()
    table = pq.read_table(part)
    i = table.schema.get_field_index(column)
    table = table.set_column(i, table.schema.field(i), pa.array([value] * table.num_rows,
                                                                table.schema.field(i).type))
    pq.write_table(table, part)
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))


def _assert_stopped_in_preprocess(run, home, day: str, file: str) -> None:
    states = task_states(run)
    assert states["validate"] == "success", states
    assert states["preprocess"] == "failed", states
    assert all(states[t] == "upstream_failed" for t in ("train", "evaluate", "push")), states
    assert try_number(run, "preprocess") == 1          # bad data: never retried
    assert not (home / "registry" / "ctr").exists()     # nothing published
    marker = json.loads((home / "quarantine" / "ctr" / f"dt={day}.json").read_text())
    assert marker["run_id"] == run.run_id
    assert any(f"{file} changed" in line for line in marker["failed"]), marker


def test_data_changed_after_validation_never_trains(airflow_home, custody_home, monkeypatch):
    dag = load_dag("ctr_daily_retrain", "ctr_daily_retrain_custody").ctr_daily_retrain()
    raw = custody_home / "raw" / "ctr"

    # 1. The span is rewritten after its validation passed, just before preprocess reads it.
    real_screen = window.screen

    def attacker_then_screen(*args, **kwargs):
        _rewrite(raw / "dt=2026-11-02" / "part-00000.parquet", "hour", 25)
        return real_screen(*args, **kwargs)

    monkeypatch.setattr(window, "screen", attacker_then_screen)
    run = dag.test(logical_date=dt.datetime(2026, 11, 3, tzinfo=UTC),
                   run_conf={"window_days": 2})
    _assert_stopped_in_preprocess(run, custody_home, "2026-11-02", "part-00000.parquet")
    monkeypatch.setattr(window, "screen", real_screen)

    # 2. An older window day, validated by that run, is rewritten before the next run.
    _rewrite(raw / "dt=2026-11-01" / "part-00000.parquet", "device", "toaster")
    run = dag.test(logical_date=dt.datetime(2026, 11, 4, tzinfo=UTC),
                   run_conf={"window_days": 3})
    _assert_stopped_in_preprocess(run, custody_home, "2026-11-01", "part-00000.parquet")
