"""The trainer's input: which shards it reads, what it knows before its first step, and the
tf.data pipelines each worker runs.

Rows, click rate and per-id counts come from the preprocessing job's counts
(`components.ctr.split_stats`), never from a pass over the window here; the validation
slice is the job's own shards (a stable hash of the example id). With several workers
each reads its own share of the training shards.
"""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("retrain.ps_train")

MIN_VALIDATION_ROWS = 100     # below it a validation loss is noise: no early stopping
MAX_VALIDATION_ROWS = 200_000  # validations read at most these (held in worker memory)
VALIDATION_BATCH = 4096


def prior_weights(spec, cfg: dict, counts: dict) -> dict:
    """Per field and id: prior strength / the id's count in the window (`spec`: the
    trainer's `l2`, `embedding_l2`, `fm_l2`; `cfg`: its `_config`)."""
    import numpy as np
    out = {}
    for k, n in counts.items():
        inv = 1.0 / np.maximum(n, 1).astype(np.float32)
        strength = cfg["id_l2"].get(k, spec.l2)
        if strength:
            out[f"__prior_bias_{k}"] = (k, (strength * inv).astype(np.float32))
        if k in cfg["dims"] and spec.embedding_l2:
            out[f"__prior_emb_{k}"] = (k, (spec.embedding_l2 * inv).astype(np.float32))
        if k in cfg["fm"] and spec.fm_l2:
            out[f"__prior_fm_{k}"] = (k, (spec.fm_l2 * inv).astype(np.float32))
    return out


def make_dataset_fn(patterns, feature_spec: dict, batch_size: int, priors: dict,
                     seed: int | None, repeat: bool, label: str | None = None,
                     split: str = "all", workers: int = 1):
    """A dataset function over the shards matching `patterns` (one glob or several); in
    the cluster each worker runs it on its own.

    split: "train" (shuffled, endless batches), "validation" (in file order, passes of
    whole batches repeated, so each validation reads exactly one pass from a worker's
    iterator) or "all" (one pass in batches). `workers` > 1 (in a cluster): each worker
    reads its own share, every `workers`-th file from its index on (every `workers`-th
    record when there are fewer files than workers), so N workers do not read the window
    N times."""
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
        files = tf.data.Dataset.from_tensor_slices(names)
        if workers > 1:
            index = tf.distribute.coordinator.experimental_get_current_worker_index()
            if len(names) >= workers:
                files = files.shard(workers, index)
        if shuffle:
            files = files.shuffle(max(len(names), 1), seed=seed, reshuffle_each_iteration=True)
        ds = files.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
                              cycle_length=4, num_parallel_calls=tf.data.AUTOTUNE,
                              deterministic=not shuffle)
        if workers > 1 and len(names) < workers:
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
