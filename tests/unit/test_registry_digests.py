"""Published files verified by digest, and the doctor that repairs a damaged registry
(issue 45, items 3 and 9).

An attacker (or a careless operator) replaces a published model's files after publishing,
same paths, other bytes: `registry check`, rollback, lineage and every reader that loads a
published model (the recommendations step here, as a real `python -m` process) refuse it
naming the file. A truncated CURRENT or meta file: `registry list` shows the damage, and
`registry doctor --repair` restores a state where rollback works again. Nothing echoes a
file's content. Stand-in SavedModels as in test_registry (the registry never loads one).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retrain.common.errors import BadData, kind_of
from retrain.common.registry import (ModelTampered, Registry, RegistryBroken,
                                     require_saved_model, verify_model_dir)
from test_registry import fake_savedmodel, meta_for

SECRET = "PLANTED-SECRET-3f9a"   # bytes an attacker planted: never in any output


@pytest.fixture
def reg(tmp_path) -> Registry:
    return Registry(tmp_path / "registry")


@pytest.fixture
def model(tmp_path) -> Path:
    path = fake_savedmodel(tmp_path / "export")
    (path / "variables" / "variables.data-00000-of-00001").write_bytes(b"\x01" * 64)
    return path


def three_versions(reg: Registry, model: Path) -> Path:
    for i in (1, 2, 3):
        reg.publish(model, "ctr", meta_for(f"run-{i}"))
    return reg.root / "ctr"


def swap(path: Path, same_size: bool = True) -> None:
    """Other bytes under the same name (the same size: no size check can see it)."""
    size = path.stat().st_size
    data = (SECRET.encode() * (size // len(SECRET) + 1))[:size] if same_size else SECRET.encode()
    path.write_bytes(data)


def retrain(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "retrain.cli", *argv], capture_output=True,
                          text=True, timeout=timeout)


def no_echo(*outputs: str) -> None:
    for out in outputs:
        assert SECRET not in out and "Traceback" not in out, out[-2000:]


# ------------------------------------------------------------------ digests at publish

def test_a_publish_records_every_files_digest_and_readers_accept_it(reg, model):
    meta = reg.publish(model, "ctr", meta_for("run-1"))
    files = meta["content"]["files"]
    assert sorted(files) == ["saved_model.pb", "variables/variables.data-00000-of-00001",
                             "variables/variables.index"]
    assert files["variables/variables.data-00000-of-00001"]["size"] == 64
    assert len(files["saved_model.pb"]["sha256"]) == 64
    assert reg.integrity("ctr", 1)["state"] == "intact"
    assert reg.verified_path("ctr", 1) == reg.root / "ctr" / "1"
    verify_model_dir(reg.root / "ctr" / "1")
    verify_model_dir(model)          # a plain export (no registry meta) passes
    assert reg.check_report("ctr") == {"errors": [], "warnings": []}
    with pytest.raises(ValueError, match="registry-owned"):
        reg.publish(model, "ctr", {**meta_for("run-2"), "content": {}})


def test_a_path_handed_in_as_a_model_must_hold_one(model, tmp_path):
    """What `retrain recommend --model-dir` and the text scoring job check before starting
    workers: BadData (not retried) naming the flag and folder, never a file's content."""
    require_saved_model(model)
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text(SECRET)
    (tmp_path / "art" / "serving_model").mkdir(parents=True)
    (tmp_path / "art" / "serving_model" / "saved_model.pb").write_bytes(b"")
    for path, expected in ((tmp_path / "plain", "not an exported model"),
                           (tmp_path / "absent", "no such folder"),
                           (tmp_path / "plain" / "notes.txt", "no such folder"),
                           (tmp_path / "art", "give " + str(tmp_path / "art" / "serving_model"))):
        with pytest.raises(BadData, match="--model-dir") as exc:
            require_saved_model(path)
        assert expected in str(exc.value) and SECRET not in str(exc.value)
        assert kind_of(exc.value) == "bad_data"


