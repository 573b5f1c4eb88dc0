"""The whole Beam + tf.Transform preprocessing job on tiny data: nothing lost on a
corrupted input set, no training/serving skew, no dependence on shared process state.
(A truncated gzip file failing the read is tested in tests/unit/test_preprocess_ctr_parsing.py,
inside a Beam pipeline, without paying for a tf.Transform run.)

Reuses the session fixtures of tests/integration/conftest.py (2 days x 4,000 rows,
preprocessed once in-process) as the reference every other run is compared with.
"""
from __future__ import annotations

import gzip
import os
import time
import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from components.ctr import features as F

pytestmark = pytest.mark.integration

EVAL_PERCENT = 25   # as in conftest.py
SPAN = "2026-11-03"


def read_split(output_dir: str, split: str) -> dict[str, np.ndarray]:
    """All transformed examples of a split, as numpy columns."""
    import tensorflow as tf
    import tensorflow_transform as tft
    spec = tft.TFTransformOutput(f"{output_dir}/transform_fn_output").transformed_feature_spec()
    files = sorted(tf.io.gfile.glob(f"{output_dir}/{split}/*.tfrecord.gz"))
    cols: dict[str, list] = {k: [] for k in spec}
    for batch in (tf.data.TFRecordDataset(files, compression_type="GZIP").batch(4096)
                  .map(lambda x: tf.io.parse_example(x, spec))):
        for k in spec:
            cols[k].append(batch[k].numpy().reshape(-1))
    return {k: np.concatenate(v) for k, v in cols.items()}


