"""Hostile days (issue 45, items 4, 5, 7): only regular files inside the raw root are read,
a day holds a bounded number of parts, a day with `_SUCCESS` and no row is bad data, and a
training window of one class is refused, all typed (not retried) and within seconds.

A FIFO named like a part used to make validation wait forever: every check that could meet
one runs in a child process under a wall-clock limit, so a regression fails the test
instead of hanging it. Real files, real steps through their entry points, no mocks.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from retrain.common import rawfiles
from retrain.common.errors import BAD_DATA, OneClass, kind_of, refuse_one_class
from retrain.common.quarantine import is_quarantined

ROOT = Path(__file__).resolve().parents[2]
DAY = "2026-11-01"
LIMIT_S = 120        # far above the seconds these take: only a hang reaches it


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    from components.ctr.generate import GenerateSpec, run as generate
    home = tmp_path_factory.mktemp("special")
    generate(GenerateSpec(out_root=str(home), start=DAY, days=1, rows_per_day=1200,
                          n_users=800, n_items=400, n_categories=20))
    return home


@pytest.fixture
def home(generated, tmp_path):
    shutil.copytree(generated, tmp_path / "home")
    return tmp_path / "home"


def day_of(home) -> Path:
    return home / "raw" / "ctr" / f"dt={DAY}"


def run_validate(home, timeout=LIMIT_S, **extra) -> tuple[dict, float]:
    """The CTR validation step through its entry point in a child process, as a task runs
    it; (its result file, seconds). A child still running at `timeout` fails the test."""
    spec = {"span_dir": str(day_of(home)), "out_dir": str(home / "runs" / "v"),
            "history_root": str(home / "runs" / "h"), "quarantine_dir": str(home / "q"),
            "run_id": "r1", "data_docs": False, **extra}
    result = home / "result.json"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "components.ctr.validate", "--spec",
                           json.dumps(spec), "--result-file", str(result)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - t0
    assert proc.returncode != 0 or result.exists(), proc.stderr[-2000:]
    return json.loads(result.read_text()), seconds


def _error(result: dict) -> str:
    return result.get("error") or json.dumps(result)


# --------------------------------------------------------------- special files and links


def test_a_fifo_named_like_a_part_is_refused_in_seconds_and_quarantined(home):
    os.mkfifo(day_of(home) / "part-00001.parquet")
    result, seconds = run_validate(home)
    assert result["error_kind"] == BAD_DATA
    assert "part-00001.parquet is not a regular file: it is a FIFO" in _error(result)
    assert seconds < 60
    assert is_quarantined(home / "q", f"dt={DAY}")
    marker = json.loads((home / "q" / f"dt={DAY}.json").read_text())
    assert marker["failed"][0].startswith("unreadable part: ")


def test_the_airflow_side_content_digest_refuses_a_fifo_without_opening_it(home):
    """The validate task hashes the day's files before its step runs (chain of custody):
    a FIFO anywhere in the day, part or not, must not make that hash wait for a writer,
    and its refusal fails the task without retry (AirflowFailException), as bad data."""
    os.mkfifo(day_of(home) / "notes")
    code = ("import sys\n"
            "from airflow.sdk.exceptions import AirflowFailException\n"
            "from retrain.orchestration.dag_factory import raw_ref_or_fail\n"
            "try:\n    raw_ref_or_fail(sys.argv[1])\n"
            "except AirflowFailException as e:\n    print('not retried:', e)\n    sys.exit(3)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(day_of(home))], cwd=ROOT,
                          capture_output=True, text=True, timeout=LIMIT_S)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "notes is not a regular file: it is a FIFO" in proc.stdout


def test_sockets_and_folders_named_like_parts_are_refused_by_every_listing(home, monkeypatch):
    day = day_of(home)
    sock = socket.socket(socket.AF_UNIX)
    monkeypatch.chdir(day)                 # a socket path is limited to 108 bytes
    sock.bind("part-00002.jsonl")
    try:
        with pytest.raises(rawfiles.UnsafeInput, match="part-00002.jsonl is not a regular "
                                                       "file: it is a socket"):
            rawfiles.list_parts(day, (".parquet", ".jsonl"))
        from components.ctr import rawdata
        with pytest.raises(rawfiles.UnsafeInput, match="it is a socket"):
            rawdata.span_parts(day)
    finally:
        sock.close()
        (day / "part-00002.jsonl").unlink()
    (day / "part-00003.jsonl").mkdir()
    from components.text import rawdata as text_rawdata
    with pytest.raises(rawfiles.UnsafeInput, match="part-00003.jsonl is not a regular file: "
                                                   "it is a folder"):
        text_rawdata.span_parts(day)


def test_a_day_folder_linked_out_of_the_root_is_refused(home, tmp_path):
    """Part symlinks out of the root were refused; a whole day linked out was read."""
    outside = tmp_path / "elsewhere" / f"dt={DAY}"
    shutil.move(str(day_of(home)), outside)
    day_of(home).symlink_to(outside, target_is_directory=True)
    result, _ = run_validate(home)
    assert result["error_kind"] == BAD_DATA
    assert f"day folder {day_of(home)} resolves to {outside}, outside the raw root" \
        in _error(result)
    assert is_quarantined(home / "q", f"dt={DAY}")
    # Every other reader refuses it too: preprocessing's listing, the recommendations' and
    # evaluation's reader, and the content digest of the Airflow side.
    from beam_jobs.preprocess_ctr import window_files
    from components.ctr import rawdata
    from retrain.orchestration.lineage import raw_span_ref
    import datetime as dt
    for read in (lambda: window_files(home / "raw" / "ctr", dt.date.fromisoformat(DAY), 1),
                 lambda: rawdata.span_parts(day_of(home)),
                 lambda: raw_span_ref(day_of(home))):
        with pytest.raises(rawfiles.UnsafeInput, match="outside the raw root"):
            read()
    # A day linked to another folder inside the root stays readable (a producer's alias).
    inside = home / "raw" / "ctr" / ".staging"
    shutil.move(str(outside), inside)
    day_of(home).unlink()
    day_of(home).symlink_to(inside, target_is_directory=True)
    assert rawdata.span_parts(day_of(home))


def test_a_part_of_a_day_linked_out_of_the_root_is_refused_by_snapshot(tmp_path):
    """Readers that check a flat list of parts (preprocessing, evaluation) see the day's
    link through each part's real path."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "part-0.jsonl").write_text('{"a": 1}\n')
    root = tmp_path / "raw"
    root.mkdir()
    (root / f"dt={DAY}").symlink_to(outside, target_is_directory=True)
    with pytest.raises(rawfiles.UnsafeInput, match=r"part-0.jsonl resolves to .*outside/part-0.jsonl, "
                                                   r"outside the raw root"):
        rawfiles.snapshot([root / f"dt={DAY}" / "part-0.jsonl"], root)


