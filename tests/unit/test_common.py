"""Shared plumbing: span derivation, atomic writes, the step entry point and launcher."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import sys

import pytest

from retrain.common import atomic, paths, processes, spans, step

from retrain.orchestration import launch, step_logs
from components.ctr import features as F

UTC = dt.timezone.utc


def test_span_is_the_day_before_the_logical_date():
    assert spans.derive_span(None, dt.datetime(2026, 11, 8, 0, 0, tzinfo=UTC)) == dt.date(2026, 11, 7)


def test_span_without_logical_date_falls_back_to_run_after():
    run_after = dt.datetime(2026, 11, 8, 13, 5, tzinfo=UTC)
    assert spans.derive_span(None, None, run_after) == dt.date(2026, 11, 7)


def test_span_param_wins_and_is_validated():
    assert spans.derive_span("2026-10-01", dt.datetime(2026, 11, 8, tzinfo=UTC)) == dt.date(2026, 10, 1)
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        spans.derive_span("yesterday", None)
    with pytest.raises(ValueError, match="cannot derive"):
        spans.derive_span(None, None, None)


def test_window_is_oldest_first_and_ends_at_span():
    assert spans.window(dt.date(2026, 11, 3), 3) == [dt.date(2026, 11, 1), dt.date(2026, 11, 2),
                                                     dt.date(2026, 11, 3)]
    with pytest.raises(ValueError):
        spans.window(dt.date(2026, 11, 3), 0)


def test_run_dir_is_keyed_by_span_and_a_path_safe_run_id(tmp_path):
    d = paths.run_dir(tmp_path, "ctr", dt.date(2026, 11, 7), "manual__2026-11-30T08:23:43+00:00")
    assert d == tmp_path / "runs" / "ctr" / "dt=2026-11-07" / "manual__2026-11-30T08_23_43_00_00"


def test_atomic_dir_publishes_only_on_success(tmp_path):
    target = tmp_path / "artifact"
    with pytest.raises(RuntimeError):
        with atomic.atomic_dir(target) as tmp:
            (tmp / "half").write_text("x")
            raise RuntimeError("killed")
    assert not target.exists() and list(tmp_path.iterdir()) == []
    with atomic.atomic_dir(target) as tmp:
        (tmp / "whole").write_text("x")
    assert (target / "whole").exists()
    with atomic.atomic_dir(target) as tmp:      # a rerun replaces it in one rename
        (tmp / "again").write_text("y")
    assert sorted(p.name for p in target.iterdir()) == sorted(["again", atomic.MARKER])
    assert [p.name for p in tmp_path.iterdir()] == ["artifact"]


def test_atomic_dir_clears_what_a_killed_writer_left_but_not_a_live_one(tmp_path):
    import subprocess
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".model.tmp-{dead.pid}-abc"
    live = tmp_path / f".model.tmp-{os.getpid()}-def"
    for d in (stale, live):
        d.mkdir()
        (d / "half-written").write_text("x")
    with atomic.atomic_dir(tmp_path / "model") as tmp:
        (tmp / "ok").write_text("done")
    assert not stale.exists() and live.exists()
    assert (tmp_path / "model" / "ok").read_text() == "done"


def test_atomic_dir_never_replaces_what_retrain_did_not_write(tmp_path):
    """A rerun replaces its own folder whole; a file, a link or someone's folder given as
    the target is refused before the work starts and left as it was."""
    ran = []
    afile = tmp_path / "passwd"
    afile.write_text("root:x:0:0\n")
    theirs = tmp_path / "home"
    (theirs / "docs").mkdir(parents=True)
    (theirs / "docs" / "thesis.tex").write_text("chapter 1")
    link = tmp_path / "latest"
    link.symlink_to(theirs)
    for target in (afile, theirs, link):
        with pytest.raises(FileExistsError, match="refusing to replace it"):
            with atomic.atomic_dir(target) as tmp:
                ran.append(target)
                (tmp / "part").write_text("x")
    assert ran == []                                   # refused before any work
    assert afile.read_text() == "root:x:0:0\n" and link.resolve() == theirs
    assert (theirs / "docs" / "thesis.tex").read_text() == "chapter 1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "latest", "passwd"]

    empty = tmp_path / "made-by-mkdir"
    empty.mkdir()
    with atomic.atomic_dir(empty) as tmp:              # an empty folder may be used
        (tmp / "part").write_text("1")
    with atomic.atomic_dir(empty) as tmp:              # and rerun: it is retrain's now
        (tmp / "part").write_text("2")
    assert (empty / "part").read_text() == "2" and (empty / atomic.MARKER).is_file()


def test_atomic_dir_refuses_a_folder_that_appeared_while_it_worked(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(FileExistsError, match="did not write"):
        with atomic.atomic_dir(target) as tmp:
            (tmp / "part").write_text("ours")
            target.mkdir()
            (target / "theirs").write_text("keep")
    assert [p.name for p in target.iterdir()] == ["theirs"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]   # no temp left behind


def test_write_json_roundtrip(tmp_path):
    path = atomic.write_json(tmp_path / "a" / "b.json", {"x": 1, "d": dt.date(2026, 1, 2)})
    assert atomic.read_json(path) == {"x": 1, "d": "2026-01-02"}


def test_eval_split_is_stable_and_roughly_proportional():
    ids = [f"2026-11-01-{i:08d}" for i in range(20_000)]
    share = sum(F.is_eval(i, 20) for i in ids) / len(ids)
    assert 0.18 < share < 0.22
    assert [F.is_eval(i, 20) for i in ids[:100]] == [F.is_eval(i, 20) for i in ids[:100]]
    assert all(F.is_eval(i, 20) <= F.is_eval(i, 30) for i in ids[:1000])  # nested splits


def test_eval_mask_of_many_ids_is_is_eval_of_each():
    """The preprocessing job's batched split must put every row where the per-row rule
    (used by evaluation and the raw-data readers) puts it, text or bytes ids alike."""
    ids = [f"2026-11-01-{i:08d}" for i in range(5_000)] + ["ünïcode-id", "", "x" * 300]
    expected = [F.is_eval(i, 20) for i in ids]
    assert F.eval_mask(ids, 20).tolist() == expected
    assert F.eval_mask([i.encode() for i in ids], 20).tolist() == expected
    assert F.eval_mask([], 20).tolist() == []
    import pyarrow as pa
    chunked = pa.chunked_array([ids[:10], ids[10:]], pa.string())
    assert F.eval_mask(chunked, 20).tolist() == expected
    assert F.eval_mask(pa.array(ids[3:]).slice(2), 20).tolist() == expected[5:]   # offset


def test_the_eval_split_hash_never_changes():
    """Which rows of every day are held out (and so never trained on) is decided by this
    hash: a silent change would put old training rows into new eval sets."""
    assert [F.eval_bucket(i) for i in ("2026-11-01-00000001", "", "ünï", "e-0")] == \
        [38, 3, 52, F.eval_bucket(b"e-0")]
    assert F.eval_bucket("e-0") == 17


@dataclasses.dataclass
class _Spec:
    n: int
    name: str = "x"


def _run(spec: _Spec) -> dict:
    if spec.n < 0:
        raise ValueError(f"n must be >= 0, got {spec.n}")
    return {"double": spec.n * 2}


def test_step_main_writes_result_or_error(tmp_path):
    out = tmp_path / "r.json"
    assert step.main(_Spec, _run, ["--spec", '{"n": 2}', "--result-file", str(out)]) == 0
    assert json.loads(out.read_text()) == {"double": 4}
    assert step.main(_Spec, _run, ["--spec", '{"n": -1}', "--result-file", str(out)]) == 1
    assert "n must be >= 0" in json.loads(out.read_text())["error"]
    assert step.main(_Spec, _run, ["--spec", '{"m": 1}', "--result-file", str(out)]) == 1
    assert "unknown field" in json.loads(out.read_text())["error"]


def test_step_main_never_overwrites_a_file_that_is_not_a_result(tmp_path, capsys):
    """`--result-file` run by hand: an earlier result is replaced (a retry), a file that is
    not one, or a link, is refused before the step runs, unchanged and not echoed."""
    other = tmp_path / "passwd"
    other.write_text("root:x:0:0:SECRET\n")
    link = tmp_path / "link.json"
    link.symlink_to(other)
    for target in (other, link):
        with pytest.raises(SystemExit) as stop:
            step.main(_Spec, _run, ["--spec", '{"n": 2}', "--result-file", str(target)])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert f"--result-file {target} exists and is not a step's result" in err
        assert "SECRET" not in err
    assert other.read_text() == "root:x:0:0:SECRET\n"
    earlier = tmp_path / "r.json"
    earlier.write_text('{"error": "an earlier attempt"}\n')
    assert step.main(_Spec, _run, ["--spec", '{"n": 2}', "--result-file", str(earlier)]) == 0
    assert json.loads(earlier.read_text()) == {"double": 4}


def test_launcher_surfaces_the_steps_own_error(tmp_path):
    # components.ctr.validate fails fast (before heavy imports) on a missing span dir.
    with pytest.raises(launch.StepFailed, match="does not exist|not found|No such|missing"):
        launch.run_step("components.ctr.validate", {"span_dir": str(tmp_path / "nope"),
                                                 "out_dir": str(tmp_path / "out")})


def test_a_steps_log_levels_are_the_task_logs_levels():
    """A step's WARNING is a WARNING in the task log (the UI's level filter works), through
    relays such as the PS cluster's "[chief] " prefix; a record's continuation lines and a
    traceback keep their record's level; TensorFlow's CUDA probe is noise without a GPU."""
    levels = step_logs.LineLevels(gpu=False)
    lines = {"INFO retrain.ps_train: step 3/3": logging.INFO,
             "[chief] WARNING tensorflow: a warning": logging.WARNING,
             "  its second line": logging.WARNING,
             "[ps/0] W0000 00:00:1.5 1 file.cc:1] a C++ warning": logging.WARNING,
             "[launcher] INFO done in 3s": logging.INFO,
             "Traceback (most recent call last):": logging.ERROR,
             '  File "x.py", line 1, in <module>': logging.ERROR,
             "ValueError: bad": logging.ERROR,
             "[worker/0] E0000 00:00:1 2 cuda_platform.cc:52] failed call to cuInit: 303":
                 logging.DEBUG,
             # printed lines after the probe: benign, not its continuation (they were ERROR)
             "[worker/0] worker 0: no GPU visible, using CPU": logging.INFO,
             "[worker/0] E0000 00:00:1 2 other.cc:1] a real C++ error": logging.ERROR,
             "    its indented detail": logging.ERROR,
             "[ps/0] ps 0 serving at grpc://127.0.0.1:5000": logging.INFO,
             "[chief] WARNING tensorflow: another warning": logging.WARNING,
             "[chief]   its relayed second line": logging.WARNING,
             "[chief] I0000 00:00:1 2 cudart_stub.cc:31] Could not find cuda drivers on "
             "your machine, GPU will not be used.": logging.DEBUG,
             # TensorFlow's own choice of kernel, logged at E level: not an error
             "[train] E0000 00:00:1 2 util.cc:131] oneDNN supports DT_INT64 only on platforms "
             "with AVX-512. Falling back to the default Eigen-based implementation if "
             "present.": logging.INFO}
    assert {line: levels(line) for line in lines} == lines
    assert step_logs.LineLevels(gpu=True)("E0000 1 cuda_platform.cc:52] failed call to "
                                       "cuInit") == logging.ERROR


def test_a_failed_steps_traceback_is_logged_as_an_error(tmp_path, caplog):
    with caplog.at_level(logging.DEBUG, logger="retrain.launch"), \
            pytest.raises(launch.StepFailed):
        launch.run_step("components.ctr.validate", {"span_dir": str(tmp_path / "nope"),
                                                 "out_dir": str(tmp_path / "out")})
    tb = [r for r in caplog.records if "Traceback" in r.getMessage()]
    assert tb and all(r.levelno == logging.ERROR for r in tb)
    assert any(r.levelno == logging.INFO for r in caplog.records)   # "running ..." stays INFO


def test_launcher_returns_the_result(tmp_path):
    from components.ctr.generate import GenerateSpec
    spec = dataclasses.asdict(GenerateSpec(out_root=str(tmp_path), start="2026-11-01", days=1,
                                           rows_per_day=200, n_users=1000, n_items=500,
                                           n_categories=20))
    result = launch.run_step("components.ctr.generate", spec)
    assert (paths.raw_span_dir(tmp_path, "ctr", dt.date(2026, 11, 1)) / "_SUCCESS").exists()
    assert result


def test_backfills_are_shadow_runs_unless_the_user_opts_in():
    from airflow.utils.types import DagRunType
    assert spans.is_shadow(None, DagRunType.BACKFILL_JOB) is True
    assert spans.is_shadow(None, "backfill") is True
    assert spans.is_shadow(False, DagRunType.BACKFILL_JOB) is False      # opted in to publish
    assert spans.is_shadow(None, DagRunType.SCHEDULED) is False
    assert spans.is_shadow(None, DagRunType.MANUAL) is False
    assert spans.is_shadow(True, DagRunType.MANUAL) is True
    assert spans.is_shadow(None, None) is False


def test_what_a_retry_cannot_mend_is_not_retried():
    """Malformed input as the libraries report it (pyarrow, json) and wrong parameters are
    bad data; an OSError or a timeout is transient (a campaign finding: a corrupt Parquet
    file and an unknown config key were retried as transient)."""
    import json

    import pyarrow as pa

    from retrain.common.errors import BAD_DATA, TRANSIENT, kind_of
    from retrain.common.rawfiles import NoParts
    try:
        json.loads("{")
    except ValueError as e:
        decode_error = e
    for exc in (pa.ArrowInvalid("Index not in dictionary bounds"), decode_error,
                ValueError("window must be at least 1 day"), TypeError("bad spec field"),
                NoParts("span has no part files")):
        assert kind_of(exc) == BAD_DATA, exc
    for exc in (OSError("disk full"), TimeoutError(), MemoryError(), RuntimeError("lost")):
        assert kind_of(exc) == TRANSIENT, exc


def test_a_launchers_scratch_folder_lives_in_the_run_and_goes_on_every_exit(tmp_path,
                                                                            monkeypatch):
    import subprocess
    import tempfile
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    run = tmp_path / "run"
    assert launch.output_dir_of({"out_dir": str(run / "model")}) == run / "model"
    assert launch.output_dir_of({"train": {"out_dir": str(run / "m")}}) == run / "m"
    assert launch.output_dir_of({"output_dir": "gs://bucket/x"}) is None
    assert launch.output_dir_of({"out_dir": "relative/x", "span": "2026-12-01"}) is None
    with processes.scratch_dir(run / "model", "launch-x") as tmp:
        assert tmp.parent == run and tmp.name.startswith(f".model.launch-x-{os.getpid()}-")
    assert not tmp.exists()
    with pytest.raises(RuntimeError), processes.scratch_dir(run / "model", "launch-x") as tmp:
        raise RuntimeError("the step failed")
    assert not tmp.exists()
    # What a dead launcher of this host left is removed by the next; a live one's is kept.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = processes._host()
    stale = run / f".model.launch-x-{dead.pid}-{host}-abc"
    live = run / f".model.launch-x-{os.getpid()}-{host}-def"
    other_host = run / f".model.launch-x-{dead.pid}-elsewhere-ghi"
    for d in (stale, live, other_host):
        d.mkdir()
    with processes.scratch_dir(run / "model", "launch-x"):
        pass
    assert not stale.exists() and live.exists() and other_host.exists()
    # No run folder known: the system temp dir, removed all the same.
    with processes.scratch_dir(None, "launch-x") as tmp:
        assert tmp.parent == system_tmp and tmp.name.startswith("retrain-launch-x-")
    assert list(system_tmp.iterdir()) == []


def test_commands_find_the_checkouts_home_from_any_folder(tmp_path, monkeypatch):
    """`retrain registry list` run outside the checkout said "unknown model": the default
    home was ./var of wherever it ran."""
    import subprocess
    from pathlib import Path
    repo = Path(paths.__file__).resolve().parents[2]
    monkeypatch.delenv(paths.ENV_HOME, raising=False)
    monkeypatch.chdir(tmp_path)
    assert paths.artifact_root() == (repo / "var").resolve()
    assert paths.artifact_root(tmp_path / "h") == tmp_path / "h"          # explicit wins
    monkeypatch.setenv(paths.ENV_HOME, str(tmp_path / "env-home"))
    assert paths.artifact_root() == tmp_path / "env-home"
    env = {k: v for k, v in os.environ.items() if k != paths.ENV_HOME}
    out = subprocess.run([sys.executable, "-m", "retrain.cli", "registry", "list",
                          "no-such-model-here"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and str((repo / "var" / "registry").resolve()) in out.stderr, \
        out.stderr[-500:]