def canonical(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Rows in one canonical order (sorted on every column), so two outputs of the same
    rows compare column by column whatever order the runner wrote them in."""
    keys = sorted(cols)
    order = np.lexsort([cols[k] for k in reversed(keys)])
    return {k: cols[k][order] for k in keys}


def assert_same_rows(a: dict, b: dict, exact: bool) -> None:
    a, b = canonical(a), canonical(b)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].shape == b[k].shape, k
        if exact or a[k].dtype.kind in "iu":
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            # Means/variances merged in another order differ in the last float32 bits.
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_beam_output_equals_transform_graph_applied_in_tensorflow(span_dir, preprocessed):
    """Skew test: the eval rows written by Beam == the same raw rows through the transform
    graph in TensorFlow (what the trainer's serving signature embeds)."""
    import tensorflow as tf
    import tensorflow_transform as tft
    from components.ctr import rawdata
    rows = rawdata.read_eval_rows(span_dir, EVAL_PERCENT)
    raw = rawdata.to_raw_features(rows)
    raw[F.LABEL_KEY] = rows.column(F.LABEL_KEY).to_numpy().astype(np.int64)
    layer = tft.TFTransformOutput(
        f"{preprocessed['output_dir']}/transform_fn_output").transform_features_layer()
    in_tf = {k: v.numpy().reshape(-1)
             for k, v in layer({k: tf.constant(v) for k, v in raw.items()}).items()}
    from_beam = read_split(preprocessed["output_dir"], "eval")
    assert len(from_beam[F.LABEL_KEY]) == rows.num_rows == preprocessed["rows_eval"]
    assert_same_rows(from_beam, in_tf, exact=True)


def _corrupt_copy(home, root):
    """The fixture's two days, with day 2 as gzip JSONL split in two files and malformed
    records of every kind mixed in, and day 1 with an extra Parquet part of null rows.
    Returns {reason: count} of what was injected."""
    src = home / "raw" / "ctr"
    d1, d2 = root / "dt=2026-11-02", root / f"dt={SPAN}"
    shutil.copytree(src / "dt=2026-11-02", d1)
    bad_rows = pq.read_table(d1 / "part-00000.parquet").slice(0, 3)
    bad_rows = bad_rows.set_column(bad_rows.schema.get_field_index("user_id"), "user_id",
                                   pa.nulls(3, pa.string()))
    pq.write_table(bad_rows, d1 / "part-00001.parquet")
    d2.mkdir()
    (d2 / "_SUCCESS").touch()
    rows = pq.read_table(src / f"dt={SPAN}" / "part-00000.parquet").to_pylist()
    good = [(json.dumps(r) + "\n").encode() for r in rows]
    bad = {
        "bad_json": [b'{"example_id": "x1",, }\n'],
        "non_utf8": [good[0][:-3] + b'\xc3\x28"}\n'],
        "wrong_type": [(json.dumps({**rows[1], "hour": "12"}) + "\n").encode(),
                       (json.dumps({**rows[2], "price": [1.0]}) + "\n").encode()],
        "missing_field": [(json.dumps({**rows[3], "device": None}) + "\n").encode()],
        "oversize_line": [(json.dumps({**rows[4], "note": "x" * (1 << 20)}) + "\n").encode()],
        "not_an_object": [b'"just a string"\n'],
    }
    lines = good[:]
    for i, extra in enumerate(x for xs in bad.values() for x in xs):
        lines.insert(1 + i * 500, extra)
    half = len(lines) // 2
    with gzip.open(d2 / "part-00000.jsonl.gz", "wb") as f:
        f.writelines(lines[:half])
    with gzip.open(d2 / "part-00001.jsonl.gz", "wb") as f:
        f.writelines(lines[half:])
        f.write(good[5][:40])    # a record cut off at the end of the file
    counts = {k: len(v) for k, v in bad.items()}
    counts["missing_field"] += 3
    counts["truncated_record"] = 1
    return counts


def test_corrupted_input_in_two_processes_nothing_lost_same_outputs(home, preprocessed,
                                                                   tmp_path):
    """Rows accounting on a corrupted input set, run by the DirectRunner with two SDK
    worker processes; the good rows must give exactly what the in-process run of the
    clean data (the `preprocessed` fixture) gave: same counts, vocabularies, features.

    One job covers both points to keep the suite's time down: counters must be merged
    across processes, and nothing in the job may rely on state shared inside one process.
    """
    from components.ctr.preprocess import PreprocessSpec, run
    root = tmp_path / "raw"
    injected = _corrupt_copy(home, root)
    out = tmp_path / "pre"
    summary = run(PreprocessSpec(
        raw_root=str(root), span=SPAN, output_dir=str(out), window_days=2,
        eval_percent=EVAL_PERCENT,
        beam_args=["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                   "--direct_num_workers=2"]))
    n_bad = sum(injected.values())
    assert summary["rows_rejected"] == n_bad
    assert summary["rejected_by_reason"] == injected
    assert summary["rows_in"] == preprocessed["rows_in"] + n_bad
    assert summary["rows_in"] == (summary["rows_train"] + summary["rows_eval"]
                                  + summary["rows_validation"] + summary["rows_held_out"]
                                  + n_bad)
    assert [summary[k] for k in ("rows_train", "rows_eval", "rows_validation")] == \
        [preprocessed[k] for k in ("rows_train", "rows_eval", "rows_validation")]
    # the trainer's counts, merged across both processes, as in one
    from components.ctr import split_stats
    mine, theirs = split_stats.read(out), split_stats.read(preprocessed["output_dir"])
    for split in ("train", "validation"):
        assert (mine[split].rows, mine[split].clicks) == (theirs[split].rows,
                                                         theirs[split].clicks)
        assert mine[split].rows == summary[f"rows_{split}"] > 0
        for field, counts in theirs[split].counts.items():
            assert (mine[split].counts[field] == counts).all(), field
    assert json.loads((out / "summary.json").read_text())["rows_rejected"] == n_bad
    dead = [json.loads(x) for p in sorted((out / "rejected").glob("*.jsonl"))
            for x in p.read_text().splitlines()]
    assert len(dead) == n_bad
    assert {r["reason"] for r in dead} == set(injected)
    for r in dead:
        assert r["source"].startswith(str(root)) and r["line"] >= 1 and r["detail"]
        if r["source"].endswith(".jsonl.gz"):
            assert isinstance(r["offset"], int)
    # What survived is exactly the reference data: same vocabularies, same rows.
    ref = home / "pre" / "transform_fn_output" / "transform_fn" / "assets"
    assert sorted(x.name for x in ref.iterdir()) == sorted(F.VOCAB_FEATURES)
    for vocab in ref.iterdir():
        assert (out / "transform_fn_output" / "transform_fn" / "assets" / vocab.name
                ).read_bytes() == vocab.read_bytes(), vocab.name
    for split in ("train", "eval"):
        assert_same_rows(read_split(str(out), split),
                         read_split(preprocessed["output_dir"], split), exact=False)


# ---- analysis cache: a daily run analyses only the day parts that are new, and its
# outputs equal those of a full analysis of the window (`preprocessed` is the reference).

def _run(home, span, out, cache):
    from beam_jobs import preprocess_ctr
    return preprocess_ctr.run(["--raw-root", str(home / "raw" / "ctr"), "--span", span,
                               "--window-days", "2", "--eval-percent", str(EVAL_PERCENT),
                               "--output-dir", str(out), "--analysis-cache-dir", str(cache)])


def _sources(summary) -> dict[str, str]:
    """{"2026-11-02_rest": "cache", ...} without the fingerprint part of the keys."""
    return {k.rsplit("_", 1)[0].replace(str(EVAL_PERCENT), ""): v
            for k, v in summary["analysis"]["datasets"].items()}


def test_daily_run_reuses_yesterdays_analysis_and_matches_a_full_one(home, preprocessed,
                                                                      tmp_path):
    cache = tmp_path / "cache"
    yesterday = _run(home, "2026-11-02", tmp_path / "d1", cache)
    assert set(_sources(yesterday).values()) == {"computed"}
    # the validation slice is analysed with the training rows (it is training data too)
    assert yesterday["analysis"]["rows_analysed"] == (yesterday["rows_train"]
                                                      + yesterday["rows_validation"])
    assert len(list(cache.iterdir())) == 2     # the training rows of 11-01 and of 11-02

    today = _run(home, "2026-11-03", tmp_path / "d2", cache)
    assert _sources(today) == {"2026-11-02_rest": "cache", "2026-11-03_rest": "computed"}
    # Only the new day was read for analysis: today's training rows minus those of 11-02
    # (its 4,000 rows but its held-out ones, yesterday's eval split, which no model of
    # any day trains on).
    assert today["analysis"]["rows_analysed"] == (today["rows_train"] + today["rows_validation"]
                                                  - (4000 - yesterday["rows_eval"]))
    assert today["rows_train"] == preprocessed["rows_train"]
    for split in ("train", "eval"):
        assert_same_rows(read_split(str(tmp_path / "d2"), split),
                         read_split(preprocessed["output_dir"], split), exact=False)
    vocab = "transform_fn_output/transform_fn/assets/category_id"
    assert (tmp_path / "d2" / vocab).read_text() == (home / "pre" / vocab).read_text()

    again = _run(home, "2026-11-03", tmp_path / "d3", cache)
    assert set(_sources(again).values()) == {"cache"}
    assert again["analysis"]["rows_analysed"] == 0
    # Time per stage: no reading for analysis when everything came from the cache.
    assert again["stage_seconds"]["read_for_analysis"] == 0
    assert yesterday["stage_seconds"]["read_for_analysis"] > 0
    assert again["stage_seconds"]["encode_and_write"] > 0
    assert_same_rows(read_split(str(tmp_path / "d3"), "train"),
                     read_split(str(tmp_path / "d2"), "train"), exact=True)
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp")]


def test_a_reuploaded_day_is_analysed_again(home, tmp_path):
    import shutil
    raw = tmp_path / "raw"
    shutil.copytree(home / "raw" / "ctr", raw)
    cache = tmp_path / "cache"

    def run(out):
        from beam_jobs import preprocess_ctr
        return _sources(preprocess_ctr.run([
            "--raw-root", str(raw), "--span", "2026-11-03", "--window-days", "1",
            "--eval-percent", str(EVAL_PERCENT), "--output-dir", str(tmp_path / out),
            "--analysis-cache-dir", str(cache)]))

    assert run("a") == {"2026-11-03_rest": "computed"}
    assert run("b") == {"2026-11-03_rest": "cache"}
    part = next((raw / "dt=2026-11-03").glob("part-*"))
    later = time.time() + 5
    os.utime(part, (later, later))            # the producer rewrote the day
    assert run("c") == {"2026-11-03_rest": "computed"}


def test_a_part_that_grows_while_read_fails_the_job_and_writes_nothing(home, tmp_path,
                                                                      monkeypatch):
    """A producer still appending after `_SUCCESS`: analysis and transform would see
    different rows, so the job fails naming the file, and no output appears."""
    from beam_jobs import preprocess_ctr
    from retrain.common.rawfiles import ChangedWhileRead
    day = tmp_path / "raw" / f"dt={SPAN}"
    day.mkdir(parents=True)
    rows = pq.read_table(home / "raw" / "ctr" / f"dt={SPAN}" / "part-00000.parquet").to_pylist()
    part = day / "part-00000.jsonl"
    part.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (day / "_SUCCESS").touch()
    read = preprocess_ctr.read_batches

    def still_written(path, *args, **kwargs):
        yield from read(path, *args, **kwargs)
        with open(path, "a") as f:      # the producer appends one more record
            f.write(json.dumps({**rows[0], F.EXAMPLE_ID_KEY: f"late-{time.time_ns()}"}) + "\n")

    monkeypatch.setattr(preprocess_ctr, "read_batches", still_written)
    with pytest.raises(ChangedWhileRead, match=r"part-00000.jsonl \(\d+ -> \d+ bytes\)"):
        preprocess_ctr.run(["--raw-root", str(tmp_path / "raw"), "--span", SPAN,
                            "--window-days", "1", "--output-dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_a_60_day_window_of_a_low_volume_log_is_one_analysis_dataset(tmp_path):
    """60 days x 100 rows with the DAG's analysis cache dir: past --max-cached-datasets the
    window is analysed as one tf.Transform dataset, so the pipeline does not grow with the
    days (before: one dataset per day part, 6 GB and growing after 2 min on 24k rows).
    Peak memory and time per window length: bench/preprocess_window.py."""
    from beam_jobs.preprocess_ctr import MAX_CACHED_DATASETS
    from components.ctr.generate import GenerateSpec, run as generate
    from components.ctr.preprocess import PreprocessSpec, run

    generate(GenerateSpec(out_root=str(tmp_path), start="2026-09-01", days=60, rows_per_day=100,
                          n_users=2000, n_items=1000, n_categories=20))
    summary = run(PreprocessSpec(raw_root=str(tmp_path / "raw" / "ctr"), span="2026-10-30",
                                 output_dir=str(tmp_path / "pre"), window_days=60,
                                 eval_percent=EVAL_PERCENT,
                                 analysis_cache_dir=str(tmp_path / "cache")))
    assert 60 > MAX_CACHED_DATASETS
    assert summary["analysis"]["datasets"] == {"window": "computed"}
    assert len(summary["window"]) == 60 and summary["rows_in"] == 6000
    assert (summary["rows_train"] + summary["rows_eval"] + summary["rows_validation"]
            + summary["rows_held_out"]
            + summary["rows_rejected"]) == 6000
    # Every training row was analysed: every day without its held-out rows.
    assert summary["analysis"]["rows_analysed"] == (summary["rows_train"]
                                                    + summary["rows_validation"])
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


ROW_ID_CONFIG = {
    "name": "row_ids", "label": "clicked", "example_id": "event_id",
    "features": [{"name": "row", "kind": "categorical", "transform": "identity",
                  "size": 100_000},
                 {"name": "x", "kind": "numeric", "transform": "zscore"}]}


def test_no_eval_row_of_any_day_is_a_training_row_of_any_day(tmp_path):
    """Each row carries its number through an identity feature, so the transformed shards
    say exactly which rows each run trained and evaluated on. Daily runs and a backfill
    of an older span: no run's eval rows are in any run's training rows (a day's held-out
    rows never become training rows of the later windows that cover it), and every
    run's eval rows are its span's stable-hash held-out rows."""
    import datetime as dt
    from beam_jobs import preprocess_ctr

    days = [dt.date(2026, 3, 1) + dt.timedelta(days=i) for i in range(5)]
    raw, rows_of_day = tmp_path / "raw", {}
    for d, day in enumerate(days):
        part = raw / f"dt={day.isoformat()}"
        part.mkdir(parents=True)
        rows = [{"event_id": f"e-{n}", "clicked": n % 3 == 0, "row": n, "x": n % 17 * 1.0}
                for n in range(d * 300, d * 300 + 300)]
        for r in rows:
            r["clicked"] = int(r["clicked"])
        (part / "part-00000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (part / "_SUCCESS").write_text("")
        rows_of_day[day] = rows
    config = tmp_path / "rows.json"
    config.write_text(json.dumps(ROW_ID_CONFIG))

    train, evals = {}, {}
    for span in (days[2], days[3], days[4], days[2]):   # daily runs, then a backfill
        out = tmp_path / f"out-{span}-{len(train)}"
        summary = preprocess_ctr.run(
            ["--raw-root", str(raw), "--span", span.isoformat(), "--window-days", "3",
             "--eval-percent", str(EVAL_PERCENT), "--feature-config", str(config),
             "--output-dir", str(out), "--analysis-cache-dir", str(tmp_path / "cache")])
        run = f"{span}#{len(train)}"
        fits = set(read_split(str(out), "train")["row_xf"].tolist())
        validates = set(read_split(str(out), "validation")["row_xf"].tolist())
        # the validation slice: the rows its id hash picks, never also trained on
        assert not fits & validates and validates == {
            r["row"] for d in days for r in rows_of_day[d] if r["row"] in fits | validates
            and F.validation_mask([r["event_id"]], F.VALIDATION_PERCENT)[0]}
        train[run] = fits | validates
        evals[run] = set(read_split(str(out), "eval")["row_xf"].tolist())
        window = [d for d in days if span - dt.timedelta(days=2) <= d <= span]
        held_out = {r["row"] for d in window for r in rows_of_day[d]
                    if F.is_eval(r["event_id"], EVAL_PERCENT)}
        assert evals[run] == {r["row"] for r in rows_of_day[span]
                              if F.is_eval(r["event_id"], EVAL_PERCENT)}
        assert train[run] == {r["row"] for d in window for r in rows_of_day[d]} - held_out
        assert summary["rows_held_out"] == len(held_out) - len(evals[run])
        assert (summary["rows_train"] + summary["rows_eval"] + summary["rows_validation"]
            + summary["rows_held_out"]
                == summary["rows_in"] == 900)
    for a in evals:
        for b in train:
            assert not evals[a] & train[b], (a, b)


def test_integer_ids_give_the_split_of_their_text(tmp_path):
    """A log whose id column holds integers (int64 Parquet one day, JSON numbers the next)
    is preprocessed as it is: the same train and eval rows as the same log with its ids
    written as strings, because the split hashes the id's decimal text."""
    from beam_jobs import preprocess_ctr

    config = tmp_path / "rows.json"
    config.write_text(json.dumps(ROW_ID_CONFIG))
    days, runs = ("2026-03-01", "2026-03-02"), {}
    for as_text in (False, True):
        raw = tmp_path / f"raw-{'text' if as_text else 'ints'}"
        for d, day in enumerate(days):
            part = raw / f"dt={day}"
            part.mkdir(parents=True)
            rows = [{"event_id": str(n) if as_text else n, "clicked": int(n % 3 == 0),
                     "row": n, "x": n % 17 * 1.0} for n in range(d * 300, d * 300 + 300)]
            if d == 0:
                pq.write_table(pa.Table.from_pylist(rows), part / "part-00000.parquet")
            else:
                (part / "part-00000.jsonl").write_text("".join(json.dumps(r) + "\n"
                                                               for r in rows))
            (part / "_SUCCESS").touch()
        out = tmp_path / f"out-{as_text}"
        summary = preprocess_ctr.run(
            ["--raw-root", str(raw), "--span", days[-1], "--window-days", "2",
             "--eval-percent", str(EVAL_PERCENT), "--feature-config", str(config),
             "--output-dir", str(out)])
        runs[as_text] = ({k: summary[k] for k in ("rows_in", "rows_train", "rows_eval",
                                                  "rows_held_out", "rows_rejected")},
                         sorted(read_split(str(out), "train")["row_xf"].tolist()),
                         sorted(read_split(str(out), "eval")["row_xf"].tolist()))
    assert pq.read_schema(tmp_path / "raw-ints" / f"dt={days[0]}" / "part-00000.parquet").field(
        "event_id").type == pa.int64()
    assert runs[False] == runs[True]
    counts, _, evals = runs[False]
    assert counts["rows_in"] == 600 and counts["rows_rejected"] == 0
    assert evals == [n for n in range(300, 600) if F.is_eval(str(n), EVAL_PERCENT)]
    assert 0 < len(evals) < 300


def test_the_marker_commit_writes_the_same_output_without_a_rename(home, preprocessed,
                                                                  tmp_path, monkeypatch):
    """--output-commit=marker, as on gs:// / s3:// (where a folder cannot be renamed): the
    job writes into an attempt folder that <output>/_SUCCESS names, with the same rows as the
    rename commit; a later run that fails leaves the committed attempt as it was."""
    from beam_jobs import preprocess_ctr
    from components import output_commit
    from retrain.common.rawfiles import ChangedWhileRead

    out = tmp_path / "pre"
    argv = ["--raw-root", str(home / "raw" / "ctr"), "--span", SPAN, "--window-days", "2",
            "--eval-percent", str(EVAL_PERCENT), "--output-dir", str(out),
            "--output-commit", "marker"]
    renames = []
    real_rename = os.rename
    monkeypatch.setattr(os, "rename", lambda *a: renames.append(a) or real_rename(*a))
    summary = preprocess_ctr.run(argv)
    committed = output_commit.committed(str(out))
    assert summary["output_dir"] == committed and summary["output_commit"] == "marker"
    assert committed.startswith(f"{out}/attempt-")
    assert not [a for a in renames if str(out) in str(a[1]) and "attempt-" not in str(a[1])], \
        renames                       # nothing was renamed into <output> itself
    for split in ("train", "eval"):
        assert_same_rows(read_split(committed, split),
                         read_split(preprocessed["output_dir"], split), exact=False)
    manifest = json.loads((out / committed.rsplit("/", 1)[1] / "_MANIFEST.json").read_text())
    assert "summary.json" in manifest["files"]

    def changed(path, *args, **kwargs):
        raise ChangedWhileRead("part-00000.parquet (1 -> 2 bytes)")
    monkeypatch.setattr(preprocess_ctr.rawfiles, "verify_unchanged", changed)
    with pytest.raises(ChangedWhileRead):
        preprocess_ctr.run(argv)
    assert output_commit.committed(str(out)) == committed
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS", committed.rsplit("/", 1)[1]]


def test_the_job_never_pickles_a_batch(monkeypatch, home, tmp_path):
    """Its RecordBatch PCollections are typed, so the runner sizes and moves them with
    beam_jobs.arrow_coder; a pickled batch (the fallback) is counted through copyreg."""
    import copyreg

    from beam_jobs import preprocess_ctr
    pickled = []

    def reducer(batch):
        pickled.append(batch.num_rows)
        return pa.RecordBatch.__reduce__(batch)

    monkeypatch.setitem(copyreg.dispatch_table, pa.RecordBatch, reducer)
    summary = preprocess_ctr.run(["--raw-root", str(home / "raw" / "ctr"), "--span", SPAN,
                                  "--window-days", "2", "--output-dir", str(tmp_path / "out")])
    assert summary["rows_train"] > 0 and summary["rows_eval"] > 0
    assert pickled == []


def test_a_fresh_job_process_loads_no_keras_3(home, tmp_path):
    """As a task runs it (a new process): Keras 2 is chosen before TensorFlow's import
    (retrain.common.tf_keras_env), so the job pays nothing for Keras 3."""
    import subprocess
    import sys
    code = ("import sys\n"
            "from components.ctr.preprocess import PreprocessSpec, run\n"
            f"run(PreprocessSpec(raw_root={str(home / 'raw' / 'ctr')!r}, span={SPAN!r}, "
            f"output_dir={str(tmp_path / 'out')!r}, window_days=1))\n"
            "print('keras 3 loaded:', 'keras.src' in sys.modules)\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "keras 3 loaded: False"
