"""Read raw CTR rows back for evaluation and serving checks.

Evaluation scores *raw* rows through each model's serving signature, so a candidate and
a baseline with different transform graphs (other vocabularies, other means) are
compared on exactly the same input; the eval rows are selected with the same stable
hash as the Beam job uses.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from components.ctr import features as F


def read_span(span_dir: str | Path, columns: list[str] | None = None) -> pa.Table:
    parts = sorted(Path(span_dir).glob("part-*.parquet"))
    if not parts:
        raise FileNotFoundError(f"no part-*.parquet files in {span_dir}")
    return pa.concat_tables(pq.read_table(p, columns=columns) for p in parts)


def read_eval_rows(span_dir: str | Path, eval_percent: int) -> pa.Table:
    table = read_span(span_dir)
    ids = table.column(F.EXAMPLE_ID_KEY).to_pylist()
    mask = np.fromiter((F.is_eval(i, eval_percent) for i in ids), dtype=bool, count=len(ids))
    return table.filter(pa.array(mask))


def read_rows_by_id(span_dir: str | Path, example_ids: list[str]) -> pa.Table:
    """The span's rows with these example ids, in the given order (all must exist)."""
    table = read_span(span_dir)
    wanted = pa.array(example_ids, pa.string())
    index = pc.index_in(wanted, value_set=table.column(F.EXAMPLE_ID_KEY))
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


def to_raw_features(table: pa.Table) -> dict[str, np.ndarray]:
    """Columns as the serving signature takes them (numeric nulls become NaN)."""
    out: dict[str, np.ndarray] = {}
    for key in [*F.HASHED_ID_FEATURES, *F.VOCAB_FEATURES]:
        out[key] = np.asarray(table.column(key).to_pylist(), dtype=object)
    for key in F.IDENTITY_FEATURES:
        out[key] = table.column(key).to_numpy().astype(np.int64)
    for key in F.NUMERIC_FEATURES:
        out[key] = table.column(key).cast(pa.float32()).fill_null(np.nan).to_numpy()
    return out


def predict(model_dir: str | Path, raw: dict[str, np.ndarray], batch_size: int = 8192) -> np.ndarray:
    """Score raw features through a SavedModel's `serving_default` signature."""
    import tensorflow as tf
    serve = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    n = len(next(iter(raw.values())))
    scores = []
    for start in range(0, n, batch_size):
        batch = {k: tf.constant(v[start:start + batch_size]) for k, v in raw.items()}
        scores.append(serve(**batch)["p_click"].numpy().reshape(-1))
    return np.concatenate(scores) if scores else np.zeros(0)
