"""The text model: one pretrained BERT encoder shared by one softmax head per configured
task (exactly the config's tasks, never an untrained extra), its tf.data input pipeline,
and its raw-string SavedModel export.

Why one encoder with several heads and not one model per task: the tasks read the same text, and
on CPU the encoder is ~99% of the cost, so one forward pass serving both heads halves
training and inference time, and one artifact (one registry entry, one serving check, one
lineage record) carries both tasks. The price is that the tasks are published together:
the gate guards each task's AUC separately (per-task rules), so a candidate that helps
sentiment but hurts topic is rejected instead of silently shipped.

Speed on CPU: most reviews are far shorter than MAX_SEQ_LENGTH tokens, so batches are
grouped by token length (`tf.data.Dataset.bucket_by_sequence_length`) and padded only to
the longest sequence of their batch; tokenization runs in `tf.data` (parallel map +
prefetch), off the training step. `padding="fixed"` pads every batch to max_len (the
benchmark's baseline).

Export: `export(...)` writes a SavedModel whose `serving_default` takes a 1-D batch of raw
strings (`text`) and returns per-class probabilities per task (one output per task),
tokenizing inside the graph, so no client re-implements WordPiece. The graph uses
tensorflow-text ops: a loader must `import tensorflow_text` (op registration only) before
`tf.saved_model.load`. When the training step fitted decision offsets
(`components.text.calibrate`), the signature returns softmax(log p + offsets).
Beside it: `assets.extra/labels.json` (label names per task, the config used, the
offsets under "calibration") and `keras/model.weights.h5` (for warm starts).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from components.text import config as C  # noqa: E402
from components.text.config import balanced_class_weights  # noqa: E402,F401
from components.text.calibrate import LOG_FLOOR  # noqa: E402
from components.text.checkpoint import build_backbone, build_tokenizer  # noqa: E402

LABELS_FILE = "assets.extra/labels.json"
WEIGHTS_FILE = "keras/model.weights.h5"
SIGNATURE = "serving_default"
INPUT_KEY = "text"


class MaskedMeanPool(keras.layers.Layer):
    """Mean of the token vectors that are not padding (how all-MiniLM was trained).
    Built in float32 (`build_model`): a bfloat16 sum over 128 tokens would keep 8 bits."""

    def call(self, sequence, mask):
        m = keras.ops.cast(keras.ops.expand_dims(mask, -1), sequence.dtype)
        return keras.ops.sum(sequence * m, axis=1) / keras.ops.maximum(
            keras.ops.sum(m, axis=1), 1.0)


def build_model(checkpoint_dir: str, tasks: dict[str, list[str]],
                load_weights: bool = True, dropout: float = 0.1) -> keras.Model:
    backbone = build_backbone(checkpoint_dir, load_weights=load_weights, dropout=dropout)
    backbone.get_layer("pooled_dense").trainable = False  # unused: the heads mean-pool
    token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    padding_mask = keras.Input(shape=(None,), dtype="bool", name="padding_mask")
    segment_ids = keras.ops.zeros_like(token_ids)
    seq = backbone({"token_ids": token_ids, "padding_mask": padding_mask,
                    "segment_ids": segment_ids})["sequence_output"]
    pooled = MaskedMeanPool(name="mean_pool", dtype="float32")(seq, padding_mask)
    pooled = keras.layers.Dropout(dropout, name="head_dropout")(pooled)
    outputs = {task: keras.layers.Dense(len(labels), activation="softmax", name=task,
                                        dtype="float32")(pooled)
               for task, labels in tasks.items()}
    return keras.Model({"token_ids": token_ids, "padding_mask": padding_mask}, outputs,
                       name="text_classifier")


class Encoder:
    """Raw strings -> [CLS] wordpieces [SEP], truncated to max_len (graph ops only)."""

    def __init__(self, checkpoint_dir: str, max_len: int = C.MAX_SEQ_LENGTH):
        if max_len < 8:
            raise ValueError(f"max_len must be >= 8, got {max_len}")
        self.tokenizer = build_tokenizer(checkpoint_dir)
        self.max_len = int(max_len)
        self.cls = int(self.tokenizer.cls_token_id)
        self.sep = int(self.tokenizer.sep_token_id)
        self.pad = int(self.tokenizer.pad_token_id)
        # keras-hub tokenizers return Python lists in eager mode: run batches as a graph.
        self.batch_graph = tf.function(self.batch, input_signature=[
            tf.TensorSpec([None], tf.string)])

    def one(self, text: tf.Tensor) -> tf.Tensor:
        """Scalar string -> 1-D int32 ids (for tf.data.map)."""
        ids = tf.cast(self.tokenizer(text), tf.int32)[: self.max_len - 2]
        return tf.concat([[self.cls], ids, [self.sep]], axis=0)

    def batch(self, texts: tf.Tensor) -> dict:
        """1-D strings -> model inputs padded to the longest sequence of the batch."""
        ids = tf.cast(self.tokenizer(texts), tf.int32)[:, : self.max_len - 2]
        n = ids.nrows()
        cls = tf.fill([n, 1], self.cls)
        sep = tf.fill([n, 1], self.sep)
        ids = tf.concat([tf.RaggedTensor.from_tensor(cls), ids,
                         tf.RaggedTensor.from_tensor(sep)], axis=1)
        dense = ids.to_tensor(default_value=self.pad)
        return {"token_ids": dense, "padding_mask": tf.not_equal(dense, self.pad)}


# ---------------------------------------------------------------- tf.data

def features(tasks) -> dict:
    """The parsing spec of a preprocessed record: id, text, its day (the evaluation
    report's by-day slices; empty in records written before it was kept) and one class
    index per task."""
    return {"text": tf.io.FixedLenFeature([], tf.string),
            "example_id": tf.io.FixedLenFeature([], tf.string),
            "span": tf.io.FixedLenFeature([], tf.string, default_value=b""),
            **{t: tf.io.FixedLenFeature([], tf.int64, default_value=C.UNLABELLED)
               for t in tasks}}


def read_records(pattern: str | list[str], tasks) -> tf.data.Dataset:
    files = tf.io.gfile.glob(pattern) if isinstance(pattern, str) else pattern
    if not files:
        raise FileNotFoundError(f"no TFRecord shards match {pattern}")
    spec = features(tasks)
    ds = tf.data.TFRecordDataset(sorted(files), compression_type="GZIP")
    return ds.map(lambda r: tf.io.parse_single_example(r, spec),
                  num_parallel_calls=tf.data.AUTOTUNE)


def class_weight_table(weights: dict[str, list[float]]) -> dict[str, tf.Tensor]:
    return {task: tf.constant(w, dtype=tf.float32) for task, w in weights.items()}


def make_dataset(records: tf.data.Dataset, encoder: Encoder, batch_size: int,
                 padding: str = "bucket", class_weights: dict[str, list[float]] | None = None,
                 shuffle_buffer: int = 0, seed: int = 0, tasks=(),
                 boundaries: tuple[int, ...] = C.BUCKET_BOUNDARIES) -> tf.data.Dataset:
    """(features, labels, sample_weights) batches for Keras.

    A missing label (UNLABELLED) gets weight 0, so a record labelled for one task only
    still trains the other head. `padding`: "bucket" (length buckets, padded to the
    batch's longest), "dynamic" (input order, padded to the batch's longest) or "fixed"
    (every batch padded to max_len).
    """
    if padding not in ("bucket", "dynamic", "fixed"):
        raise ValueError(f"padding must be bucket, dynamic or fixed, got {padding!r}")
    cw = class_weight_table(class_weights) if class_weights else None

    def to_example(ex):
        ids = encoder.one(ex["text"])
        labels, weights = {}, {}
        for task in tasks:
            y = tf.cast(ex[task], tf.int32)
            present = y >= 0
            labels[task] = tf.maximum(y, 0)
            w = tf.gather(cw[task], tf.maximum(y, 0)) if cw else tf.constant(1.0)
            weights[task] = tf.where(present, w, 0.0)
        return ids, labels, weights

    ds = records
    if shuffle_buffer:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    ds = ds.map(to_example, num_parallel_calls=tf.data.AUTOTUNE)
    if padding == "bucket":
        bounds = [b for b in boundaries if b < encoder.max_len]
        ds = ds.bucket_by_sequence_length(
            element_length_func=lambda ids, y, w: tf.shape(ids)[0],
            bucket_boundaries=[b + 1 for b in bounds],
            bucket_batch_sizes=[batch_size] * (len(bounds) + 1),
            padding_values=(encoder.pad, None, None), pad_to_bucket_boundary=False)
    elif padding == "dynamic":
        ds = ds.padded_batch(batch_size, padding_values=(encoder.pad, None, None))
    else:
        ds = ds.padded_batch(batch_size, padded_shapes=([encoder.max_len], {t: [] for t in tasks},
                                                        {t: [] for t in tasks}),
                             padding_values=(encoder.pad, None, None))
    pad = encoder.pad
    ds = ds.map(lambda ids, y, w: ({"token_ids": ids, "padding_mask": tf.not_equal(ids, pad)},
                                   y, w), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


# ---------------------------------------------------------------- distribution

def make_strategy(name: str = "default") -> tf.distribute.Strategy:
    """The tf.distribute strategy named by configuration.

    default: one device (CPU here, or one GPU worker); mirrored: all local GPUs;
    multi_worker_mirrored: synchronous data parallelism across machines of the pool
    (each worker reads its role from TF_CONFIG).
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"strategy must be default, mirrored or multi_worker_mirrored, got {name!r}")


