"""The on-disk model registry: publish, idempotent retries, rollback, crash safety,
concurrent publishers, consistency checks and the `retrain registry` CLI.

The "SavedModel" used here is a stand-in: a dir with an empty saved_model.pb and a
variables/ dir. That is enough because the registry only copies files and never loads
a model.
"""
from __future__ import annotations

import json
import shutil
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pytest

import retrain.common.registry as registry_mod
from components.gate import Thresholds, decide
from retrain.common.registry import NotFound, Registry


def fake_savedmodel(path: Path, tag: str = "m") -> Path:
    """Stand-in for a SavedModel export: the files the registry checks for and copies."""
    path.mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(b"")
    (path / "variables").mkdir()
    (path / "variables" / "variables.index").write_text(tag)
    (path / "assets").mkdir()
    return path


def meta_for(run_id: str, auc: float = 0.78, span: str = "2024-05-01") -> dict:
    metrics = {"auc": auc, "log_loss": 0.45}
    return {
        "metrics": metrics, "data_span": span, "run_id": run_id, "dag_id": "ctr_daily",
        "code_version": "abc123", "source_model_uri": f"/runs/{run_id}/model",
        "gate": decide(metrics, None, Thresholds()).to_dict(),
    }


@pytest.fixture
def reg(tmp_path) -> Registry:
    return Registry(tmp_path / "registry")


@pytest.fixture
def model(tmp_path) -> Path:
    return fake_savedmodel(tmp_path / "export")


def current_file(reg: Registry, name: str = "ctr") -> dict:
    return json.loads((reg.root / name / "CURRENT").read_text())


# ------------------------------------------------------------------ publish

def test_first_publish_is_version_1_and_current(reg, model):
    meta = reg.publish(model, "ctr", meta_for("run-1"))
    assert meta["version"] == 1 and meta["stage"] == "published"
    assert meta["model_name"] == "ctr" and meta["run_id"] == "run-1"
    assert meta["dag_id"] == "ctr_daily" and meta["code_version"] == "abc123"
    assert meta["metrics"]["auc"] == 0.78 and meta["gate"]["blessed"] is True
    assert meta["created_at"].endswith("+00:00")
    assert [h["to"] for h in meta["history"]] == ["candidate", "published"]
    assert reg.current("ctr") == meta == reg.get("ctr", 1)
    assert current_file(reg)["version"] == 1
    vdir = reg.model_path("ctr", 1)
    assert vdir == reg.root / "ctr" / "1"
    assert (vdir / "saved_model.pb").is_file()
    assert (vdir / "variables" / "variables.index").read_text() == "m"
    assert json.loads((vdir / "retrain_meta.json").read_text()) == meta
    assert reg.models() == ["ctr"]
    assert reg.check("ctr") == []


def test_second_publish_archives_the_first(reg, model):
    reg.publish(model, "ctr", meta_for("run-1"))
    meta2 = reg.publish(model, "ctr", meta_for("run-2", auc=0.79))
    assert meta2["version"] == 2
    assert reg.current("ctr")["version"] == 2
    v1 = reg.get("ctr", 1)
    assert v1["stage"] == "archived"
    assert v1["history"][-1]["to"] == "archived" and v1["history"][-1]["superseded_by"] == 2
    assert [m["version"] for m in reg.list_versions("ctr")] == [1, 2]
    assert [m["stage"] for m in reg.list_versions("ctr")] == ["archived", "published"]
    assert current_file(reg)["previous_version"] == 1
    assert reg.check("ctr") == []


def test_retry_with_same_run_id_returns_existing_version(reg, model):
    first = reg.publish(model, "ctr", meta_for("run-1"))
    again = reg.publish(model, "ctr", meta_for("run-1"))
    assert again == first
    assert [m["version"] for m in reg.list_versions("ctr")] == [1]
    # The same run id from another DAG is a different run.
    other = reg.publish(model, "ctr", {**meta_for("run-1"), "dag_id": "ctr_backfill"})
    assert other["version"] == 2


def test_refuses_dir_without_saved_model_pb(reg, tmp_path):
    empty = tmp_path / "not_a_model"
    empty.mkdir()
    with pytest.raises(ValueError, match="saved_model.pb"):
        reg.publish(empty, "ctr", meta_for("r"))
    with pytest.raises(FileNotFoundError):
        reg.publish(tmp_path / "missing", "ctr", meta_for("r"))
    assert not (reg.root / "ctr").exists() or reg.list_versions("ctr") == []