# --------------------------------------------------------------- many small parts


def test_too_many_parts_are_refused_before_any_is_read_naming_the_bound(home):
    day = day_of(home)
    table = pq.read_table(day / "part-00000.parquet").slice(0, 1)
    pq.write_table(table, day / "part-09999.parquet")
    for i in range(1, 1100):     # links to one small part: counted, never read
        (day / f"part-{i:05d}.parquet").hardlink_to(day / "part-09999.parquet")
    result, seconds = run_validate(home)
    assert result["error_kind"] == BAD_DATA
    assert f"day {day} holds 1101 part files, over the limit of 1000 (max_parts_per_day)" \
        in _error(result)
    assert seconds < 60
    marker = json.loads((home / "q" / f"dt={DAY}.json").read_text())
    assert marker["failed"][0].startswith("unreadable day: ")
    # The family's config raises the bound: the listing goes through.
    config = home / "many_parts.yaml"
    text = (ROOT / "components/ctr/feature_configs/generated.yaml").read_text()
    config.write_text(text.replace("max_parts_per_day: 1000", "max_parts_per_day: 2000"))
    from components.ctr import feature_config
    limits = feature_config.load_for(str(config)).validation.record_limits()
    assert limits.max_parts_per_day == 2000
    assert len(rawfiles.list_parts(day, (".parquet",), max_parts=2000)) == 1101


def test_a_day_of_fifty_thousand_parts_is_refused_in_seconds(tmp_path):
    """Issue 45's 50,000 one-row parts: counted from the folder's names, refused before
    any is stat'ed, opened or read (it used to run past 900 s)."""
    day = tmp_path / "raw" / f"dt={DAY}"
    day.mkdir(parents=True)
    (day / "seed").write_text('{"a": 1}\n')
    for i in range(50_000):
        os.link(day / "seed", day / f"part-{i:05d}.jsonl")
    t0 = time.perf_counter()
    with pytest.raises(rawfiles.TooManyParts, match=r"holds 50000 part files, over the limit "
                                                    r"of 1000 \(max_parts_per_day\)") as e:
        rawfiles.list_parts(day, (".jsonl",))
    assert time.perf_counter() - t0 < 10
    assert kind_of(e.value) == BAD_DATA


# --------------------------------------------------------------- empty and one-class data


def test_a_day_with_success_and_zero_rows_is_quarantined_not_retried(home):
    """A Parquet part with its schema and no row: the statistics job wrote nothing for
    it and validation failed with a FileNotFoundError (transient: retried forever)."""
    day = day_of(home)
    table = pq.read_table(day / "part-00000.parquet")
    pq.write_table(table.slice(0, 0), day / "part-00000.parquet")
    result, _ = run_validate(home)
    assert result["error_kind"] == BAD_DATA, _error(result)
    assert f"span dt={DAY} has no usable rows" in _error(result)
    assert "[row_count]" in _error(result)
    assert is_quarantined(home / "q", f"dt={DAY}")


