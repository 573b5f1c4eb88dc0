"""The CTR model's tf.Transform `preprocessing_fn` and raw input signature, built from a
`FeatureConfig` (components/ctr/feature_config.py: kinds, transforms, padding convention).

One pure function per config: the Beam job analyses and applies it, the exported model
embeds the same graph, so training and serving can never disagree about a feature.
`preprocessing_fn`, `raw_feature_spec()` and `raw_training_spec()` are those of the
packaged default config (the generated logs).

Numeric features arrive as float with NaN for missing values (Arrow nulls are filled with
NaN on read): `zscore`/`log_zscore` ones are (log1p'd and) z-scored with NaN-aware
statistics of the analysis window (one analyzer, one pass for all of them) and get a 0/1
missing indicator. Multi-valued inputs (multi_categorical) arrive as a SparseTensor (a
VarLenFeature / varlen_sparse_tensor representation; a RaggedTensor works too); every
output is fixed-length, so the training data parses densely.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from components.ctr import feature_config as fc
from components.ctr.feature_config import FeatureConfig, missing_name, transformed_name

PAD_ID = -1   # id of an empty slot of a multi-valued output (see feature_config)
_TF_DTYPES = {"str": tf.string, "int": tf.int64, "float": tf.float32, "str_list": tf.string}
# Text tokenisation: lower-case, anything but letters and digits separates tokens.
_TOKEN_SEPARATORS = r"[^\p{L}\p{N}]+"


def _cfg(cfg: FeatureConfig | None) -> FeatureConfig:
    return fc.default() if cfg is None else cfg


def raw_feature_spec(cfg: FeatureConfig | None = None) -> dict:
    """Raw model inputs (no label): FixedLenFeature for scalars, VarLenFeature(tf.string)
    for multi_categorical (str_list) columns."""
    cfg = _cfg(cfg)
    spec = {}
    for f in cfg.features:
        kind = f.raw_type
        spec[f.name] = (tf.io.VarLenFeature(tf.string) if kind == "str_list"
                        else tf.io.FixedLenFeature([], _TF_DTYPES[kind]))
    return spec


def raw_training_spec(cfg: FeatureConfig | None = None) -> dict:
    """Raw inputs of the training data: the model inputs plus the label (int64 0/1)."""
    cfg = _cfg(cfg)
    return {**raw_feature_spec(cfg), cfg.label: tf.io.FixedLenFeature([], tf.int64)}


# ----------------------------------------------------------------------------- serving

def serving_signature(cfg: FeatureConfig | None = None) -> dict[str, tf.TensorSpec]:
    """Input signature of the exported `serving_default`: one tensor per raw feature,
    [batch] for scalars and [batch, None] tf.string for multi_categorical, padded with ""
    (empty strings are not values; see `pad_string_lists`)."""
    cfg = _cfg(cfg)
    out = {}
    for f in cfg.features:
        shape = [None, None] if f.raw_type == "str_list" else [None]
        out[f.name] = tf.TensorSpec(shape, _TF_DTYPES[f.raw_type], name=f.name)
    return out


def serving_to_transform_inputs(cfg: FeatureConfig | None,
                                raw: Mapping[str, tf.Tensor]) -> dict:
    """Serving inputs -> what the transform graph takes (padded lists -> SparseTensor)."""
    cfg = _cfg(cfg)
    out = {}
    for f in cfg.features:
        x = raw[f.name]
        out[f.name] = tf.sparse.from_dense(x) if f.raw_type == "str_list" else x
    return out


def pad_string_lists(values: Sequence[Sequence[str] | None]) -> np.ndarray:
    """Lists of strings (None = empty) as a [n, longest] object array padded with ""."""
    rows = [[v for v in (r if r is not None else []) if v is not None] for r in values]
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), max(width, 1)), b"", dtype=object)
    for i, r in enumerate(rows):
        for j, v in enumerate(r):
            out[i, j] = v.encode("utf-8") if isinstance(v, str) else v
    return out


def raw_batch(cfg: FeatureConfig | None, rows: Mapping[str, Sequence]) -> dict[str, tf.Tensor]:
    """Column-wise raw values (lists, numpy arrays; None = missing numeric) as the serving
    signature's tensors."""
    cfg = _cfg(cfg)
    spec = serving_signature(cfg)
    out = {}
    for f in cfg.features:
        values = rows[f.name]
        if f.raw_type == "str_list":
            out[f.name] = tf.constant(pad_string_lists(values), dtype=tf.string)
        elif f.raw_type == "float":
            out[f.name] = tf.constant(np.asarray([np.nan if v is None else v for v in values],
                                                 dtype=np.float32))
        else:
            out[f.name] = tf.constant(np.asarray(values) if f.raw_type == "int" else
                                      np.asarray(values, dtype=object), dtype=spec[f.name].dtype)
    return out