def compute_policy(precision: str = "auto", cpuinfo: str = "/proc/cpuinfo") -> str:
    """The Keras dtype policy of the fine-tune. auto: mixed_bfloat16 on a CPU with AMX
    (bfloat16 matrix tiles: 1.44x the training examples/s of float32 here, macro-F1 no
    lower; docs/performance.md) and no GPU, else float32 (mixed precision on a GPU or a
    CPU without AMX is not measured here). Variables stay float32 either way, and the
    export computes in float32 (`as_float32`), so serving never depends on the trainer's
    CPU."""
    if precision not in C.PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(C.PRECISIONS)}, "
                         f"got {precision!r}")
    if precision != "auto":
        return precision
    try:
        flags = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return "float32"
    has_amx = any(line.startswith("flags") and " amx_bf16" in line
                  for line in flags.splitlines())
    return "mixed_bfloat16" if has_amx and not tf.config.list_physical_devices("GPU") \
        else "float32"


def as_float32(model: keras.Model, checkpoint_dir: str, tasks: dict[str, list[str]]
               ) -> keras.Model:
    """The same weights in a model that computes in float32 (what is calibrated, exported
    and evaluated). A float32 model is returned as it is."""
    if model.dtype_policy.name == "float32":
        return model
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        twin = build_model(checkpoint_dir, tasks, load_weights=False)
    finally:
        keras.config.set_dtype_policy(previous)
    twin.set_weights(model.get_weights())
    return twin