def test_refuses_unblessed_gate_and_reserved_keys(reg, model):
    bad_gate = decide({"auc": 0.5, "log_loss": 0.9}, None, Thresholds()).to_dict()
    with pytest.raises(ValueError, match="gate"):
        reg.publish(model, "ctr", {**meta_for("r"), "gate": bad_gate})
    with pytest.raises(ValueError, match="version"):
        reg.publish(model, "ctr", {**meta_for("r"), "version": 7})
    with pytest.raises(ValueError, match="model name"):
        reg.publish(model, "../evil", meta_for("r"))


def test_publish_killed_during_copy_leaves_nothing_visible(reg, model, monkeypatch):
    reg.publish(model, "ctr", meta_for("run-1"))
    before = current_file(reg)

    def dies_halfway(src, dst):
        (Path(dst) / "saved_model.pb").write_bytes(b"partial")
        raise RuntimeError("simulated kill during copy")

    monkeypatch.setattr(registry_mod, "_copy_savedmodel", dies_halfway)
    with pytest.raises(RuntimeError, match="simulated kill"):
        reg.publish(model, "ctr", meta_for("run-2"))
    assert [m["version"] for m in reg.list_versions("ctr")] == [1]
    assert current_file(reg) == before
    assert not list((reg.root / "ctr").glob(".tmp-*"))
    assert reg.check("ctr") == []
    monkeypatch.undo()
    assert reg.publish(model, "ctr", meta_for("run-2"))["version"] == 2


def _publish_then_hang(root, model, ready):
    def copy_then_hang(src, dst):
        registry_mod.shutil.copytree(src, dst, dirs_exist_ok=True)
        ready.set()
        time.sleep(120)

    registry_mod._copy_savedmodel = copy_then_hang
    Registry(root).publish(model, "ctr", meta_for("run-killed"))


def test_publish_sigkilled_midway_leaves_only_an_ignored_temp_dir(reg, model):
    reg.publish(model, "ctr", meta_for("run-1"))
    before = current_file(reg)
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=_publish_then_hang, args=(reg.root, model, ready))
    proc.start()
    try:
        assert ready.wait(30), "publisher never reached the copy step"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    leftovers = list((reg.root / "ctr").glob(".tmp-*"))
    assert len(leftovers) == 1 and (leftovers[0] / "saved_model.pb").is_file()
    assert [m["version"] for m in reg.list_versions("ctr")] == [1]
    assert current_file(reg) == before
    assert reg.check("ctr") == []
    assert reg.check_report("ctr")["warnings"] == []  # fresh: may be a publish in progress
    old = time.time() - 2 * 3600
    os.utime(leftovers[0], (old, old))
    report = reg.check_report("ctr")
    assert report["errors"] == []
    assert len(report["warnings"]) == 1 and ".tmp-" in report["warnings"][0]
    # The lock died with the process; the next publish goes through.
    assert reg.publish(model, "ctr", meta_for("run-2"))["version"] == 2


def test_retry_finishes_a_publish_interrupted_before_current(reg, model, monkeypatch):
    reg.publish(model, "ctr", meta_for("run-1"))
    real_write = registry_mod.write_json

    def fail_on_current(path, obj):
        if Path(path).name == "CURRENT":
            raise RuntimeError("simulated crash before CURRENT")
        return real_write(path, obj)

    monkeypatch.setattr(registry_mod, "write_json", fail_on_current)
    with pytest.raises(RuntimeError):
        reg.publish(model, "ctr", meta_for("run-2"))
    monkeypatch.undo()
    assert current_file(reg)["version"] == 1
    assert reg.check("ctr")  # version 2 says published, CURRENT still names 1
    retried = reg.publish(model, "ctr", meta_for("run-2"))
    assert retried["version"] == 2 and reg.current("ctr")["version"] == 2
    assert [m["version"] for m in reg.list_versions("ctr")] == [1, 2]
    assert reg.check("ctr") == []


def _publish_many(root, model, worker, count, start):
    start.wait(30)
    for i in range(count):
        Registry(root).publish(model, "ctr", meta_for(f"w{worker}-r{i}"))