def test_the_text_scoring_job_refuses_a_folder_that_is_no_text_model(tmp_path):
    """beam_jobs.score_text --model-dir: no SavedModel, or a CTR model (no labels.json),
    is refused by name before the pipeline starts (was a FileNotFoundError traceback)."""
    import argparse

    from beam_jobs import score_text

    ctr = tmp_path / "ctr"
    (ctr / "assets.extra").mkdir(parents=True)
    (ctr / "saved_model.pb").write_bytes(b"")
    (ctr / "assets.extra" / "feature_config.json").write_text(SECRET)
    with pytest.raises(BadData, match="--model-dir .*not an exported model"):
        score_text.resolve_model(argparse.Namespace(model_dir=str(tmp_path),
                                                    registry_root=None))
    model_dir, _ = score_text.resolve_model(argparse.Namespace(model_dir=str(ctr),
                                                               registry_root=None))
    with pytest.raises(BadData, match="is not a text model") as exc:
        score_text.model_config(model_dir)
    assert SECRET not in str(exc.value)


@pytest.mark.parametrize("same_size", [True, False])
def test_a_file_swapped_after_publish_is_refused_naming_it(reg, model, same_size):
    mdir = three_versions(reg, model)
    swap(mdir / "2" / "variables" / "variables.data-00000-of-00001", same_size)
    name = "variables/variables.data-00000-of-00001"

    problems = reg.check("ctr")
    assert any(p.startswith(f"version 2: {name}: content differs") for p in problems), problems
    with pytest.raises(ModelTampered, match=f"version 2 .*{name}: content differs") as exc:
        reg.verified_path("ctr", 2)
    assert isinstance(exc.value, BadData) and kind_of(exc.value) == "bad_data"   # no retry
    with pytest.raises(ModelTampered, match=name):
        verify_model_dir(mdir / "2")
    with pytest.raises(ModelTampered, match=name):   # the default target: newest archived
        reg.rollback("ctr", who="oncall", why="bad CTR")
    with pytest.raises(ModelTampered, match=name):
        reg.rollback("ctr", 2, who="oncall", why="bad CTR")
    assert reg.current_version("ctr") == 3   # nothing changed
    no_echo(*problems, str(exc.value))


def test_added_removed_linked_and_fifo_files_are_named_and_never_read(reg, model, tmp_path):
    mdir = three_versions(reg, model)
    (mdir / "1" / "assets" / "extra.txt").write_text(SECRET)
    (mdir / "2" / "variables" / "variables.index").unlink()
    target = mdir / "3" / "variables" / "variables.index"
    outside = tmp_path / "outside"
    outside.write_text("m")               # same bytes: only the link gives it away
    target.unlink()
    target.symlink_to(outside)
    fifo = mdir / "2" / "saved_model.pb"
    fifo.unlink()
    os.mkfifo(fifo)                       # opening it for reading would block forever

    started = time.monotonic()
    report = {v: reg.integrity("ctr", v)["problems"] for v in (1, 2, 3)}
    assert time.monotonic() - started < 5
    assert report[1] == ["assets/extra.txt: not among the files recorded when it was "
                         "published (added since)"]
    assert "saved_model.pb: is a FIFO, not the regular file published" in report[2]
    assert "variables/variables.index: missing (recorded when it was published)" in report[2]
    assert report[3] == ["variables/variables.index: is a symbolic link, not the regular "
                         "file published"]
    out = retrain("registry", "--root", str(reg.root), "check", "ctr", timeout=30)
    assert out.returncode == 1
    assert "version 3: variables/variables.index: is a symbolic link" in out.stdout
    assert "CURRENT names version 3, which is incomplete or damaged" in out.stdout
    no_echo(out.stdout, out.stderr)


