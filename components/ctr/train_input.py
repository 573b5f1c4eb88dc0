"""The trainer's input: which shards it reads, what it knows before its first step, and the
tf.data pipelines each worker runs.

Rows, click rate and per-id counts come from the preprocessing job's counts
(`components.ctr.split_stats`), never from a pass over the window here; the validation
slice is the job's own shards (a stable hash of the example id). With several workers
each reads its own share of the training rows: the rows in file-name order cut into equal
ranges by the per-file row counts the job writes beside its shards (`worker_plan`), not
every N-th file (the job's files differ in size, and the validation slice's files join the
training ones when it is too small: shares of 69 % / 31 % were measured that way).
"""
from __future__ import annotations

import json
import logging
import posixpath
from pathlib import Path

log = logging.getLogger("retrain.ps_train")

MIN_VALIDATION_ROWS = 100     # below it a validation loss is noise: no early stopping
MAX_VALIDATION_ROWS = 200_000  # validations read at most these (held in worker memory)
VALIDATION_BATCH = 4096
# A share's edge moves to the nearest file edge when that is at most this fraction of a
# share away, so a worker does not read (and skip) most of a file for a few of its rows.
EDGE_SNAP = 0.01


def shard_rows(names: list[str]) -> dict[str, int] | None:
    """{file: rows} for `names`, from the preprocessing job's SHARD_ROWS_FILE in each
    file's folder (no pass over rows); None when a folder or a file has none (an output
    written before the job counted, or by its --num-shards sink)."""
    import tensorflow as tf
    from components.ctr.formats import SHARD_ROWS_FILE
    by_dir: dict[str, dict] = {}
    out = {}
    for name in names:
        folder, base = posixpath.split(name)
        if folder not in by_dir:
            path = posixpath.join(folder, SHARD_ROWS_FILE)
            try:
                with tf.io.gfile.GFile(path, "r") as f:
                    by_dir[folder] = json.loads(f.read())
            except (tf.errors.NotFoundError, ValueError) as e:
                log.warning("no usable row counts %s (%s): workers share files, not rows",
                            path, type(e).__name__)
                return None
        rows = by_dir[folder].get(base)
        if not isinstance(rows, int) or rows < 0:
            log.warning("%s has no row count for %s: workers share files, not rows",
                        posixpath.join(folder, SHARD_ROWS_FILE), base)
            return None
        out[name] = rows
    return out


