"""Workers read equal shares of the window's rows even when its days differ in size, on a
real localhost cluster, through the preprocessing job's real output.

Two generated days, one 3x the other, go through the preprocessing job (a small
--batch-size, so the shard writers take several batches). One ps and N workers then run
as their own processes (`python -m components.ctr.ps_train --serve`, each with its
TF_CONFIG); a chief process builds the trainer's input (`train_input.make_dataset_fn` with
`workers=N`, on the globs `window_rows` gives) through
`ClusterCoordinator.create_per_worker_dataset` and drains each worker's iterator once.
Each worker reports its index and the rows it read (three transformed floats a row, as
identity). The training rows (with the validation slice's files too, as when the slice is
too small to stop on) must be read each exactly once, 1/N of them (within 10 %) by every
worker; the validation slice must be the same rows on every worker whatever N.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import pytest

from cluster_helpers import wait_for

pytestmark = pytest.mark.integration

IDENTITY = ("price_xf", "user_past_clicks_xf", "item_age_days_xf")

CHIEF = r'''
import json, sys
sys.path.insert(0, __import__("os").getcwd())
import tensorflow as tf
from components.ctr.train_input import make_dataset_fn

globs, validation, passes = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
identity = ["price_xf", "user_past_clicks_xf", "item_age_days_xf"]
spec = {k: tf.io.FixedLenFeature([], tf.float32) for k in identity + ["click"]}
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
workers = resolver.cluster_spec().num_tasks("worker")


@tf.function
def drain(it):
    """Every row left in this worker's iterator: [rows, 3] identity floats."""
    rows = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[None, 3])
    i = tf.constant(0)
    opt = it.get_next_as_optional()
    while opt.has_value():
        features, _ = opt.get_value()
        rows = rows.write(i, tf.stack([features[k] for k in identity], axis=1))
        i += 1
        opt = it.get_next_as_optional()
    return tf.distribute.coordinator.experimental_get_current_worker_index(), rows.concat()


out = {}
for name, fn in (
        ("train", make_dataset_fn(globs, spec, 64, {}, None, repeat=False, label="click",
                                  split="all", workers=workers)),
        ("validation", make_dataset_fn(validation, spec, 64, {}, None, repeat=False,
                                       label="click", split="validation"))):
    iterator = iter(coordinator.create_per_worker_dataset(fn))
    # The coordinator picks the worker: drain until every worker has drained (a drained
    # iterator gives 0 rows, so an extra drain changes nothing).
    seen = {}
    for _ in range(20):
        values = [coordinator.schedule(drain, args=(iterator,)) for _ in range(passes)]
        coordinator.join()
        for v in values:
            index, rows = v.fetch()
            seen.setdefault(str(int(index)), []).append([[float(x) for x in r] for r in rows])
        if len(seen) == workers:
            break
    out[name] = seen
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def unequal_window(tmp_path_factory):
    """The preprocessing job's output for 2 days of 2,000 and 6,000 rows."""
    from components.ctr.generate import GenerateSpec, run as generate
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    root = tmp_path_factory.mktemp("unequal-days")
    for start, rows, seed in (("2026-11-01", 2000, 7), ("2026-11-02", 6000, 8)):
        generate(GenerateSpec(out_root=str(root), start=start, days=1, rows_per_day=rows,
                              seed=seed, n_users=3000, n_items=2000, n_categories=50))
    return preprocess(PreprocessSpec(
        raw_root=str(root / "raw" / "ctr"), span="2026-11-02", output_dir=str(root / "pre"),
        window_days=2, validation_percent=30,
        beam_args=["--runner=DirectRunner", "--batch-size=700"]))