def test_a_day_with_success_and_no_part_is_quarantined_not_retried(home):
    (day_of(home) / "part-00000.parquet").unlink()
    result, _ = run_validate(home)
    assert result["error_kind"] == BAD_DATA
    assert "has no part-*.parquet or part-*.jsonl[.gz] files" in _error(result)
    marker = json.loads((home / "q" / f"dt={DAY}.json").read_text())
    assert marker["failed"][0].startswith("unreadable day: ")


def test_a_one_class_ctr_window_is_refused_typed_before_training(tmp_path):
    from components.ctr import split_stats
    from components.ctr.formats import SPLIT_STATS_FILE, TRAIN_DIR
    from components.ctr.train_input import window_rows
    from components.ctr import feature_config
    pre = tmp_path / "pre"
    pre.mkdir()
    cfg = feature_config.default()
    split_stats.write(pre / SPLIT_STATS_FILE, {TRAIN_DIR: split_stats.SplitStats(500, 0.0, {})})
    with pytest.raises(OneClass, match=r"one class only \(click: all 500 labelled rows are "
                                       r"'0'\)") as e:
        window_rows(pre, cfg, use_validation=False)
    assert kind_of(e.value) == BAD_DATA
    split_stats.write(pre / SPLIT_STATS_FILE, {TRAIN_DIR: split_stats.SplitStats(500, 3.0, {})})
    assert window_rows(pre, cfg, use_validation=False)[0].rows == 500


def test_a_one_class_text_window_is_refused_typed_and_leaves_no_output(tmp_path):
    """Every ticket of the window is 'billing' (a validation override let the day
    through): the preprocessing job refuses before training, not a retried crash later."""
    import gzip

    from beam_jobs import preprocess_text
    config = tmp_path / "tickets.yaml"
    config.write_text("example_id: tid\ntext_template: '{subject}: {body}'\n"
                      "tasks:\n  queue: {label_column: team, labels: [billing, outage]}\n"
                      "validation: {min_rows: 10}\n")
    span = tmp_path / "raw" / "dt=2026-12-01"
    span.mkdir(parents=True)
    lines = [json.dumps({"tid": i, "subject": "Refund", "body": f"ticket {i} about money",
                         "team": "billing"}) + "\n" for i in range(40)]
    (span / "part-0.jsonl.gz").write_bytes(gzip.compress("".join(lines).encode()))
    (span / "_SUCCESS").write_text("")
    out = tmp_path / "pre"
    with pytest.raises(OneClass, match=r"queue: all \d+ labelled rows are 'billing'") as e:
        preprocess_text.run([f"--raw-root={tmp_path / 'raw'}", "--span=2026-12-01",
                             "--window-days=1", f"--output-dir={out}",
                             f"--text-config={config}", "--runner=DirectRunner"])
    assert kind_of(e.value) == BAD_DATA
    assert not out.exists()


def test_refuse_one_class_judges_each_task_and_skips_unlabelled_ones():
    refuse_one_class({"a": {"x": 3, "y": 1}, "b": {"x": 0, "y": 0}}, "w")   # fine
    with pytest.raises(OneClass, match=r"w: .*\(b: all 4 labelled rows are 'y'\)"):
        refuse_one_class({"a": {"x": 3, "y": 1}, "b": {"x": 0, "y": 4}}, "w")


def test_a_one_class_ctr_window_fails_the_cluster_as_bad_data_not_retried(home, tmp_path):
    """The chief refuses it in its own process; the launcher must pass the refusal on as
    bad data (it used to become ClusterFailed, which the task retried). A real preprocessed
    day whose counts say no row was clicked."""
    from components.ctr import split_stats
    from components.ctr.cluster import ClusterSpec, run
    from components.ctr.formats import SPLIT_STATS_FILE, TRAIN_DIR
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    pre = tmp_path / "pre"
    preprocess(PreprocessSpec(raw_root=str(home / "raw" / "ctr"), span=DAY, output_dir=str(pre),
                              window_days=1))
    split_stats.write(pre / SPLIT_STATS_FILE, {TRAIN_DIR: split_stats.SplitStats(500, 0.0, {})})
    t0 = time.perf_counter()
    with pytest.raises(Exception) as e:
        run(ClusterSpec(preprocess_dir=str(pre), out_dir=str(tmp_path / "model"),
                        train={"epochs": 1}, startup_timeout_s=LIMIT_S))
    assert kind_of(e.value) == BAD_DATA, repr(e.value)
    assert "one class only" in str(e.value)
    assert time.perf_counter() - t0 < LIMIT_S