def worker_plan(names: list[str], rows: dict[str, int], workers: int
                ) -> list[list[tuple[str, int, int]]]:
    """Each worker's reads as (file, rows to skip, rows to take): the rows of `names` in
    that order cut into `workers` consecutive ranges of equal size (to a row), an edge
    moved to a file's edge within EDGE_SNAP of a share. Deterministic for given files,
    counts and `workers`; every row is in exactly one range."""
    total = sum(rows[n] for n in names)
    starts, at = [], 0
    for n in names:
        starts.append(at)
        at += rows[n]
    file_edges = starts + [total]
    edges = [w * total // workers for w in range(workers + 1)]
    for w in range(1, workers):
        nearest = min(file_edges, key=lambda c: (abs(c - edges[w]), c))
        if abs(nearest - edges[w]) <= EDGE_SNAP * total / workers:
            edges[w] = nearest
    plan = []
    for w in range(workers):
        lo, hi = edges[w], edges[w + 1]
        reads = []
        for n, start in zip(names, starts):
            skip = max(lo - start, 0)
            take = min(hi, start + rows[n]) - start - skip
            if take > 0:
                reads.append((n, skip, take))
        plan.append(reads)
    return plan


# Training rows whose id takes its field's new-id row (a field with `new_id_row`): every
# training id is in the window's filter, so only these rows teach the row what a new id
# is worth. Chosen by a hash of the serialized example: the same rows every pass.
NEW_ID_TRAIN_SHARE = 1 / 64
_SHARE_BUCKETS = 1 << 20


def move_to_new_id_row(ids, serialized, new_row: int, field: str):
    """The ids of a training batch with NEW_ID_TRAIN_SHARE of its rows (by a hash of the
    serialized example, salted by the field) moved to the new-id row."""
    import tensorflow as tf
    h = tf.strings.to_hash_bucket_fast(tf.strings.join([serialized, f"\x1f{field}"]),
                                       _SHARE_BUCKETS)
    moved = tf.less(h, int(NEW_ID_TRAIN_SHARE * _SHARE_BUCKETS))
    return tf.where(moved, tf.constant(new_row, ids.dtype), ids)


def prior_weights(spec, cfg: dict, counts: dict, new_id_rows: dict[str, int] | None = None,
                  rows: int = 0) -> dict:
    """Per field and id: prior strength / the id's count in the window (`spec`: the
    trainer's `l2`, `embedding_l2`, `fm_l2`; `cfg`: its `_config`, whose per-field
    embedding_l2 wins). A new-id row counts the NEW_ID_TRAIN_SHARE of the `rows` training
    rows that train it."""
    import numpy as np
    out = {}
    for k, n in counts.items():
        n = np.asarray(n, np.float64)
        if k in (new_id_rows or {}):
            n = n.copy()
            n[new_id_rows[k]] = NEW_ID_TRAIN_SHARE * rows
        inv = 1.0 / np.maximum(n, 1).astype(np.float32)
        strength = cfg["id_l2"].get(k, spec.l2)
        if strength:
            out[f"__prior_bias_{k}"] = (k, (strength * inv).astype(np.float32))
        emb_l2 = (cfg.get("embedding_l2") or {}).get(k, spec.embedding_l2)
        if k in cfg["dims"] and emb_l2:
            out[f"__prior_emb_{k}"] = (k, (emb_l2 * inv).astype(np.float32))
        if k in cfg["fm"] and spec.fm_l2:
            out[f"__prior_fm_{k}"] = (k, (spec.fm_l2 * inv).astype(np.float32))
    return out


def make_dataset_fn(patterns, feature_spec: dict, batch_size: int, priors: dict,
                     seed: int | None, repeat: bool, label: str | None = None,
                     split: str = "all", workers: int = 1,
                     new_id_rows: dict[str, int] | None = None):
    """A dataset function over the shards matching `patterns` (one glob or several); in
    the cluster each worker runs it on its own.

    split: "train" (shuffled, endless batches), "validation" (in file order, passes of
    whole batches repeated, so each validation reads exactly one pass from a worker's
    iterator) or "all" (one pass in batches). `workers` > 1 (in a cluster): each worker
    reads its own share of the rows (`worker_plan`, from the job's per-file row counts),
    so N workers do not read the window N times and each trains on 1/N of it. Without
    the counts: every `workers`-th file from its index on (every `workers`-th record when
    there are fewer files than workers). `new_id_rows` (field -> its new-id row; training
    only): NEW_ID_TRAIN_SHARE of the rows take it (`move_to_new_id_row`)."""
    from components.ctr import feature_config as fc
    label = fc.default().label if label is None else label
    if split not in ("all", "train", "validation"):
        raise ValueError(split)
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)

    def dataset_fn(_input_context=None):
        import tensorflow as tf
        shuffle = repeat and split != "validation"
        names = sorted(n for p in patterns for n in tf.io.gfile.glob(p))
        if not names:
            raise FileNotFoundError(f"no shards match {patterns}")
        rows = shard_rows(names) if workers > 1 else None
        if workers > 1:
            index = tf.distribute.coordinator.experimental_get_current_worker_index()
        if rows is not None:   # each worker its range of rows: (file, skip, take) reads
            reads = [(w, *r) for w, mine in enumerate(worker_plan(names, rows, workers))
                     for r in mine]
            files = tf.data.Dataset.from_tensor_slices(
                tuple(tf.constant([r[i] for r in reads], dtype=t)
                      for i, t in enumerate((tf.int64, tf.string, tf.int64, tf.int64))))
            files = files.filter(lambda w, f, s, t: w == tf.cast(index, tf.int64))
            files = files.map(lambda w, f, s, t: (f, s, t))
            count = len(reads)

            def read(f, skip, take):
                return tf.data.TFRecordDataset(f, compression_type="GZIP").skip(skip).take(take)
        else:
            files = tf.data.Dataset.from_tensor_slices(names)
            if workers > 1 and len(names) >= workers:
                files = files.shard(workers, index)
            count = len(names)

            def read(f):
                return tf.data.TFRecordDataset(f, compression_type="GZIP")
        if shuffle:
            files = files.shuffle(max(count, 1), seed=seed, reshuffle_each_iteration=True)
        ds = files.interleave(read, cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE,
                              deterministic=not shuffle)
        if workers > 1 and rows is None and len(names) < workers:
            ds = ds.shard(workers, index)
        if split == "validation":
            # Read once, then from memory: a pass must not cost a pass over the window.
            ds = ds.take(MAX_VALIDATION_ROWS).batch(batch_size).cache()
            ds = ds.repeat() if repeat else ds
        elif repeat:
            ds = ds.shuffle(50_000, seed=seed, reshuffle_each_iteration=True).repeat()
            ds = ds.batch(batch_size, drop_remainder=True)
        else:
            ds = ds.batch(batch_size)
        tables = {name: (fc.transformed_name(k), tf.constant(w)) for name, (k, w) in priors.items()}

        def parse(x):
            f = tf.io.parse_example(x, feature_spec)
            for k, row in (new_id_rows or {}).items():
                f[fc.transformed_name(k)] = move_to_new_id_row(f[fc.transformed_name(k)], x,
                                                               row, k)
            for name, (key, table) in tables.items():
                f[name] = tf.gather(table, tf.maximum(f[key], 0))   # padding: masked later
            return f, f.pop(label)
        return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)
    return dataset_fn