def test_lineage_reports_the_digest_and_exits_1_on_a_mismatch(reg, model):
    mdir = three_versions(reg, model)
    ok = retrain("lineage", "ctr", "--root", str(reg.root))
    assert ok.returncode == 0, ok.stderr
    digest = reg.get("ctr", 3)["content"]["digest"]
    # Wrapped to the terminal's width (pytest's children see COLUMNS=80): words, not columns.
    assert f"files verified: 3 file(s) as published, digest {digest}" in " ".join(
        ok.stdout.split())
    swap(mdir / "3" / "saved_model.pb", same_size=False)
    bad = retrain("lineage", "ctr", "--root", str(reg.root))
    assert bad.returncode == 1
    assert "files     DAMAGED" in bad.stdout and "saved_model.pb: content differs" in " ".join(
        bad.stdout.split())
    assert "differ from the digests recorded when it was published" in bad.stderr
    as_json = retrain("lineage", "ctr", "--json", "--root", str(reg.root))
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["files"]["state"] == "damaged"
    no_echo(bad.stdout, bad.stderr, as_json.stdout)


def test_the_recommendations_step_refuses_a_swapped_published_model(reg, model, tmp_path):
    """The step that loads the published model, as its task runs it (`python -m`, spec as
    JSON): a bad-data failure naming the file, before any row is read or scored."""
    mdir = three_versions(reg, model)
    swap(mdir / "3" / "variables" / "variables.index")
    for extra in ({"registry_root": str(reg.root)},                 # resolved from CURRENT
                  {"model_dir": str(mdir / "3"), "model_version": 3}):  # handed a path
        result = tmp_path / "result.json"
        spec = {"raw_root": str(tmp_path / "raw"), "span": "2024-05-01",
                "output_dir": str(tmp_path / "out"), **extra}
        proc = subprocess.run([sys.executable, "-m", "components.ctr.recommend", "--spec",
                               json.dumps(spec), "--result-file", str(result)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1
        got = json.loads(result.read_text())
        assert got["error_kind"] == "bad_data", got
        assert got["error"].startswith("ModelTampered: model 'ctr' version 3")
        assert "variables/variables.index: content differs" in got["error"]
        assert not (tmp_path / "out").exists()
        no_echo(got["error"], proc.stderr.replace("Traceback", ""))


def test_a_version_published_before_digests_is_unverified_not_refused(reg, model):
    """Registries made before this change: their versions load, check warns."""
    mdir = three_versions(reg, model)
    meta_file = mdir / "2" / "retrain_meta.json"
    meta = json.loads(meta_file.read_text())
    del meta["content"]
    meta_file.write_text(json.dumps(meta))
    assert reg.integrity("ctr", 2)["state"] == "unrecorded"
    assert reg.verified_path("ctr", 2)
    report = reg.check_report("ctr")
    assert report["errors"] == []
    assert any("version 2: no content digests recorded" in w for w in report["warnings"])
    assert reg.rollback("ctr", who="oncall", why="test")["version"] == 2


# ------------------------------------------------------------------ a damaged registry

def test_truncated_current_doctor_repairs_and_rollback_works_after(reg, model):
    mdir = three_versions(reg, model)
    current = mdir / "CURRENT"
    before = current.read_bytes()
    current.write_bytes(before[: len(before) // 2])
    root = str(reg.root)

    # What failed before: the advised rollback itself (it read CURRENT to say "was").
    out = retrain("registry", "--root", root, "rollback", "ctr", "--why", "x")
    assert out.returncode == 2 and "doctor ctr --repair" in out.stderr
    with pytest.raises(RegistryBroken):
        reg.rollback("ctr", who="oncall", why="x")
    listed = retrain("registry", "--root", root, "list", "ctr")
    assert listed.returncode == 1
    assert "current: DAMAGED" in listed.stdout and "CURRENT is not valid JSON" in listed.stdout
    assert [ln.split()[0] for ln in listed.stdout.splitlines()[2:5]] == ["1", "2", "3"]

    looked = retrain("registry", "--root", root, "doctor", "ctr")
    assert looked.returncode == 1
    assert "CURRENT is not valid JSON" in looked.stdout
    assert "`--repair` points CURRENT at version 3" in looked.stdout
    assert current.read_bytes() == before[: len(before) // 2]     # a look changes nothing

    fixed = retrain("registry", "--root", root, "doctor", "ctr", "--repair", "--who",
                    "oncall", "--why", "disk error")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "now names version 3" in fixed.stdout
    assert reg.current_version("ctr") == 3
    pointer = json.loads(current.read_text())
    assert (pointer["action"], pointer["who"], pointer["why"]) == ("doctor", "oncall",
                                                                   "disk error")
    kept = [p for p in mdir.iterdir() if p.name.startswith("CURRENT.damaged-")]
    assert len(kept) == 1 and kept[0].read_bytes() == before[: len(before) // 2]
    assert reg.check("ctr") == []
    assert retrain("registry", "--root", root, "doctor", "ctr").returncode == 0

    back = retrain("registry", "--root", root, "rollback", "ctr", "--why", "after repair")
    assert back.returncode == 0, back.stderr
    assert "version 2 is now published (was 3)" in back.stdout
    assert reg.check("ctr") == []


def test_rollback_to_a_named_version_repairs_a_truncated_current_from_the_cli(reg, model):
    mdir = three_versions(reg, model)
    (mdir / "CURRENT").write_bytes(b'{"model_name": "ctr", "vers')
    out = retrain("registry", "--root", str(reg.root), "rollback", "ctr", "--to", "3",
                  "--why", "CURRENT truncated")
    assert out.returncode == 0, out.stderr
    assert "version 3 is now published (was a damaged CURRENT)" in out.stdout
    assert reg.check("ctr") == []


def test_list_shows_a_version_with_truncated_metadata_as_damaged(reg, model):
    mdir = three_versions(reg, model)
    meta_file = mdir / "2" / "retrain_meta.json"
    meta_file.write_bytes(meta_file.read_bytes()[:40])
    assert [m["version"] for m in reg.list_versions("ctr")] == [1, 3]   # the API's promise
    assert [(e["version"], e["state"]) for e in reg.inventory("ctr")] == [
        (1, "intact"), (2, "damaged"), (3, "intact")]

    out = retrain("registry", "--root", str(reg.root), "list", "ctr")
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert "3 version(s)" in lines[0] and "current: 3" in lines[0]
    assert lines[3].split()[:2] == ["2", "DAMAGED"]
    assert ("  damaged: version 2: retrain_meta.json: missing, unreadable or not a JSON "
            "object") in lines
    # The doctor marks it; the list still shows it damaged, and exits 0: it is known.
    assert retrain("registry", "--root", str(reg.root), "doctor", "ctr",
                   "--repair").returncode == 0
    out = retrain("registry", "--root", str(reg.root), "list", "ctr")
    assert out.returncode == 0 and out.stdout.splitlines()[3].split()[:2] == ["2", "DAMAGED"]
    report = reg.check_report("ctr")
    assert report["errors"] == []
    assert any(w.startswith("version 2 (marked damaged)") for w in report["warnings"])


def test_doctor_moves_current_off_a_tampered_version_and_marks_it(reg, model):
    mdir = three_versions(reg, model)
    swap(mdir / "3" / "variables" / "variables.data-00000-of-00001")
    swap(mdir / "2" / "variables" / "variables.index")   # the one before is hit too
    report = reg.doctor("ctr")
    assert report["current"] == {"state": "damaged", "version": 3,
                                 "problem": "names version 3, which is damaged"}
    assert report["target"] == 1 and report["actions"] == []
    assert [v["state"] for v in report["versions"]] == ["intact", "damaged", "damaged"]

    fixed = reg.doctor("ctr", repair=True, who="oncall", why="tampered files")
    assert fixed["current"]["state"] == "ok" and reg.current_version("ctr") == 1
    assert any("now names version 1" in a for a in fixed["actions"])
    assert {"marked version 2 damaged", "marked version 3 damaged"} <= set(fixed["actions"])
    assert [m["stage"] for m in map(lambda v: reg.get("ctr", v), (1, 2, 3))] == [
        "published", "archived", "archived"]
    assert json.loads((mdir / "DAMAGED.json").read_text())["versions"].keys() == {"2", "3"}
    assert reg.check("ctr") == []
    # The damage stays refused by every reader, marked or not.
    with pytest.raises(ModelTampered):
        reg.rollback("ctr", 3, who="x", why="y")
    # A new publish goes on top, compared against the intact version now current.
    assert reg.publish(model, "ctr", meta_for("run-4"), expect_current=1)["version"] == 4
    # Files restored: the next repair unmarks the version.
    (mdir / "3" / "variables" / "variables.data-00000-of-00001").write_bytes(b"\x01" * 64)
    again = reg.doctor("ctr", repair=True)
    assert "unmarked version 3: it verifies again" in again["actions"]


def test_doctor_with_no_intact_version_leaves_current_and_says_so(reg, model):
    reg.publish(model, "ctr", meta_for("run-1"))
    mdir = reg.root / "ctr"
    swap(mdir / "1" / "saved_model.pb", same_size=False)
    (mdir / "CURRENT").write_bytes(b"\x00" * 5)
    out = retrain("registry", "--root", str(reg.root), "doctor", "ctr", "--repair")
    assert out.returncode == 1
    assert "unresolved: CURRENT: is not valid JSON" in out.stdout
    assert (mdir / "CURRENT").read_bytes() == b"\x00" * 5
    with pytest.raises(RegistryBroken):     # publishes keep refusing
        reg.publish(model, "ctr", meta_for("run-2"))


def test_doctor_without_a_model_checks_every_model_and_has_help(reg, model):
    three_versions(reg, model)
    reg.publish(model, "text", meta_for("run-t"))
    out = retrain("registry", "--root", str(reg.root), "doctor")
    assert out.returncode == 0, out.stdout
    assert "model ctr: CURRENT names version 3; 3 version(s), 0 damaged" in out.stdout
    assert "model text: CURRENT names version 1; 1 version(s), 0 damaged" in out.stdout
    for action in ("doctor", "check", "list", "rollback"):
        helped = retrain("registry", action, "--help")
        assert helped.returncode == 0 and "--root" in helped.stdout
    assert "--repair" in retrain("registry", "doctor", "--help").stdout


def test_a_damaged_current_is_never_echoed(reg, model):
    """A CURRENT holding other JSON (an attacker's, a wrong tool's): named, not printed."""
    mdir = three_versions(reg, model)
    (mdir / "CURRENT").write_text(json.dumps({"version": SECRET}))
    outs = [retrain("registry", "--root", str(reg.root), action, "ctr")
            for action in ("list", "check", "doctor", "show")]
    assert all(o.returncode != 0 for o in outs)
    assert all("CURRENT has no valid 'version'" in o.stdout + o.stderr for o in outs)
    no_echo(*(o.stdout + o.stderr for o in outs))


def test_a_folder_swapped_for_a_link_and_special_registry_files_never_hang(reg, model, tmp_path):
    """`variables/` replaced by a link to an identical copy elsewhere; a FIFO as a meta file
    and as CURRENT: each named within seconds, and the doctor repairs around them."""
    import shutil

    mdir = three_versions(reg, model)
    copy = tmp_path / "elsewhere"
    shutil.copytree(mdir / "3" / "variables", copy)
    shutil.rmtree(mdir / "3" / "variables")
    (mdir / "3" / "variables").symlink_to(copy)
    (mdir / "2" / "retrain_meta.json").unlink()
    os.mkfifo(mdir / "2" / "retrain_meta.json")
    (mdir / "CURRENT").unlink()
    os.mkfifo(mdir / "CURRENT")
    started = time.monotonic()
    assert reg.integrity("ctr", 3)["problems"][0] == (
        "variables: is a symbolic link, not among the files recorded when it was published "
        "(added since)")
    out = retrain("registry", "--root", str(reg.root), "doctor", "ctr", "--repair", timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "CURRENT, which is a FIFO, not a regular file, now names version 1" in out.stdout
    assert "damaged: version 3 (archived, marked)" in out.stdout
    assert time.monotonic() - started < 20
    assert reg.current_version("ctr") == 1 and reg.check("ctr") == []
