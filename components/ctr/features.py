"""Names of the generated CTR logs' features, as module constants for existing callers.

The single source of truth is the packaged feature config
(`feature_configs/generated.yaml`, loaded by `feature_config.default()`); these constants
are derived from it, so a renamed or added feature changes in that one file. Code that
must also work on other logs takes a `FeatureConfig` instead. Stdlib + PyYAML only: DAG
files and the data generator import it without TensorFlow.
"""
from __future__ import annotations

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


# The eval split's hash: 64-bit FNV-1a over the id's UTF-8 bytes, then the splitmix64
# finalizer (so the low digits are well mixed), modulo 100. Chosen because numpy computes
# it for a whole batch at once (`eval_mask`), where a cryptographic digest costs a Python
# call per row (the preprocessing job hashes every row twice). Never change it: it decides
# which rows of every day are held out, and so which rows no model ever trained on.
# Its name is recorded with every published version (the split is pinned with the model).
EVAL_HASH = "fnv1a64-splitmix-mod100"
_FNV_OFFSET, _FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_U64 = (1 << 64) - 1


def eval_bucket(example_id: str | bytes) -> int:
    """Stable bucket 0..99 of an example; the same row always lands in the same split."""
    data = example_id.encode("utf-8") if isinstance(example_id, str) else example_id
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _U64
    h ^= h >> 30
    h = (h * _MIX1) & _U64
    h ^= h >> 27
    h = (h * _MIX2) & _U64
    h ^= h >> 31
    return h % 100


# The validation slice (early stopping): of the rows not held out, those whose id hash
# falls below `validation_percent` in its next two decimal digits ((h // 100) % 100):
# independent of the eval split, the same rows every day and whatever the file layout.
# Chosen in the preprocessing job, which writes them to their own shards and counts them.
VALIDATION_HASH = "fnv1a64-splitmix-div100-mod100"
VALIDATION_PERCENT = 10


def validation_mask(example_ids, validation_percent: int):
    """Which rows (of those not held out) belong to the validation slice."""
    return validation_of_hash(id_hash64(example_ids), validation_percent)


def validation_of_hash(h, validation_percent: int):
    import numpy as np
    return (h // np.uint64(100)) % np.uint64(100) < validation_percent


def held_out_of_hash(h, eval_percent: int):
    import numpy as np
    return h % np.uint64(100) < eval_percent


def is_eval(example_id: str | bytes, eval_percent: int) -> bool:
    return eval_bucket(example_id) < eval_percent


def eval_mask(example_ids, eval_percent: int):
    """`is_eval` of many ids at once (a pyarrow string/binary array, or a list of str or
    bytes), as a numpy bool array: the same buckets, computed column-wise."""
    return held_out_of_hash(id_hash64(example_ids), eval_percent)


def id_hash64(example_ids):
    """The split's 64-bit hash of each id (before `% 100`), as a numpy uint64 array:
    also what the evaluation's bootstrap weights are drawn from."""
    import numpy as np
    import pyarrow as pa

    ids = example_ids if isinstance(example_ids, (pa.Array, pa.ChunkedArray)) else pa.array(
        example_ids, type=pa.large_binary() if example_ids and isinstance(
            example_ids[0], bytes) else pa.large_string())
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks() if ids.num_chunks else pa.array([], pa.large_binary())
    ids = ids.cast(pa.large_binary())
    n = len(ids)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    offsets = np.frombuffer(ids.buffers()[1], dtype=np.int64)[ids.offset:ids.offset + n + 1]
    data = (np.frombuffer(ids.buffers()[2], dtype=np.uint8) if ids.buffers()[2] is not None
            else np.zeros(0, dtype=np.uint8))
    starts, lengths = offsets[:-1], np.diff(offsets)
    h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    prime = np.uint64(_FNV_PRIME)
    with np.errstate(over="ignore"):
        shortest = int(lengths.min())
        for j in range(int(lengths.max())):
            if j < shortest:                  # every id has a byte here: no mask needed
                h = (h ^ data[starts + j]) * prime
            else:
                live = lengths > j
                h[live] = (h[live] ^ data[starts[live] + j]) * prime
        h ^= h >> np.uint64(30)
        h *= np.uint64(_MIX1)
        h ^= h >> np.uint64(27)
        h *= np.uint64(_MIX2)
        h ^= h >> np.uint64(31)
    return h


def derived_ids(batch, columns):
    """Each row's id when the logs have none (a config without `example_id`): 16 hex
    digits of pandas' row hash (`hash_pandas_object`, a fixed key: stable across runs and
    machines) over the config's `columns` in order, list values joined. Exact repeats
    (every configured column equal) share an id, so they fall into the same split, and
    the duplicate rule counts them; a column the config does not read changes nothing."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    frame = {}
    for name in columns:
        col = batch.column(name)
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            col = pc.binary_join(col, pa.scalar("\x1f", col.type.value_type))  # null stays
        frame[name] = col.to_pandas()
    hashes = pd.util.hash_pandas_object(pd.DataFrame(frame), index=False).to_numpy()
    return pa.array([f"{h:016x}" for h in hashes.tolist()], pa.large_string())