def window_rows(pre: Path, fcfg, use_validation: bool):
    """(training SplitStats, validation rows, shard globs to train on, glob of the
    validation shards or None): from the preprocessing job's counts, no pass over rows.
    Without a usable validation slice its rows train too."""
    from components.ctr import split_stats
    from components.ctr.formats import TRAIN_DIR, VALIDATION_DIR
    stats = split_stats.read(pre)
    train, held = stats[TRAIN_DIR], stats.get(VALIDATION_DIR)
    train_globs = [str(pre / TRAIN_DIR / "*.tfrecord.gz")]
    held_rows = held.rows if held is not None else 0
    if use_validation and held_rows < MIN_VALIDATION_ROWS:
        log.warning("validation slice of %d rows is below %d: no early stopping, every row "
                    "trains", held_rows, MIN_VALIDATION_ROWS)
    if not use_validation or held_rows < MIN_VALIDATION_ROWS:
        if held_rows:
            train = split_stats.merge(split_stats.SplitStats(
                train.rows, train.clicks, dict(train.counts)), held)
            train_globs.append(str(pre / VALIDATION_DIR / "*.tfrecord.gz"))
        _refuse_one_class(train, fcfg, pre)
        return train, 0, train_globs, None
    _refuse_one_class(train, fcfg, pre)
    return train, held_rows, train_globs, str(pre / VALIDATION_DIR / "*.tfrecord.gz")


def _refuse_one_class(train, fcfg, pre: Path) -> None:
    """OneClass (bad data, not retried) when every training row has the same label: a
    validation override can let a day with no click through, but no model learns from
    it (the AUC it would be judged on is not even defined)."""
    from retrain.common.errors import refuse_one_class
    if fcfg is None:
        from components.ctr import feature_config
        fcfg = feature_config.default()
    if train.rows:
        refuse_one_class({fcfg.label: {"0": train.rows - train.clicks, "1": train.clicks}},
                         f"training window {pre}")


def preprocessed_validation_percent(pre: Path) -> int:
    from components.ctr.formats import SUMMARY_FILE
    from retrain.common.atomic import read_json
    return int(read_json(pre / SUMMARY_FILE).get("validation_percent", 0))
