"""Names of the generated CTR logs' features, as module constants for existing callers.

The single source of truth is the packaged feature config
(`feature_configs/generated.yaml`, loaded by `feature_config.default()`); these constants
are derived from it, so a renamed or added feature changes in that one file. Code that
must also work on other logs takes a `FeatureConfig` instead. Stdlib + PyYAML only: DAG
files and the data generator import it without TensorFlow.
"""
from __future__ import annotations

import hashlib

from components.ctr import feature_config as _fc
from components.ctr.feature_config import missing_name, transformed_name  # noqa: F401

_CFG = _fc.default()

LABEL_KEY = _CFG.label
EXAMPLE_ID_KEY = _CFG.example_id
# Event time of the generated logs: written by the generator and validated, not a feature.
TIMESTAMP_KEY = "ts"

# Very high-cardinality IDs: hashed into a fixed number of buckets.
HASHED_ID_FEATURES: dict[str, int] = {
    f.name: f.hash_buckets for f in _CFG.features
    if f.kind == "categorical" and f.transform == "hash"}
# Moderate cardinality: a top-k vocabulary of the window plus OOV buckets.
VOCAB_FEATURES: dict[str, dict[str, int]] = {
    f.name: {"top_k": f.top_k, "oov_buckets": f.oov_buckets}
    for f in _CFG.features if f.kind == "categorical" and f.transform == "vocabulary"}
# Small integer features used as categories directly (value must lie in [0, size)).
IDENTITY_FEATURES: dict[str, int] = {
    f.name: f.size for f in _CFG.features if f.kind == "categorical" and f.transform == "identity"}
# Heavy-tailed, possibly missing numeric features: log1p, then z-score over the window;
# a missing value becomes 0 after scaling plus a separate missing indicator.
NUMERIC_FEATURES: list[str] = _CFG.numeric_features()

CATEGORICAL_FEATURES: list[str] = [*HASHED_ID_FEATURES, *VOCAB_FEATURES, *IDENTITY_FEATURES]
RAW_FEATURES: list[str] = [*CATEGORICAL_FEATURES, *NUMERIC_FEATURES]

# Raw column types as written by the generator and expected by validation.
_RAW = _CFG.raw_columns()
RAW_STRING_COLUMNS = [k for k, t in _RAW.items() if t == "str"]
RAW_INT_COLUMNS = [TIMESTAMP_KEY, *(k for k, t in _RAW.items() if t == "int" and k != LABEL_KEY),
                   LABEL_KEY]
RAW_FLOAT_COLUMNS = [k for k, t in _RAW.items() if t == "float"]

# Column of the click probability that generated the label; kept in a separate file
# beside the data (never a model input), used only for Bayes-optimal reference figures.
TRUE_PROB_KEY = "p_click"


def categorical_size(key: str) -> int:
    """Number of embedding rows a transformed categorical feature needs."""
    return _CFG.categorical_size(key)


def eval_bucket(example_id: str) -> int:
    """Stable bucket 0..99 of an example; the same row always lands in the same split."""
    digest = hashlib.blake2b(example_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 100


def is_eval(example_id: str, eval_percent: int) -> bool:
    return eval_bucket(example_id) < eval_percent


def eval_mask(example_ids, eval_percent: int):
    """`is_eval` of many ids at once, as a numpy bool array: the same buckets, with the
    per-row Python work cut to one digest (the preprocessing job hashes every row)."""
    import numpy as np
    blake2b = hashlib.blake2b
    digests = b"".join([blake2b(i.encode("utf-8") if isinstance(i, str) else i,
                                digest_size=8).digest() for i in example_ids])
    return np.frombuffer(digests, dtype="<u8") % 100 < eval_percent