# ----------------------------------------------------------------------------- analysis

def _nan_aware_z_scores(xs: list[tf.Tensor], logs: list[bool]) -> list[tuple[tf.Tensor, tf.Tensor]]:
    """(z-score of x or of log1p(max(x, 0)), missing indicator) for each numeric feature.

    All features' statistics come from ONE `tft.mean` over a [batch, 3k] matrix (share
    present, E[v], E[v^2] per feature), so analysis needs a single pass over the data and
    a single analyzer: the var = E[v^2] - E[v]^2 form is safe for log1p'd values (order
    1-10), and computed in float64. The first version took E[(x - mean)^2] after the mean,
    which costs a second analysis phase (another full pass) and three analyzers per feature.
    """
    k = len(xs)
    x = tf.stack([tf.cast(v, tf.float32) for v in xs], axis=1)
    missing = tf.math.is_nan(x)
    present = tf.cast(tf.logical_not(missing), tf.float32)
    filled = tf.where(missing, 0.0, x)
    if all(logs):
        values = tf.math.log1p(tf.maximum(filled, 0.0))
    else:
        logged = tf.math.log1p(tf.maximum(filled, 0.0))
        values = tf.where(tf.constant([logs]), logged, filled)
    # float64 sums: E[x^2] - E[x]^2 cancels digits, and float32 batch sums merged in a
    # different order (other batching, other runner) would show in the 5th digit.
    values64, present64 = tf.cast(values, tf.float64), tf.cast(present, tf.float64)
    stats = tft.mean(tf.concat([present64, values64 * present64,
                                tf.square(values64) * present64], 1),
                     reduce_instance_dims=False, output_dtype=tf.float64)
    share_present = tf.maximum(stats[:k], 1e-9)
    mean64 = stats[k:2 * k] / share_present
    var = tf.cast(tf.maximum(stats[2 * k:] / share_present - tf.square(mean64), 0.0), tf.float32)
    mean = tf.cast(mean64, tf.float32)
    z = tf.where(missing, 0.0, (values - mean) * tf.math.rsqrt(var + 1e-12))
    missing = tf.cast(missing, tf.float32)
    return [(z[:, i], missing[:, i]) for i in range(k)]


def _bucketize(x: tf.Tensor, buckets: int, name: str) -> tf.Tensor:
    """Quantile bucket id in [0, buckets) of the window's present values; NaN -> buckets."""
    x = tf.cast(x, tf.float32)
    missing = tf.math.is_nan(x)
    boundaries = tft.quantiles(tf.boolean_mask(x, tf.logical_not(missing)), buckets,
                               epsilon=0.001, name=f"quantiles_{name}")
    ids = tft.apply_buckets(tf.where(missing, 0.0, x), boundaries)
    return tf.where(missing, tf.constant(buckets, tf.int64), tf.cast(ids, tf.int64))


def _ids(values: tf.Tensor, f: fc.Feature) -> tf.Tensor:
    """Categorical ids of a flat (or scalar-per-row) tensor of raw values; with a new-id
    row, the values the analysis window never saw take it (components/ctr/seen_filter.py)."""
    ids = _table_ids(values, f)
    if not f.new_id_row:
        return ids
    from components.ctr import seen_filter
    bits = f.filter_bits
    known = seen_filter.seen(values, seen_filter.window_filter(values, bits, f.name), bits)
    return tf.where(known, tf.cast(ids, tf.int64), tf.constant(f.new_id_index, tf.int64))


