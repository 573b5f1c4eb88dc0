"""Fine-tuning the real pretrained checkpoint on real reviews (a tiny slice, CPU).

- training lowers the loss (same examples, same weighting, before vs after);
- the export serves raw strings: loaded in a fresh process with plain TensorFlow (plus
  the tensorflow-text op registration), it returns the in-memory model's probabilities;
- decision offsets are applied inside the exported signature, as in memory;
- the export can seed a warm start (same labels), and refuses one with other labels;
- the product's compile (`train.compile_model`) traces the train and test steps once each
  over batches of several lengths (a second trace was ~2 s of the first step).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.integration

MAX_LEN = 32
TEXTS = ["Absolutely love this dress, fits perfectly and the color is gorgeous.",
         "Terrible quality. The seams ripped after one wear, returning it.",
         "It's okay, runs a bit large.",
         "These jeans are so comfortable!",
         "x"]


@pytest.fixture(scope="module")
def slice_records():
    """64 real reviews (balanced-ish over sentiment) as the tf.data records training reads."""
    import tensorflow as tf

    from components.text import config as C
    from components.text.load import reviews_frame

    df, _ = reviews_frame()
    parts = [df[df[C.SENTIMENT] == s].head(n) for s, n in
             (("negative", 22), ("neutral", 20), ("positive", 22))]
    import pandas as pd
    df = pd.concat(parts).sample(frac=1.0, random_state=0)
    cols = {"text": df[C.TEXT].tolist(), "example_id": df[C.EXAMPLE_ID].tolist(),
            "sentiment": [C.label_index(C.SENTIMENT, v) for v in df[C.SENTIMENT]],
            "topic": [C.label_index(C.TOPIC, v) for v in df[C.TOPIC]],
            "rating": df[C.RATING].tolist()}
    return tf.data.Dataset.from_tensor_slices(cols), cols


@pytest.fixture(scope="module")
def trained(slice_records, tmp_path_factory):
    import keras

    from components.text import config as C
    from components.text import model as M
    from components.text.config import default_checkpoint_dir

    keras.utils.set_random_seed(1)
    records, cols = slice_records
    ckpt = default_checkpoint_dir()
    encoder = M.Encoder(ckpt, MAX_LEN)
    model = M.build_model(ckpt, {t: list(v) for t, v in C.TASKS.items()})
    model.compile(optimizer=keras.optimizers.AdamW(1e-4),
                  loss={t: "sparse_categorical_crossentropy" for t in C.TASKS})
    counts = {t: np.bincount(cols[t], minlength=len(v)).tolist() for t, v in C.TASKS.items()}
    weights = M.balanced_class_weights(counts)
    fixed = M.make_dataset(records, encoder, 16, "bucket", weights, tasks=tuple(C.TASKS)).cache()
    before = model.evaluate(fixed, verbose=0, return_dict=True)["loss"]
    model.fit(M.make_dataset(records, encoder, 16, "bucket", weights, shuffle_buffer=64,
                             tasks=tuple(C.TASKS)),
              epochs=2, verbose=0)
    after = model.evaluate(fixed, verbose=0, return_dict=True)["loss"]
    out = tmp_path_factory.mktemp("text-model") / "model"
    M.export(model, encoder, out, {"tasks": {t: list(v) for t, v in C.TASKS.items()},
                                   "max_seq_length": MAX_LEN})
    return {"model": model, "encoder": encoder, "before": before, "after": after,
            "dir": out}


def test_training_lowers_the_loss(trained):
    assert np.isfinite(trained["before"]) and np.isfinite(trained["after"])
    assert trained["after"] < trained["before"] * 0.9, (trained["before"], trained["after"])


def test_export_serves_raw_strings_like_the_in_memory_model(trained):
    from components.text import config as C
    from components.text import model as M

    expected = M.predict_proba(trained["model"], trained["encoder"], TEXTS)
    probe = textwrap.dedent(f"""
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # registers the tokenizer ops; no keras, no keras-hub
        loaded = tf.saved_model.load({str(trained["dir"])!r})
        sig = loaded.signatures["serving_default"]
        texts = json.loads(sys.argv[1])
        batch = {{k: v.numpy().tolist() for k, v in sig(text=tf.constant(texts)).items()}}
        one = {{k: v.numpy().tolist() for k, v in sig(text=tf.constant(texts[:1])).items()}}
        print(json.dumps({{"inputs": list(sig.structured_input_signature[1]),
                          "batch": batch, "one": one,
                          "keras_loaded": "keras" in sys.modules,
                          "keras_hub_loaded": "keras_hub" in sys.modules}}))
    """)
    out = subprocess.run([sys.executable, "-c", probe, json.dumps(TEXTS)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["inputs"] == ["text"] and not got["keras_hub_loaded"]
    for task, labels in C.TASKS.items():
        probs = np.asarray(got["batch"][task])
        assert probs.shape == (len(TEXTS), len(labels))
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(probs, expected[task], atol=1e-5)
        np.testing.assert_allclose(got["one"][task][0], expected[task][0], atol=1e-5)
    labels = M.read_labels(trained["dir"])
    assert labels["tasks"] == {t: list(v) for t, v in C.TASKS.items()}


def test_export_applies_decision_offsets_inside_the_signature(trained, tmp_path):
    """Calibrated export: the loaded signature returns softmax(log p + offsets), the same
    as the in-memory model with the same offsets; a task without offsets is unchanged."""
    from components.text import config as C
    from components.text import model as M
    from components.text.calibrate import apply_offsets

    offsets = {"sentiment": [0.0, 0.7, -0.1]}
    out = M.export(trained["model"], trained["encoder"], tmp_path / "calibrated",
                   {"tasks": {t: list(v) for t, v in C.TASKS.items()},
                    "max_seq_length": MAX_LEN, "calibration": {"tasks": {
                        "sentiment": {"offsets": offsets["sentiment"]}}}}, offsets)
    _, sig = M.load_serving(out)
    served = M.serve_proba(sig, TEXTS)
    raw = M.predict_proba(trained["model"], trained["encoder"], TEXTS)
    in_memory = M.predict_proba(trained["model"], trained["encoder"], TEXTS, offsets=offsets)
    np.testing.assert_allclose(served["sentiment"], in_memory["sentiment"], atol=1e-5)
    np.testing.assert_allclose(served["sentiment"],
                               apply_offsets(raw["sentiment"], offsets["sentiment"]), atol=1e-5)
    np.testing.assert_allclose(served["sentiment"].sum(axis=1), 1.0, atol=1e-5)
    assert not np.allclose(served["sentiment"], raw["sentiment"], atol=1e-3)
    np.testing.assert_allclose(served["topic"], raw["topic"], atol=1e-5)
    assert M.read_labels(out)["calibration"]["tasks"]["sentiment"]["offsets"] == [0.0, 0.7, -0.1]


def test_export_seeds_a_warm_start(trained, tmp_path):
    from components.text import model as M
    from components.text.config import default_checkpoint_dir
    from components.text import config as C
    from components.text.train import FinetuneSpec, _warm_start_source

    spec = FinetuneSpec(preprocess_dir="unused", out_dir="unused",
                        warm_start_model_dir=str(trained["dir"]))
    tasks = {t: list(v) for t, v in C.TASKS.items()}
    assert _warm_start_source(spec, tasks) == str(trained["dir"])
    fresh = M.build_model(default_checkpoint_dir(), tasks, load_weights=False)
    fresh.load_weights(str(trained["dir"] / M.WEIGHTS_FILE))
    np.testing.assert_allclose(
        M.predict_proba(fresh, trained["encoder"], TEXTS[:2])["sentiment"],
        M.predict_proba(trained["model"], trained["encoder"], TEXTS[:2])["sentiment"],
        atol=1e-6)
    other = tmp_path / "other"
    (other / "assets.extra").mkdir(parents=True)
    (other / M.LABELS_FILE).write_text(json.dumps({"tasks": {"sentiment": ["bad", "good"]}}))
    assert _warm_start_source(FinetuneSpec("x", "y", warm_start_model_dir=str(other)),
                              tasks) is None


def test_batch_scoring_job_labels_a_span_with_the_export(trained, tmp_path):
    import pandas as pd

    from beam_jobs import score_text
    from components.text import config as C

    span = tmp_path / "raw" / "text" / "dt=2026-11-05"
    span.mkdir(parents=True)
    pd.DataFrame({C.EXAMPLE_ID: [f"b{i}" for i in range(len(TEXTS))] + ["blank"],
                  C.TEXT: TEXTS + ["   "]}).to_parquet(span / "part-00000.parquet")
    (span / "_SUCCESS").write_text("")
    summary = score_text.run(["--raw-root", str(tmp_path / "raw" / "text"),
                              "--span", "2026-11-05", "--model-dir", str(trained["dir"]),
                              "--output-dir", str(tmp_path / "scores"), "--batch-size", "2",
                              "--runner=DirectRunner"])
    assert summary["rows_scored"] == len(TEXTS) and summary["rows_empty_text"] == 1
    rows = [json.loads(line) for f in sorted((tmp_path / "scores").glob("scores*.jsonl"))
            for line in f.read_text().splitlines()]
    assert sorted(r["example_id"] for r in rows) == sorted(f"b{i}" for i in range(len(TEXTS)))
    for r in rows:
        assert r["sentiment"] in C.SENTIMENT_LABELS and r["topic"] in C.TOPIC_LABELS
        assert abs(sum(r["sentiment_probs"].values()) - 1) < 1e-4


@pytest.mark.parametrize("evaluate_first", [True, False])
def test_the_compiled_model_traces_its_train_and_test_steps_once(slice_records, evaluate_first):
    """Keras builds loss trackers and metrics inside the first trace unless they exist:
    creating variables there makes tf.function trace again. A Python counter in the step
    runs once per trace, never per step."""
    import keras

    from components.text import config as C
    from components.text import model as M
    from components.text.config import default_checkpoint_dir
    from components.text.train import compile_model

    keras.utils.set_random_seed(2)
    records, cols = slice_records
    ckpt = default_checkpoint_dir()
    encoder = M.Encoder(ckpt, MAX_LEN)
    tasks = {t: list(v) for t, v in C.TASKS.items()}
    model = M.build_model(ckpt, tasks)
    compile_model(model, tasks, 1e-4)
    traces = {"train": 0, "test": 0}

    def counted(kind, step):
        def run(data):
            traces[kind] += 1
            return step(data)
        return run
    model.train_step = counted("train", model.train_step)
    model.test_step = counted("test", model.test_step)
    counts = {t: np.bincount(cols[t], minlength=len(v)).tolist() for t, v in C.TASKS.items()}
    data = M.make_dataset(records.take(48), encoder, 8, "bucket",
                          M.balanced_class_weights(counts), tasks=tuple(C.TASKS))
    lengths = {int(x["token_ids"].shape[1]) for x, *_ in data}
    assert len(lengths) >= 2, lengths                  # batches of more than one shape
    if evaluate_first:                                 # as train.run does, before fitting
        model.evaluate(data, verbose=0)
    model.fit(data, epochs=1, verbose=0)
    assert traces == {"train": 1, "test": int(evaluate_first)}


def test_a_bfloat16_fine_tune_is_exported_as_a_float32_model_with_its_weights(slice_records):
    """precision mixed_bfloat16 (auto on a CPU with AMX): the model trains in bfloat16, and
    what is calibrated, exported and evaluated is the same weights computing in float32."""
    import keras

    from components.text import config as C
    from components.text import model as M
    from components.text.config import default_checkpoint_dir

    tasks = {t: list(v) for t, v in C.TASKS.items()}
    ckpt = default_checkpoint_dir()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        mixed = M.build_model(ckpt, tasks)
    finally:
        keras.config.set_dtype_policy("float32")
    assert mixed.get_layer("mean_pool").compute_dtype == "float32"   # pooled in float32
    twin = M.as_float32(mixed, ckpt, tasks)
    assert keras.config.dtype_policy().name == "float32"             # nothing leaks
    assert mixed.dtype_policy.name == "mixed_bfloat16" and twin.dtype_policy.name == "float32"
    assert all(np.array_equal(a, b) for a, b in zip(mixed.get_weights(), twin.get_weights()))
    assert M.as_float32(twin, ckpt, tasks) is twin
    encoder = M.Encoder(ckpt, MAX_LEN)
    p_mixed = M.predict_proba(mixed, encoder, TEXTS)
    p_twin = M.predict_proba(twin, encoder, TEXTS)
    for t in tasks:
        assert np.allclose(p_mixed[t], p_twin[t], atol=0.05), t     # bfloat16 rounding only