def test_concurrent_publishers_get_distinct_versions(reg, model, monkeypatch):
    # Widen the window between allocating a number and renaming into it.
    real_write = registry_mod.write_json

    def slow_write(path, obj):
        time.sleep(0.02)
        return real_write(path, obj)

    monkeypatch.setattr(registry_mod, "write_json", slow_write)
    ctx = mp.get_context("fork")  # children inherit the slowed-down write
    start = ctx.Event()
    procs = [ctx.Process(target=_publish_many, args=(reg.root, model, w, 3, start))
             for w in range(2)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    versions = reg.list_versions("ctr")
    assert [m["version"] for m in versions] == [1, 2, 3, 4, 5, 6]
    assert sorted(m["run_id"] for m in versions) == sorted(
        f"w{w}-r{i}" for w in range(2) for i in range(3))
    assert [m["stage"] for m in versions].count("published") == 1
    assert reg.current("ctr")["version"] == 6
    assert reg.check("ctr") == []


# ------------------------------------------------------------------ rollback

def test_rollback_to_previous_records_who_and_why(reg, model):
    reg.publish(model, "ctr", meta_for("run-1"))
    reg.publish(model, "ctr", meta_for("run-2"))
    meta = reg.rollback("ctr", None, who="alice", why="CTR dropped 3% online")
    assert meta["version"] == 1 and meta["stage"] == "published"
    assert reg.current("ctr")["version"] == 1
    last = meta["history"][-1]
    assert (last["who"], last["why"], last["action"], last["to"], last["replaces"]) == (
        "alice", "CTR dropped 3% online", "rollback", "published", 2)
    v2 = reg.get("ctr", 2)
    assert v2["stage"] == "archived"
    assert v2["history"][-1]["who"] == "alice" and v2["history"][-1]["superseded_by"] == 1
    cur = current_file(reg)
    assert (cur["version"], cur["action"], cur["who"]) == (1, "rollback", "alice")
    assert reg.check("ctr") == []
    # Retrying the push of run-2 after a deliberate rollback must not re-publish it.
    assert reg.publish(model, "ctr", meta_for("run-2"))["stage"] == "archived"
    assert reg.current("ctr")["version"] == 1
    # Forward again to an explicit version.
    assert reg.rollback("ctr", 2, who="alice", why="false alarm")["version"] == 2


@pytest.mark.parametrize("why", [None, "", "   "])
def test_rollback_without_why_is_refused(reg, model, why):
    reg.publish(model, "ctr", meta_for("run-1"))
    reg.publish(model, "ctr", meta_for("run-2"))
    with pytest.raises(ValueError, match="reason"):
        reg.rollback("ctr", None, who="alice", why=why)
    assert reg.current("ctr")["version"] == 2


def test_rollback_errors(reg, model):
    with pytest.raises(NotFound, match="unknown model"):
        reg.rollback("nope", None, who="a", why="b")
    reg.publish(model, "ctr", meta_for("run-1"))
    with pytest.raises(ValueError, match="no archived version"):
        reg.rollback("ctr", None, who="a", why="b")
    with pytest.raises(ValueError, match="already current"):
        reg.rollback("ctr", 1, who="a", why="b")
    with pytest.raises(NotFound, match="no version 9"):
        reg.rollback("ctr", 9, who="a", why="b")


# ------------------------------------------------------------------ readers and check

def test_readers_ignore_temp_dirs_and_unknowns(reg, model):
    assert reg.models() == []
    assert reg.current("ctr") is None  # first run: no baseline
    with pytest.raises(NotFound, match="unknown model"):
        reg.list_versions("ctr")
    reg.publish(model, "ctr", meta_for("run-1"))
    stray = fake_savedmodel(reg.root / "ctr" / ".tmp-stray")
    (stray / "retrain_meta.json").write_text(json.dumps({"version": 99}))
    assert [m["version"] for m in reg.list_versions("ctr")] == [1]
    assert reg.models() == ["ctr"]
    with pytest.raises(NotFound, match="no version 2"):
        reg.get("ctr", 2)
    with pytest.raises(NotFound):
        reg.model_path("ctr", 2)
    # A new version never reuses the temp dir or collides with it.
    assert reg.publish(model, "ctr", meta_for("run-2"))["version"] == 2


def test_check_reports_broken_registry(reg, model):
    reg.publish(model, "ctr", meta_for("run-1"))
    reg.publish(model, "ctr", meta_for("run-2"))
    assert reg.check("ctr") == []
    mdir = reg.root / "ctr"
    # Two published stages.
    meta1 = json.loads((mdir / "1" / "retrain_meta.json").read_text())
    meta1["stage"] = "published"
    (mdir / "1" / "retrain_meta.json").write_text(json.dumps(meta1))
    # A version dir with no saved_model.pb, one with no meta.
    (mdir / "2" / "saved_model.pb").unlink()
    (mdir / "3").mkdir()
    (mdir / "3" / "saved_model.pb").write_bytes(b"")
    problems = reg.check("ctr")
    text = "\n".join(problems)
    assert "more than one published version: [1, 2]" in text
    assert "version 2: missing saved_model.pb" in text
    assert "version 3: missing or unreadable retrain_meta.json" in text
    assert "CURRENT names version 2, which is incomplete" in text
    with pytest.raises(ValueError, match="missing or incomplete"):
        reg.current("ctr")
    # CURRENT pointing at a version that does not exist; then no CURRENT at all.
    (mdir / "CURRENT").write_text(json.dumps({"version": 7}))
    assert any("version 7, which does not exist" in p for p in reg.check("ctr"))
    (mdir / "CURRENT").unlink()
    assert any("no CURRENT file" in p for p in reg.check("ctr"))


# ------------------------------------------------------------------ CLI

@pytest.fixture
def cli(monkeypatch):
    """Run `retrain ...` through the real retrain.cli.main with only this subcommand
    registered (other capability modules may not exist yet)."""
    import retrain.cli

    monkeypatch.setattr(retrain.cli, "COMMANDS", ["retrain.orchestration.registry_cli"])
    return retrain.cli.main


def test_cli_list_show_rollback_check(reg, model, cli, capsys, monkeypatch):
    reg.publish(model, "ctr", meta_for("run-1", auc=0.7812, span="2024-05-01"))
    reg.publish(model, "ctr", meta_for("run-2", auc=0.7901, span="2024-05-02"))
    root = str(reg.root)

    assert cli(["registry", "list", "ctr", "--root", root]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "current: 2" in lines[0]
    assert lines[1].split() == ["VERSION", "STAGE", "CREATED", "SPAN", "RUN_ID", "AUC",
                                "LOG_LOSS", "GATE"]
    assert lines[2].split()[:2] == ["1", "archived"]
    assert lines[3].split()[:2] == ["2*", "published"]
    assert "2024-05-02" in lines[3] and "run-2" in lines[3] and "0.7901" in lines[3]
    assert "0.4500" in lines[3] and lines[3].rstrip().endswith("blessed")

    assert cli(["registry", "--root", root, "show", "ctr", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 2
    assert cli(["registry", "show", "ctr", "1", "--root", root, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stage"] == "archived"
    assert cli(["registry", "show", "ctr", "1", "--root", root]) == 0   # a person's screen
    assert capsys.readouterr().out.startswith("ctr version 1  [archived]")

    monkeypatch.setenv("USER", "bob")
    assert cli(["registry", "rollback", "ctr", "--why", "bad online CTR", "--root", root]) == 0
    assert "version 1 is now published (was 2)" in capsys.readouterr().out
    hist = reg.current("ctr")["history"][-1]
    assert (hist["who"], hist["why"]) == ("bob", "bad online CTR")
    assert cli(["registry", "rollback", "ctr", "--to", "2", "--who", "carol", "--why", "ok",
                "--root", root]) == 0
    capsys.readouterr()
    assert reg.current("ctr")["history"][-1]["who"] == "carol"

    assert cli(["registry", "check", "--root", root]) == 0
    assert "model ctr: ok" in capsys.readouterr().out
    (reg.root / "ctr" / "1" / "saved_model.pb").unlink()
    assert cli(["registry", "check", "ctr", "--root", root]) == 1
    assert "missing saved_model.pb" in capsys.readouterr().out


def test_cli_errors_exit_2_and_why_is_required(reg, model, cli, capsys):
    root = str(reg.root)
    reg.publish(model, "ctr", meta_for("run-1"))
    assert cli(["registry", "show", "nope", "--root", root]) == 2
    assert "unknown model 'nope'" in capsys.readouterr().err
    assert cli(["registry", "show", "ctr", "5", "--root", root]) == 2
    assert "has no version 5" in capsys.readouterr().err
    assert cli(["registry", "list", "nope", "--root", root]) == 2
    assert cli(["registry", "rollback", "ctr", "--why", "x", "--root", root]) == 2
    assert "no archived version" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # argparse: --why is required
        cli(["registry", "rollback", "ctr", "--root", root])
    assert exc.value.code == 2
    assert "--why" in capsys.readouterr().err


def test_cli_help_and_default_root(cli, capsys, monkeypatch, tmp_path, model):
    for argv in (["registry"], ["registry", "list"], ["registry", "show"],
                 ["registry", "rollback"], ["registry", "check"]):
        with pytest.raises(SystemExit) as exc:
            cli([*argv, "--help"])
        assert exc.value.code == 0
        assert "--root" in capsys.readouterr().out
    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path / "home"))
    Registry(tmp_path / "home" / "registry").publish(model, "ctr", meta_for("run-1"))
    assert cli(["registry", "list"]) == 0
    assert "run-1" in capsys.readouterr().out


def test_broken_registry_files_are_named_never_a_traceback(tmp_path):
    """Garbage bytes in CURRENT and a version without its meta file: every tool names the
    file and exits non-zero (a reliability finding: a bare UTF-8 error naming no file)."""
    import subprocess
    import sys

    vdir = tmp_path / "reg" / "m" / "1"
    vdir.mkdir(parents=True)
    (vdir.parent / "CURRENT").write_bytes(b"\xff\xfe\x00 not json")
    for action in ("list", "show", "check"):
        out = subprocess.run([sys.executable, "-m", "retrain.cli", "registry", action, "m",
                              "--root", str(tmp_path / "reg")], capture_output=True, text=True)
        assert out.returncode != 0, action
        assert "Traceback" not in out.stderr, (action, out.stderr[-1500:])
        assert "CURRENT is not valid JSON" in out.stdout + out.stderr, action
    problems = Registry(tmp_path / "reg").check("m")
    assert any("version 1: missing or unreadable retrain_meta.json" in p for p in problems)


def test_a_publish_over_a_broken_registry_fails_naming_the_file(reg, model):
    """Garbage in CURRENT: a new publish must not guess which version is live."""
    reg.publish(model, "ctr", meta_for("run-1"))
    (reg.root / "ctr" / "CURRENT").write_bytes(b"\xff\xfe garbage")
    from retrain.common.errors import BadData
    with pytest.raises(BadData, match=r"refusing to publish model 'ctr' over a broken registry: "
                                      r".*CURRENT is not valid JSON"):
        reg.publish(model, "ctr", meta_for("run-2"))
    assert sorted(p.name for p in (reg.root / "ctr").iterdir()
                  if not p.name.startswith(".")) == ["1", "CURRENT"]
    reg.rollback("ctr", 1, who="oncall", why="CURRENT was overwritten by a bad disk")
    assert reg.publish(model, "ctr", meta_for("run-2"))["version"] == 2


def test_a_publish_refuses_a_current_that_names_a_missing_or_metaless_version(reg, model):
    from retrain.common.errors import BadData
    reg.publish(model, "ctr", meta_for("run-1"))
    (reg.root / "ctr" / "1" / "retrain_meta.json").unlink()
    with pytest.raises(BadData, match=r"CURRENT names version 1, which is missing or has no "
                                      r"readable retrain_meta.json"):
        reg.publish(model, "ctr", meta_for("run-2"))
    shutil.rmtree(reg.root / "ctr" / "1")
    with pytest.raises(BadData, match=r"CURRENT names version 1, which is missing"):
        reg.publish(model, "ctr", meta_for("run-2"))
    assert [p.name for p in (reg.root / "ctr").iterdir() if not p.name.startswith(".")] == [
        "CURRENT"]


# ------------------------------------------------------------------ compare-and-swap

def _versions_on_disk(reg: Registry, name: str = "ctr") -> list[str]:
    return sorted(p.name for p in (reg.root / name).iterdir() if p.name != ".lock")


def test_publish_with_the_expected_current_version_goes_through(reg, model):
    first = reg.publish(model, "ctr", meta_for("run-1"), expect_current=None)  # empty model
    assert first["version"] == 1 and reg.current_version("ctr") == 1
    second = reg.publish(model, "ctr", meta_for("run-2"), expect_current=1)
    assert second["version"] == 2 and reg.current_version("ctr") == 2
    assert reg.get("ctr", 1)["stage"] == "archived"
    assert reg.check("ctr") == []


def test_publish_against_a_baseline_that_is_no_longer_current_is_refused(reg, model):
    from retrain.common.errors import BadData
    from retrain.common.registry import StaleBaseline
    reg.publish(model, "ctr", meta_for("run-1"))
    reg.publish(model, "ctr", meta_for("run-2"))
    before = current_file(reg)
    with pytest.raises(StaleBaseline) as caught:
        reg.publish(model, "ctr", meta_for("run-3"), expect_current=1)
    err = caught.value
    assert isinstance(err, BadData)   # not retried
    assert (err.model, err.expected, err.current) == ("ctr", 1, 2)
    msg = str(err)
    assert "model 'ctr'" in msg and "no longer current" in msg
    assert "expected current: version 1" in msg and "actual current: version 2" in msg
    assert _versions_on_disk(reg) == ["1", "2", "CURRENT"]   # no version dir, no .tmp-
    assert current_file(reg) == before
    assert reg.find_run("ctr", "run-3", "ctr_daily") is None
    assert reg.check_report("ctr") == {"errors": [], "warnings": []}
    # No number was allocated: the next publish (with the right baseline) gets 3.
    assert reg.publish(model, "ctr", meta_for("run-3"), expect_current=2)["version"] == 3


def test_a_candidate_evaluated_with_no_baseline_is_refused_once_a_model_is_published(reg, model):
    from retrain.common.registry import StaleBaseline
    reg.publish(model, "ctr", meta_for("run-1"), expect_current=None)
    with pytest.raises(StaleBaseline, match=r"expected current: no published version; "
                                            r"actual current: version 1"):
        reg.publish(model, "ctr", meta_for("run-2"), expect_current=None)
    assert _versions_on_disk(reg) == ["1", "CURRENT"]


@pytest.mark.parametrize("bad", ["2", 0, -1, True, 2.0])
def test_expect_current_must_be_a_version_none_or_any(reg, model, bad):
    with pytest.raises(ValueError, match="expect_current"):
        reg.publish(model, "ctr", meta_for("run-1"), expect_current=bad)
    assert not (reg.root / "ctr").exists()
    assert reg.publish(model, "ctr", meta_for("run-1"),
                       expect_current=registry_mod.ANY)["version"] == 1


def test_retried_publish_of_the_current_version_returns_it(reg, model):
    reg.publish(model, "ctr", meta_for("run-1"))
    done = reg.publish(model, "ctr", meta_for("run-2"), expect_current=1)
    # The retried push task carries the same evaluation (baseline 1): it gets its version
    # back, although CURRENT (2, its own) is no longer 1.
    assert reg.publish(model, "ctr", meta_for("run-2"), expect_current=1) == done
    assert _versions_on_disk(reg) == ["1", "2", "CURRENT"]
    assert reg.current_version("ctr") == 2 and reg.check("ctr") == []


def _publish_until_promotion_then_hang(root, model, ready):
    """Runs in a forked child: publish, stopping for good (until SIGKILLed) right after the
    candidate was renamed into its version dir, before it is marked published."""
    real_write = registry_mod.write_json

    def write_then_hang_in_version_dir(path, obj):
        if Path(path).parent.name.isdigit():   # _promote's first write
            ready.set()
            time.sleep(120)
        return real_write(path, obj)

    registry_mod.write_json = write_then_hang_in_version_dir
    Registry(root).publish(model, "ctr", meta_for("run-3"), expect_current=2)


def test_retried_interrupted_publish_after_a_rollback_is_refused(reg, model):
    from retrain.common.registry import StaleBaseline
    reg.publish(model, "ctr", meta_for("run-1"))
    reg.publish(model, "ctr", meta_for("run-2"))
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=_publish_until_promotion_then_hang, args=(reg.root, model, ready))
    proc.start()
    try:
        assert ready.wait(30), "publisher never reached the promotion"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
    assert reg.get("ctr", 3)["stage"] == "candidate" and reg.current_version("ctr") == 2
    # While the push task is down, an operator rolls back to version 1.
    reg.rollback("ctr", 1, who="oncall", why="v2 regressed online")
    with pytest.raises(StaleBaseline, match=r"expected current: version 2; actual current: "
                                            r"version 1"):
        reg.publish(model, "ctr", meta_for("run-3"), expect_current=2)
    assert reg.current_version("ctr") == 1          # the rollback stands
    assert reg.get("ctr", 3)["stage"] == "candidate"
    assert [m["stage"] for m in reg.list_versions("ctr")] == ["published", "archived",
                                                              "candidate"]
    assert reg.check("ctr") == []
    # Back to version 2 (what run-3 was evaluated against): the retry now finishes it.
    reg.rollback("ctr", 2, who="oncall", why="false alarm")
    finished = reg.publish(model, "ctr", meta_for("run-3"), expect_current=2)
    assert finished["version"] == 3 and finished["stage"] == "published"
    assert reg.current_version("ctr") == 3 and reg.check("ctr") == []