# ---------------------------------------------------------------- export / serving

def apply_offsets(probs: dict, offsets: dict[str, list[float]] | None) -> dict:
    """softmax(log p + offsets) per task (the decision calibration of
    `components.text.calibrate`); a task without offsets (or all zero) is unchanged."""
    out = {}
    for task, p in probs.items():
        b = (offsets or {}).get(task)
        if not b or not any(b):
            out[task] = p
            continue
        logp = tf.math.log(tf.maximum(p, tf.constant(LOG_FLOOR, p.dtype)))
        out[task] = tf.nn.softmax(logp + tf.constant(b, dtype=p.dtype), axis=-1)
    return out


class _ServingModule(tf.Module):
    def __init__(self, model: keras.Model, encoder: Encoder,
                 offsets: dict[str, list[float]] | None = None):
        super().__init__()
        self.model = model
        self.tokenizer = encoder.tokenizer
        self._encoder = encoder
        self._offsets = {t: [float(x) for x in b] for t, b in (offsets or {}).items()}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=INPUT_KEY)])
    def serve(self, text):
        probs = self.model(self._encoder.batch(text), training=False)
        probs = apply_offsets(probs, self._offsets)
        return {task: tf.identity(p, name=task) for task, p in probs.items()}


def predict_proba(model: keras.Model, encoder: Encoder, texts: list[str],
                  batch_size: int = 64, offsets: dict[str, list[float]] | None = None
                  ) -> dict[str, np.ndarray]:
    """In-memory probabilities per task (eager Keras call, no SavedModel); with `offsets`,
    calibrated exactly as the exported signature does."""
    out: dict[str, list[np.ndarray]] = {}
    for i in range(0, len(texts), batch_size):
        inputs = encoder.batch_graph(tf.constant(texts[i:i + batch_size]))
        probs = apply_offsets(model(inputs, training=False), offsets)
        for task, p in probs.items():
            out.setdefault(task, []).append(np.asarray(p))
    return {t: np.concatenate(v) for t, v in out.items()}


def export(model: keras.Model, encoder: Encoder, out_dir: str | Path, meta: dict,
           offsets: dict[str, list[float]] | None = None) -> Path:
    """Write the raw-string SavedModel + labels.json + Keras weights into `out_dir`.

    `offsets` (per task, per class) are applied inside the serving signature; the Keras
    weights stay the raw model's (a warm start refits its own offsets)."""
    out = Path(out_dir)
    module = _ServingModule(model, encoder, offsets)
    tf.saved_model.save(module, str(out), signatures={SIGNATURE: module.serve})
    (out / Path(LABELS_FILE).parent).mkdir(parents=True, exist_ok=True)
    (out / LABELS_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    (out / Path(WEIGHTS_FILE).parent).mkdir(parents=True, exist_ok=True)
    model.save_weights(str(out / WEIGHTS_FILE))
    return out


def read_labels(model_dir: str | Path) -> dict:
    path = Path(model_dir) / LABELS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{model_dir} is not a text model export: no {LABELS_FILE}")
    return json.loads(path.read_text())


def load_serving(model_dir: str | Path):
    """The exported signature, loaded with plain TensorFlow (+ tensorflow-text ops)."""
    import tensorflow_text  # noqa: F401  registers the WordPiece/normalize ops the graph uses

    from retrain.common.registry import verify_model_dir

    verify_model_dir(model_dir)   # a published version: its files as published
    loaded = tf.saved_model.load(str(model_dir))
    return loaded, loaded.signatures[SIGNATURE]


def serve_proba(signature, texts: list[str], batch_size: int = 64) -> dict[str, np.ndarray]:
    out: dict[str, list[np.ndarray]] = {}
    for i in range(0, len(texts), batch_size):
        res = signature(**{INPUT_KEY: tf.constant(texts[i:i + batch_size])})
        for task, p in res.items():
            out.setdefault(task, []).append(p.numpy())
    return {t: np.concatenate(v) for t, v in out.items()}
