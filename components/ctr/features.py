"""The one place that names the CTR model's features.

Generation, validation, preprocessing (tf.Transform), training and serving all import
these names, so a renamed or added feature changes in one file. Stdlib only: DAG files
and the data generator import it without TensorFlow.
"""
from __future__ import annotations

import hashlib

LABEL_KEY = "click"
EXAMPLE_ID_KEY = "example_id"
TIMESTAMP_KEY = "ts"

# Very high-cardinality IDs: hashed into a fixed number of buckets (no vocabulary pass,
# new IDs need no re-analysis; collisions are cheap at these bucket counts).
HASHED_ID_FEATURES: dict[str, int] = {
    "user_id": 2**18,
    "item_id": 2**17,
}
# Categorical features with a moderate number of values: a vocabulary (top-k by
# frequency) computed by tf.Transform over the window, plus OOV buckets for new values.
VOCAB_FEATURES: dict[str, dict[str, int]] = {
    "category_id": {"top_k": 2000, "oov_buckets": 10},
    "device": {"top_k": 20, "oov_buckets": 2},
}
# Small integer features used as categories directly (value must lie in [0, size)).
IDENTITY_FEATURES: dict[str, int] = {
    "hour": 24,
    "position": 32,
}
# Heavy-tailed, possibly missing numeric features: log1p, then z-score over the window;
# a missing value becomes 0 after scaling plus a separate missing indicator.
NUMERIC_FEATURES: list[str] = ["price", "user_past_clicks", "item_age_days"]

CATEGORICAL_FEATURES: list[str] = [*HASHED_ID_FEATURES, *VOCAB_FEATURES, *IDENTITY_FEATURES]
RAW_FEATURES: list[str] = [*CATEGORICAL_FEATURES, *NUMERIC_FEATURES]

# Raw column types as written by the generator and expected by validation.
RAW_STRING_COLUMNS = [EXAMPLE_ID_KEY, "user_id", "item_id", "category_id", "device"]
RAW_INT_COLUMNS = [TIMESTAMP_KEY, "hour", "position", LABEL_KEY]
RAW_FLOAT_COLUMNS = list(NUMERIC_FEATURES)

# Column of the click probability that generated the label; kept in a separate file
# beside the data (never a model input), used only for Bayes-optimal reference figures.
TRUE_PROB_KEY = "p_click"

def transformed_name(key: str) -> str:
    """Name of a feature after tf.Transform (the TFX `_xf` convention)."""
    return f"{key}_xf"


def missing_name(key: str) -> str:
    """Name of the 0/1 missing-value indicator of a numeric feature."""
    return f"{key}_missing_xf"


def categorical_size(key: str) -> int:
    """Number of embedding rows a transformed categorical feature needs."""
    if key in HASHED_ID_FEATURES:
        return HASHED_ID_FEATURES[key]
    if key in VOCAB_FEATURES:
        cfg = VOCAB_FEATURES[key]
        return cfg["top_k"] + cfg["oov_buckets"]
    return IDENTITY_FEATURES[key]


def eval_bucket(example_id: str) -> int:
    """Stable bucket 0..99 of an example; the same row always lands in the same split."""
    digest = hashlib.blake2b(example_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 100


def is_eval(example_id: str, eval_percent: int) -> bool:
    return eval_bucket(example_id) < eval_percent