def _table_ids(values: tf.Tensor, f: fc.Feature) -> tf.Tensor:
    if f.transform == "hash":
        if values.dtype != tf.string:
            values = tf.strings.as_string(values)
        return tf.strings.to_hash_bucket_fast(values, f.hash_buckets)
    if f.transform == "vocabulary":
        kwargs = {"frequency_threshold": f.frequency_threshold} if f.frequency_threshold else {}
        # Unit weights give the same counts, but make tf.Transform sum them per batch in
        # the graph: unweighted, it hands every token to Beam as one Python element
        # (the largest per-row cost of the job on 2M rows, bench/preprocess_ctr.py).
        return tft.compute_and_apply_vocabulary(values, top_k=f.top_k,
                                                num_oov_buckets=f.oov_buckets,
                                                vocab_filename=f.name,
                                                weights=tf.ones_like(values, tf.float32),
                                                **kwargs)
    if f.transform == "identity":
        return tf.clip_by_value(values, 0, f.size - 1)
    raise ValueError(f"{f.name}: {f.transform} is not a categorical transform")


def _as_ragged(x) -> tf.RaggedTensor:
    if isinstance(x, tf.RaggedTensor):
        return x
    if isinstance(x, tf.SparseTensor):
        return tf.RaggedTensor.from_sparse(x)
    if x.shape.rank == 2:                 # dense [batch, n] padded with ""
        return tf.RaggedTensor.from_tensor(x)
    raise ValueError(f"multi-valued input must be a SparseTensor, RaggedTensor or 2-D "
                     f"tensor, got {x}")


def _tokens(text: tf.Tensor) -> tf.RaggedTensor:
    text = tf.reshape(text, [-1])
    text = tf.strings.regex_replace(tf.strings.lower(text, encoding="utf-8"),
                                    _TOKEN_SEPARATORS, " ")
    return tf.strings.split(text)


def _multi_ids(values: tf.RaggedTensor, f: fc.Feature) -> tf.Tensor:
    """Ragged raw values -> [batch, max_values] int64 ids, the first values kept, PAD_ID after."""
    values = tf.ragged.boolean_mask(values, tf.not_equal(values, ""))[:, :f.max_values]
    ids = values.with_flat_values(_ids(values.flat_values, f))
    return tf.cast(ids, tf.int64).to_tensor(default_value=PAD_ID, shape=[None, f.max_values])


def _cross(inputs: Mapping[str, tf.Tensor], cross: fc.Cross) -> tf.Tensor:
    parts = [tf.reshape(inputs[k], [-1, 1]) for k in cross.features]
    hashed = tf.sparse.cross_hashed(parts, num_buckets=cross.hash_buckets)
    return tf.reshape(tf.sparse.to_dense(hashed), [-1])


def make_preprocessing_fn(cfg: FeatureConfig | None = None) -> Callable[[dict], dict]:
    """The tf.Transform preprocessing_fn of a feature config.

    Outputs (all fixed-length): `<name>_xf` int64 ids [batch] for categorical features,
    bucketized numerics and crosses, [batch, max_values] (PAD_ID-padded) for
    multi_categorical and text; `<name>_xf` and `<name>_missing_xf` float32 for z-scored
    numerics; the label as float32 under its own name when present in the inputs.
    """
    cfg = _cfg(cfg)
    numeric = [f for f in cfg.features if f.kind == "numeric" and f.transform != "bucketize"]

    def preprocessing_fn(inputs: dict) -> dict:
        outputs: dict[str, tf.Tensor] = {}
        for f in cfg.features:
            x = inputs[f.name]
            if f.kind == "categorical":
                outputs[f.output] = _ids(x, f)
            elif f.kind == "multi_categorical":
                outputs[f.output] = _multi_ids(_as_ragged(x), f)
            elif f.kind == "text":
                outputs[f.output] = _multi_ids(_tokens(x), f)
            elif f.transform == "bucketize":
                outputs[f.output] = _bucketize(x, f.buckets, f.name)
        if numeric:
            scaled = _nan_aware_z_scores([inputs[f.name] for f in numeric],
                                         [f.transform == "log_zscore" for f in numeric])
            for f, (z, missing) in zip(numeric, scaled):
                outputs[transformed_name(f.name)], outputs[missing_name(f.name)] = z, missing
        for c in cfg.crosses:
            outputs[c.output] = _cross(inputs, c)
        if cfg.label in inputs:
            outputs[cfg.label] = tf.cast(inputs[cfg.label], tf.float32)
        return outputs

    preprocessing_fn.feature_config = cfg
    return preprocessing_fn


_default_fn: Callable | None = None


def preprocessing_fn(inputs: dict) -> dict:
    """The preprocessing_fn of the packaged default config (the generated logs)."""
    global _default_fn
    if _default_fn is None:
        _default_fn = make_preprocessing_fn(fc.default())
    return _default_fn(inputs)
