"""Read raw CTR rows back for evaluation and serving checks.

Evaluation scores *raw* rows through each model's serving signature, so a candidate and
a baseline with different transform graphs (other vocabularies, other means) are
compared on exactly the same input; the eval rows are selected with the same stable
hash as the Beam job uses. Rows are read with the family's readers, the ones
preprocessing uses (`components.ctr.rawread`: Parquet or JSONL, the feature config's
columns, malformed records dropped), so evaluation sees exactly the rows preprocessing
accepted. Which raw inputs a model takes comes from the
feature config it was trained with (`feature_config.for_model_dir`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from components.ctr import features as F
from components.ctr.rawformat import PART_SUFFIXES, RawLayout
from components.ctr.rawread import batch_schema, read_batches


def _default_config():
    from components.ctr import feature_config
    return feature_config.default()


def span_parts(span_dir: str | Path, cfg=None) -> list[str]:
    """A span's raw part files, in name order (what every reader of the span reads),
    checked by `rawfiles.list_parts`: regular files inside the raw root (the span's
    parent), at most the config's `max_parts_per_day` (default: generated logs')."""
    from retrain.common import rawfiles
    cfg = cfg or _default_config()
    span_dir = Path(span_dir)
    return [str(p) for p in rawfiles.list_parts(
        span_dir, PART_SUFFIXES, span_dir.parent,
        max_parts=cfg.validation.record_limits().max_parts_per_day)]


def part_batches(part: str, cfg=None, eval_percent: int | None = None,
                 batch_size: int = 65536):
    """Accepted rows of one part file as RecordBatches (only the held-out ones with
    `eval_percent`): a shard of the span, read a batch at a time."""
    cfg = cfg or _default_config()
    for batch, _ in read_batches(part, batch_size, layout=RawLayout.of(cfg)):
        if eval_percent is not None and batch.num_rows:
            batch = batch.filter(pa.array(F.eval_mask(batch.column(cfg.example_id),
                                                      eval_percent)))
        if batch.num_rows:
            yield batch


def read_span(span_dir: str | Path, cfg=None) -> pa.Table:
    """Every accepted row of a span: the config's raw columns (default: generated logs)."""
    cfg = cfg or _default_config()
    batches = [b for p in span_parts(span_dir, cfg) for b in part_batches(p, cfg)]
    return pa.Table.from_batches(batches, schema=batch_schema(RawLayout.of(cfg)))


def read_eval_rows(span_dir: str | Path, eval_percent: int, cfg=None) -> pa.Table:
    cfg = cfg or _default_config()
    table = read_span(span_dir, cfg)
    return table.filter(pa.array(F.eval_mask(table.column(cfg.example_id), eval_percent)))


def first_rows(span_dir: str | Path, n: int, cfg=None,
               eval_percent: int | None = None) -> pa.Table:
    """The first `n` accepted rows of a span in file order (only held-out ones with
    `eval_percent`), reading no further."""
    cfg = cfg or _default_config()
    batches, got = [], 0
    for part in span_parts(span_dir, cfg):
        for batch in part_batches(part, cfg, eval_percent):
            batches.append(batch.slice(0, n - got))
            got += batches[-1].num_rows
            if got >= n:
                break
        if got >= n:
            break
    return pa.Table.from_batches(batches, schema=batch_schema(RawLayout.of(cfg)))


def first_eval_rows(span_dir: str | Path, eval_percent: int, n: int, cfg=None) -> pa.Table:
    """The first `n` held-out rows of a span in file order, reading no further."""
    return first_rows(span_dir, n, cfg, eval_percent)


def read_rows_by_id(span_dir: str | Path, example_ids: list[str], cfg=None) -> pa.Table:
    """The span's rows with these example ids, in the given order (all must exist). Ids
    are text, as the readers give them (an integer id column as its decimal digits)."""
    cfg = cfg or _default_config()
    table = read_span(span_dir, cfg)
    wanted = pa.array(example_ids, pa.large_string())
    index = pc.index_in(wanted, value_set=table.column(cfg.example_id))
    if index.null_count:
        missing = [i for i, x in zip(example_ids, index.to_pylist()) if x is None]
        raise ValueError(f"{len(missing)} example ids not found in {span_dir}, "
                         f"e.g. {missing[:3]}")
    return table.take(index)


def read_truth(span_dir: str | Path) -> pa.Table:
    path = Path(span_dir) / "_truth.parquet"
    if not path.exists():
        raise FileNotFoundError(f"no click-probability file {path}")
    return pq.read_table(path)


def true_probabilities(span_dir: str | Path, example_ids: pa.Array) -> np.ndarray:
    """The generating click probability of each given example, in the given order."""
    truth = read_truth(span_dir)
    index = pc.index_in(example_ids, value_set=truth.column(F.EXAMPLE_ID_KEY))
    if index.null_count:
        raise ValueError(f"{index.null_count} example ids have no true probability")
    return truth.column(F.TRUE_PROB_KEY).to_numpy()[index.to_numpy()]


def to_raw_features(table: pa.Table, cfg=None, columns=None) -> dict[str, np.ndarray]:
    """Columns as the serving signature takes them (numeric nulls become NaN; lists
    padded with "" to the longest in the batch, which the transform drops). `columns`:
    only these (a table of one side of a user x item pair); default every input."""
    cfg = cfg or _default_config()
    out: dict[str, np.ndarray] = {}
    for key, kind in cfg.raw_columns().items():
        if key in (cfg.example_id, cfg.label) or (columns is not None and key not in columns):
            continue
        col = table.column(key)
        if kind == "str":
            out[key] = np.asarray(col.to_pylist(), dtype=object)
        elif kind == "int":
            out[key] = col.to_numpy().astype(np.int64)
        elif kind == "float":
            out[key] = col.cast(pa.float32()).fill_null(np.nan).to_numpy()
        else:
            values = [v or [] for v in col.to_pylist()]
            width = max([len(v) for v in values] or [0]) or 1
            out[key] = np.asarray([v + [""] * (width - len(v)) for v in values], dtype=object)
    return out


class Scorer:
    """A SavedModel's `serving_default` signature, loaded once, scoring raw columns."""

    def __init__(self, model_dir: str | Path, batch_size: int = 8192):
        import tensorflow as tf

        from retrain.common.registry import verify_model_dir
        verify_model_dir(model_dir)   # a published version: its files as published
        self._serve = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
        self._batch_size = batch_size

    def __call__(self, raw: dict[str, np.ndarray]) -> np.ndarray:
        import tensorflow as tf
        n = len(next(iter(raw.values())))
        scores = []
        for start in range(0, n, self._batch_size):
            batch = {k: tf.constant(v[start:start + self._batch_size]) for k, v in raw.items()}
            scores.append(self._serve(**batch)["p_click"].numpy().reshape(-1))
        return np.concatenate(scores) if scores else np.zeros(0)


def predict(model_dir: str | Path, raw: dict[str, np.ndarray], batch_size: int = 8192) -> np.ndarray:
    """Score raw features through a SavedModel's `serving_default` signature."""
    return Scorer(model_dir, batch_size)(raw)
