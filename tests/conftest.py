"""Test-session setup: an isolated, throwaway Airflow home for `dag.test()` runs.

Why this file sets environment variables at import time: `import airflow` reads its
configuration once (AIRFLOW_HOME, DB URL, dags folder) and builds the SQLAlchemy engine from
it. pytest imports this conftest before it collects any test module, so setting the
variables here, at module level, is early enough; a `session` fixture would be too late if a
test module imports airflow at top level.

Each pytest process gets its own temporary AIRFLOW_HOME with a SQLite metadata DB; the
developer's `airflow_home/` is never touched. Migrating a fresh SQLite DB costs about 2-5 s
(`airflow.utils.db.initdb()`, ORM create_all + alembic stamp), so the migrated DB is cached
once per Airflow version under `.pytest_cache/airflow-db/` and copied in afterwards
(about 10 ms). Set RETRAIN_TEST_AIRFLOW_DB_CACHE=0 to always migrate from scratch.

Only tests that request the `airflow_home` fixture pay for the DB; unit tests that never
touch Airflow pay nothing (not even `import airflow`, about 1.5-5 s).
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from importlib.metadata import version as _dist_version
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DAGS_FOLDER = REPO_ROOT / "dags"


def _session_home() -> Path:
    # Reuse the home if this module is imported a second time in the same process (e.g. a
    # test doing `from conftest import ...`); a new process (pytest-xdist worker, or any
    # subprocess) gets its own, so two processes never share one SQLite file.
    marker = os.environ.get("_RETRAIN_TEST_AIRFLOW_HOME", "")
    pid, _, path = marker.partition(":")
    if pid == str(os.getpid()) and path:
        return Path(path)
    home = Path(tempfile.mkdtemp(prefix="retrain-test-airflow-home-"))
    os.environ["_RETRAIN_TEST_AIRFLOW_HOME"] = f"{os.getpid()}:{home}"
    return home


_AIRFLOW_HOME = _session_home()
_DB_PATH = _AIRFLOW_HOME / "airflow.db"
_AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(_AIRFLOW_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_DB_PATH}",
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    # dag.test() runs tasks in-process; keep the (unused) executor small anyway.
    "AIRFLOW__CORE__PARALLELISM": "4",
    # OpenLineage events of every dag.test() task, as in scripts/airflow-env.sh.
    "AIRFLOW__OPENLINEAGE__NAMESPACE": "retrain",
    "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({
        "type": "file", "append": True,
        "log_file_path": str(_AIRFLOW_HOME / "openlineage-events.jsonl")}),
}
OPENLINEAGE_EVENTS = _AIRFLOW_HOME / "openlineage-events.jsonl"
# Airflow may already be imported if a plugin pulled it in before this conftest: then its
# configuration points elsewhere and the fixture below refuses to run (see _check_config).
_AIRFLOW_IMPORTED_EARLY = "airflow" in sys.modules
os.environ.update(_AIRFLOW_ENV)
# The tests' spans are fixed calendar days (December 2026 and later), not days relative to
# today, so the deployment's "no span in the future" slack is widened here; its default is
# tested in tests/unit/test_run_inputs.py.
os.environ.setdefault("RETRAIN_MAX_FUTURE_DAYS", "3650")


@pytest.fixture(scope="session", autouse=True)
def _config_roots_include_the_test_temp_folders(tmp_path_factory):
    """Config files a run's param names must lie in configured folders
    (retrain/common/run_inputs.py); the tests write their users' configs under
    tmp_path, so the session's pytest temp root is one (children inherit it). A value the
    developer's shell already sets is kept after it."""
    base = str(tmp_path_factory.getbasetemp().resolve())
    old = os.environ.get("RETRAIN_CONFIG_ROOTS")
    os.environ["RETRAIN_CONFIG_ROOTS"] = os.pathsep.join(p for p in (base, old) if p)
    yield
    if old is None:
        os.environ.pop("RETRAIN_CONFIG_ROOTS", None)
    else:
        os.environ["RETRAIN_CONFIG_ROOTS"] = old


def _check_config() -> None:
    from airflow import settings

    conn = settings.SQL_ALCHEMY_CONN or ""
    if _AIRFLOW_IMPORTED_EARLY or str(_DB_PATH) not in conn:
        raise RuntimeError(
            "airflow was imported before tests/conftest.py could point it at the test "
            f"AIRFLOW_HOME ({_AIRFLOW_HOME}); it uses {conn!r}. Do not import airflow from "
            "a pytest plugin or from a conftest.py that pytest loads before this one."
        )


def _db_cache_path() -> Path | None:
    if os.environ.get("RETRAIN_TEST_AIRFLOW_DB_CACHE", "1") in ("0", "false", "False", ""):
        return None
    key = f"airflow-{_dist_version('apache-airflow-core')}-sqlalchemy-{_dist_version('sqlalchemy')}"
    return REPO_ROOT / ".pytest_cache" / "airflow-db" / f"{key}.sqlite"


def _prepare_db() -> str:
    """Give the test AIRFLOW_HOME a migrated metadata DB; returns how it was obtained."""
    cache = _db_cache_path()
    if cache is not None and cache.is_file() and not _DB_PATH.exists():
        # Copied before airflow opens the file, so no live connection sees the swap.
        shutil.copyfile(cache, _DB_PATH)
        return f"copied cached migrated DB {cache.name}"

    from airflow.utils import db

    db.initdb()
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        # Airflow opens SQLite in WAL mode: recent pages live in airflow.db-wal, so a plain
        # file copy would miss them. The backup API writes one self-contained file.
        with sqlite3.connect(_DB_PATH) as src, sqlite3.connect(tmp) as dst:
            src.backup(dst)
        os.replace(tmp, cache)  # atomic: a concurrent session never reads half a file
    return "migrated with airflow.utils.db.initdb()"


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """A temporary AIRFLOW_HOME with a migrated SQLite DB; dags folder = repo `dags/`.

    Request it from any test that calls `dag.test()` or reads Airflow's DB.
    """
    t0 = time.perf_counter()
    how = _prepare_db()
    t1 = time.perf_counter()
    _check_config()  # imports airflow if nothing did yet (1.5-5 s, not part of the DB cost)
    # Make sure the ORM is usable (dag.test() needs settings.Session).
    from airflow import settings

    if settings.Session is None:  # pragma: no cover - only with _AIRFLOW__AS_LIBRARY set
        settings.configure_orm()
    sys.stderr.write(
        f"\n[conftest] AIRFLOW_HOME={_AIRFLOW_HOME}: {how} in {t1 - t0:.2f}s "
        f"(+{time.perf_counter() - t1:.2f}s importing airflow)\n"
    )
    return _AIRFLOW_HOME


@pytest.fixture
def register_dag(airflow_home):
    """Return `register(dag)`, which makes a DAG built inside a test usable with `dag.test()`.

    `dag.test()` only runs DAGs that are serialized in the DB; it serializes the DAGs it
    finds in the configured bundle (repo `dags/`). A DAG object defined in a test module is
    not there ("Cannot create DagRun ... because the dag is not serialized"), so write it to
    the DB under the default `dags-folder` bundle first.
    """
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    def register(dag):
        DagBundlesManager().sync_bundles_to_db()
        bag = DagBag(dag_folder=str(DAGS_FOLDER), collect_dags=False)
        bag.bag_dag(dag)
        sync_bag_to_db(bag, "dags-folder", None)
        return dag

    return register


def pytest_unconfigure(config):
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)