def test_the_job_writes_each_files_rows_and_spreads_a_bundles_rows_evenly(unequal_window):
    import tensorflow as tf
    from pathlib import Path
    from components.ctr.formats import (EVAL_DIR, SHARD_ROWS_FILE, TRAIN_DIR,
                                        VALIDATION_DIR)
    pre = Path(unequal_window["output_dir"])
    for split in (TRAIN_DIR, VALIDATION_DIR, EVAL_DIR):
        counts = json.loads((pre / split / SHARD_ROWS_FILE).read_text())
        files = sorted(p.name for p in (pre / split).glob("*.tfrecord.gz"))
        assert sorted(counts) == files, split
        for name in files:   # the counts are the files' records
            records = sum(1 for _ in tf.data.TFRecordDataset(str(pre / split / name),
                                                             compression_type="GZIP"))
            assert counts[name] == records, (split, name)
        assert sum(counts.values()) == unequal_window[f"rows_{split}"]
    # One bundle here: its files differ by at most a row per batch of 700 (not by whole
    # batches, as when a file took every other batch).
    train = json.loads((pre / TRAIN_DIR / SHARD_ROWS_FILE).read_text())
    assert len(train) >= 2
    assert max(train.values()) - min(train.values()) <= -(-sum(train.values()) // 700) + 2


def _local_rows(globs: list[str]) -> list[tuple]:
    """The rows of the files, read here in one process (the reference)."""
    import tensorflow as tf
    spec = {k: tf.io.FixedLenFeature([], tf.float32) for k in IDENTITY}
    names = sorted(n for g in globs for n in tf.io.gfile.glob(g))
    ds = tf.data.TFRecordDataset(names, compression_type="GZIP").batch(512).map(
        lambda x: tf.stack([tf.io.parse_example(x, spec)[k] for k in IDENTITY], axis=1))
    return [tuple(float(v) for v in r) for b in ds for r in b.numpy()]


def _run_cluster(tmp_path, workers: int, globs: list[str], validation: str) -> dict:
    from components.ctr.cluster import cluster_def, tf_config
    cluster = cluster_def(1, workers)
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    roles = [("ps", 0)] + [("worker", i) for i in range(workers)]
    servers = []
    try:
        for role, i in roles:
            log = open(tmp_path / f"{role}{i}.log", "w")
            servers.append(subprocess.Popen(
                [sys.executable, "-m", "components.ctr.ps_train", "--serve"],
                env={**env, "TF_CONFIG": tf_config(cluster, role, i)}, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True))
        wait_for(lambda: all("serving at" in (tmp_path / f"{r}{i}.log").read_text()
                             for r, i in roles), 120, "the servers")
        script = tmp_path / "chief.py"   # a file: AutoGraph reads the loop's source
        script.write_text(CHIEF)
        chief = subprocess.run(
            [sys.executable, str(script), json.dumps(globs), validation, str(4 * workers)],
            env={**env, "TF_CONFIG": tf_config(cluster, "chief", 0)}, capture_output=True,
            text=True, timeout=300)
        assert chief.returncode == 0, chief.stderr[-3000:]
        return json.loads(chief.stdout.strip().splitlines()[-1])
    finally:
        for p in servers:
            p.kill()
            p.wait()


def _by_worker(seen: dict) -> dict[int, list[tuple]]:
    return {int(w): [tuple(r) for drained in passes for r in drained]
            for w, passes in seen.items()}


@pytest.mark.parametrize("workers", [2, 3])
def test_each_worker_reads_an_equal_share_of_the_rows_of_unequal_days(
        tmp_path, unequal_window, workers):
    from components.ctr.formats import TRAIN_DIR
    from components.ctr.train_input import window_rows
    from pathlib import Path
    pre = Path(unequal_window["output_dir"])
    # The slice's files join the training ones when it does not stop training (as in
    # bench/ps_workers.py): the case whose shares were 69 % / 31 %.
    train, _, globs, _ = window_rows(pre, None, use_validation=False)
    _, _, _, validation = window_rows(pre, None, use_validation=True)
    assert len(globs) == 2 and train.rows == (unequal_window["rows_train"]
                                              + unequal_window["rows_validation"])
    assert len(list((pre / TRAIN_DIR).glob("*.tfrecord.gz"))) >= 2
    seen = _run_cluster(tmp_path, workers, globs, validation)

    reads = _by_worker(seen["train"])
    assert set(reads) == set(range(workers)), "every worker read"
    counts = {w: len(r) for w, r in reads.items()}
    everything = collections.Counter(_local_rows(globs))
    assert sum(everything.values()) == train.rows
    # Every training row read once, by one worker (the same multiset as one local pass).
    assert collections.Counter(r for rs in reads.values() for r in rs) == everything
    for w, n in counts.items():
        assert abs(n / train.rows - 1 / workers) <= 0.1 / workers, (w, counts, train.rows)

    # The validation slice: the same rows on every worker, whatever N.
    held = collections.Counter(_local_rows([validation]))
    assert sum(held.values()) == unequal_window["rows_validation"] > 0
    by_worker = _by_worker(seen["validation"])
    assert set(by_worker) == set(range(workers))
    for w, rows in by_worker.items():
        assert collections.Counter(rows) == held, w
