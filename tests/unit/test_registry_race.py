"""Publish and rollback racing in real OS processes (design rule 20: "current" changes by
compare-and-swap, and publish and rollback take one lock).

The bug this guards against: a rollback to v1 landed while a run was in flight, and the
run's push then made its own version current, undoing the rollback. Whatever order the two
processes take the lock in, the rollback must stand.

The "SavedModel" is a stand-in (a dir with an empty saved_model.pb), as in test_registry.py:
the registry only copies files.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import multiprocessing as mp
import os
import shutil
import time
from pathlib import Path

import pytest

from components.gate import Thresholds, decide
from retrain.common.registry import LOCK_FILE, Registry, StaleBaseline

ROUNDS = 20
# The rollback's start is staggered by round (0, 4, 8, 12 ms after the barrier) so that
# both orders happen: the publisher copies its files before it asks for the lock.
STAGGER_S = (0.0, 0.004, 0.008, 0.012)


def fake_savedmodel(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(b"")
    (path / "variables").mkdir()
    (path / "variables" / "variables.index").write_text("m")
    return path


def meta_for(run_id: str) -> dict:
    metrics = {"auc": 0.78, "log_loss": 0.45}
    return {"metrics": metrics, "data_span": "2024-05-01", "run_id": run_id,
            "dag_id": "ctr_daily", "code_version": "abc123",
            "gate": decide(metrics, None, Thresholds()).to_dict()}


def _result(path: Path, **fields) -> None:
    path.write_text(json.dumps(fields))


def _publisher(root, model, barrier, out):
    """A push whose candidate was evaluated against version 2."""
    try:
        barrier.wait(30)
        meta = Registry(root).publish(model, "ctr", meta_for("run-3"), expect_current=2)
        _result(Path(out), outcome="published", version=meta["version"])
    except StaleBaseline as e:
        _result(Path(out), outcome="stale", expected=e.expected, current=e.current,
                message=str(e))
    except BaseException as e:  # noqa: BLE001 - reported to the test, which fails
        _result(Path(out), outcome="error", error=f"{type(e).__name__}: {e}")
        raise


def _roller(root, barrier, delay, out):
    try:
        barrier.wait(30)
        time.sleep(delay)
        meta = Registry(root).rollback("ctr", to_version=1, who="oncall",
                                       why="v2 regressed online")
        _result(Path(out), outcome="rolled_back", version=meta["version"])
    except BaseException as e:  # noqa: BLE001
        _result(Path(out), outcome="error", error=f"{type(e).__name__}: {e}")
        raise


@pytest.fixture
def template(tmp_path) -> tuple[Path, Path]:
    """A registry with v1 archived and v2 current, and the candidate's export."""
    model = fake_savedmodel(tmp_path / "export")
    root = tmp_path / "template"
    reg = Registry(root)
    reg.publish(model, "ctr", meta_for("run-1"))
    reg.publish(model, "ctr", meta_for("run-2"))
    assert reg.current_version("ctr") == 2 and reg.get("ctr", 1)["stage"] == "archived"
    return root, model


def test_rollback_racing_a_publish_is_never_undone(tmp_path, template):
    template_root, model = template
    ctx = mp.get_context("fork")
    orders = {"rollback first (publish refused)": 0, "publish first (then rolled back)": 0}
    for i in range(ROUNDS):
        root = tmp_path / f"round-{i}"
        shutil.copytree(template_root, root)
        barrier = ctx.Barrier(2)
        pub_out, rb_out = tmp_path / f"pub-{i}.json", tmp_path / f"rb-{i}.json"
        procs = [ctx.Process(target=_publisher, args=(root, model, barrier, pub_out)),
                 ctx.Process(target=_roller, args=(root, barrier,
                                                   STAGGER_S[i % len(STAGGER_S)], rb_out))]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0, 0], (
            i, pub_out.read_text() if pub_out.exists() else None,
            rb_out.read_text() if rb_out.exists() else None)
        pub, rb = json.loads(pub_out.read_text()), json.loads(rb_out.read_text())
        reg = Registry(root)
        current = json.loads((root / "ctr" / "CURRENT").read_text())
        assert rb == {"outcome": "rolled_back", "version": 1}, (i, rb)
        # In every round the rollback stands and the registry is consistent.
        assert current["version"] == 1 and current["action"] == "rollback", (i, current)
        assert reg.check("ctr") == [], (i, reg.check("ctr"))
        assert not list((root / "ctr").glob(".tmp-*")), i
        if pub["outcome"] == "stale":
            # The rollback took the lock first: the publish compared and refused.
            assert (pub["expected"], pub["current"]) == (2, 1), (i, pub)
            assert "no longer current" in pub["message"]
            assert current["previous_version"] == 2, (i, current)
            assert not (root / "ctr" / "3").exists(), i
            assert [m["version"] for m in reg.list_versions("ctr")] == [1, 2]
            orders["rollback first (publish refused)"] += 1
        else:
            # The publish took the lock first (v2 still current): it made v3 current,
            # then the rollback replaced it.
            assert pub == {"outcome": "published", "version": 3}, (i, pub)
            assert current["previous_version"] == 3, (i, current)
            assert reg.get("ctr", 3)["stage"] == "archived"
            assert reg.get("ctr", 3)["history"][-1]["superseded_by"] == 1
            orders["publish first (then rolled back)"] += 1
    print(f"\n{ROUNDS} rounds of publish(expect_current=2) vs rollback(to_version=1): "
          + ", ".join(f"{k}: {v}" for k, v in orders.items()))
    assert sum(orders.values()) == ROUNDS


def _publish_once(root, model, out):
    try:
        Registry(root).publish(model, "ctr", meta_for("run-3"), expect_current=2)
        _result(Path(out), outcome="published")
    except StaleBaseline as e:
        _result(Path(out), outcome="stale", expected=e.expected, current=e.current)


def test_a_publish_waiting_for_the_lock_compares_after_it_gets_it(tmp_path, template):
    """The check that counts is the one under the lock: a publisher that passed its early
    check and copied its files, then waited on the lock while a rollback held it, is
    refused, and leaves no temp dir and no version behind."""
    template_root, model = template
    root = tmp_path / "reg"
    shutil.copytree(template_root, root)
    mdir = root / "ctr"
    out = tmp_path / "pub.json"
    ctx = mp.get_context("fork")
    fd = os.open(mdir / LOCK_FILE, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)      # as a rollback in progress holds it
    proc = ctx.Process(target=_publish_once, args=(root, model, out))
    try:
        proc.start()
        deadline = time.time() + 30
        # The publisher is past its early check once its temp dir holds the whole copy.
        while not any((t / "variables" / "variables.index").is_file()
                      for t in mdir.glob(".tmp-*")):
            assert time.time() < deadline and proc.is_alive(), "publisher never copied"
            time.sleep(0.01)
        time.sleep(0.2)
        assert proc.is_alive() and not out.exists()   # blocked on the lock
        # The body of a rollback (it runs under this same lock): v1 becomes current.
        Registry(root)._promote("ctr", 1, who="oncall", why="v2 regressed online",
                                action="rollback")
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        proc.join(30)
    assert proc.exitcode == 0
    assert json.loads(out.read_text()) == {"outcome": "stale", "expected": 2, "current": 1}
    reg = Registry(root)
    assert reg.current_version("ctr") == 1
    assert sorted(p.name for p in mdir.iterdir()) == [".lock", "1", "2", "CURRENT"]
    assert reg.check_report("ctr") == {"errors": [], "warnings": []}
