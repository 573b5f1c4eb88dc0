"""Parameter-server training on a real local cluster: separate ps, worker and chief
processes on 127.0.0.1, started by components.ctr.cluster on the tiny session span.

Covers what a mock could not: the embedding tables really sharded over two parameter
servers, the export from the chief equal to the in-cluster model, a SIGKILLed worker
restarted while training completes, a killed parameter server failing the run clearly
and the retry resuming from the checkpoint, and a table bigger than one server's memory
limit training when split over enough servers.
"""
from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from cluster_helpers import in_thread as _in_thread
from cluster_helpers import pid as _pid
from cluster_helpers import progress as _progress
from cluster_helpers import wait_for as _wait_for

pytestmark = pytest.mark.integration

# Fixtures home, span_dir, preprocessed: tests/integration/conftest.py (2-day window,
# ~7k training rows). Small batches so a short run still has many steps.
BASE = {"batch_size": 256, "epochs": 2, "steps_per_execution": 4}


def _train_spec(preprocessed, tmp_path, **kw) -> dict:
    return {"preprocess_dir": preprocessed["output_dir"], "out_dir": str(tmp_path / "model"),
            **BASE, **kw}


def test_two_ps_two_workers_shard_tables_and_export_matches(preprocessed, span_dir, tmp_path):
    from components.ctr import rawdata
    from components.ctr.cluster import ClusterSpec, run

    raw = rawdata.to_raw_features(rawdata.read_eval_rows(span_dir, 25).slice(0, 64))
    rows_file = tmp_path / "rows.json"
    rows_file.write_text(json.dumps({k: v.tolist() for k, v in raw.items()}))
    result = run(ClusterSpec(train=_train_spec(preprocessed, tmp_path,
                                               check_raw_rows=str(rows_file),
                                               fm_fields=["user_id", "item_id", "category_id"]),
                             num_ps=2, num_workers=2))
    summary = json.loads((tmp_path / "model" / "train_summary.json").read_text())

    # Loss falls: the eval log loss ends below the untrained model's (which predicts the
    # training click rate for every row: all learned terms start at zero). The training
    # loss per 4-step chunk is recorded too, but on ~7k rows it is too noisy to compare.
    assert len(summary["losses"]) == math.ceil(summary["steps_run"] / 4)
    assert result["val_log_loss"] < summary["initial_val_log_loss"] - 0.001, summary
    # Early stopping ran in the cluster: validations on the workers' slice of the window.
    assert len(summary["early_stopping"]["validations"]) >= 2, summary["early_stopping"]

    # The big ID tables are split over both parameter servers (and their shards add up).
    # The factorization machine's factor tables too.
    for table in ("bias/user_id", "bias/item_id", "fm/user_id", "fm/item_id"):
        shards = summary["shards"][table]
        devices = {s["device"].split("/device:")[0] for s in shards}
        assert devices == {"/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"}, shards
        assert sum(s["shape"][0] for s in shards) == \
            summary["shards"][table][0]["shape"][0] + shards[1]["shape"][0]
    user_rows = sum(s["shape"][0] for s in summary["shards"]["bias/user_id"])
    from components.ctr import features as F
    assert user_rows == F.categorical_size("user_id")
    assert summary["cluster"] == {"ps": 2, "workers": 2}

    # The chief's export, fed RAW rows, equals the in-cluster model on transformed rows.
    in_cluster = json.loads((tmp_path / "model" / "in_training_predictions.json").read_text())
    exported = rawdata.predict(result["model_dir"], raw)
    np.testing.assert_allclose(exported, in_cluster["p_click"], rtol=1e-5, atol=1e-6)
    assert result["val_auc"] > 0.6
    assert set(result["cluster"]["peak_rss_mb"]) == {"ps/0", "ps/1", "worker/0", "worker/1",
                                                     "chief"}


def test_sigkilled_worker_is_restarted_and_training_completes(preprocessed, tmp_path):
    from components.ctr.cluster import ClusterSpec, run

    status = tmp_path / "status.json"
    # No validation slice: every window row trains and the run goes to its budget, so its
    # step count is known in advance.
    spec = ClusterSpec(train=_train_spec(preprocessed, tmp_path, epochs=4,
                                         checkpoint_every_steps=8, export=False,
                                         validation_percent=0),
                       num_ps=1, num_workers=2, status_file=str(status))
    ckpt = tmp_path / "model_checkpoints"
    thread, box = _in_thread(lambda: run(spec))
    _wait_for(lambda: _progress(ckpt) >= 8, 240, "training to pass step 8")
    pid = _pid(status, "worker/0")
    os.kill(pid, signal.SIGKILL)
    print(f"SIGKILLed worker/0 (pid {pid}) at step {_progress(ckpt)}")
    thread.join(300)
    assert not thread.is_alive()
    assert "error" not in box, box.get("error")
    result = box["result"]
    assert result["cluster"]["worker_restarts"] == {"worker/0": 1}
    assert _progress(ckpt) == result["total_steps"] == math.ceil(
        # epochs=4: a budget of 4 passes (no early stopping: the validation slice trains too)
        4 * (preprocessed["rows_train"] + preprocessed["rows_validation"]) / 256)


def test_killed_ps_fails_clearly_and_retry_resumes_from_checkpoint(preprocessed, tmp_path):
    from components.ctr.cluster import ClusterFailed, ClusterSpec, run

    status = tmp_path / "status.json"
    ckpt = tmp_path / "model_checkpoints"
    spec = ClusterSpec(train=_train_spec(preprocessed, tmp_path, epochs=4,
                                         checkpoint_every_steps=8, export=False,
                                         validation_percent=0),
                       num_ps=2, num_workers=1, status_file=str(status), ps_failure_grace_s=30)
    thread, box = _in_thread(lambda: run(spec))
    _wait_for(lambda: _progress(ckpt) >= 16, 240, "training to pass step 16")
    os.kill(_pid(status, "ps/1"), signal.SIGKILL)
    killed_at = _progress(ckpt)
    thread.join(300)
    assert not thread.is_alive()
    error = box.get("error")
    assert isinstance(error, ClusterFailed), box
    assert "parameter server ps/1 died" in str(error)
    saved = _progress(ckpt)
    assert saved >= killed_at >= 16

    # The task retry: same spec, fresh cluster; resumes where the last checkpoint was.
    result = run(spec)
    assert result["resumed_from_step"] == saved
    assert _progress(ckpt) == result["total_steps"] > saved


def test_table_bigger_than_one_ps_memory_limit_trains_when_split(preprocessed, tmp_path):
    """A 2M x 192 float32 table (1536 MB) against a 1400 MB limit on each parameter server's
    private memory (the launcher SIGKILLs a ps above it, like an OOM killer). One server
    would need the whole table plus its ~330 MB TensorFlow runtime. A ps's transient peak
    grows with its largest shard (copies made while a variable is created and first read
    sparsely), so each server gets four 48 MB shards: measured here a ps peaks at 0.9-1.1 GB
    (ps/0 highest), idle or with both cores busy; with two 96 MB shards each it reached
    1.27 GB idle and crossed 1.4 GB under CI load."""
    from components.ctr.cluster import ClusterSpec, run

    rows, dim, limit_mb, num_ps = 2**21, 192, 1400, 8
    table_mb = rows * dim * 4 / 2**20
    spec = ClusterSpec(
        train=_train_spec(preprocessed, tmp_path, epochs=1, max_steps=8, export=False,
                          optimizer="sgd", deep_fields=["user_id", "device"],
                          embedding_dims={"user_id": dim}, table_rows={"user_id": rows},
                          embedding_init="zeros", checkpoint_every_steps=0,
                          min_shard_bytes=16 << 20, max_shards=4 * num_ps),
        num_ps=num_ps, num_workers=1, ps_memory_limit_mb=limit_mb)
    result = run(spec)
    peaks = result["cluster"]["peak_private_mb"]
    print(f"\nembedding table emb/user_id: {rows:,} x {dim} float32 = {table_mb:.0f} MB over "
          f"{num_ps} ps; per-ps private-memory limit {limit_mb} MB; peak private memory per "
          f"process (MB): {peaks}; peak total RSS incl. shared libraries (MB): "
          f"{result['cluster']['peak_rss_mb']}")
    assert table_mb > limit_mb
    assert all(table_mb / num_ps < peaks[f"ps/{i}"] < limit_mb for i in range(num_ps)), peaks
    shards = result["summary"]["shards"]["emb/user_id"]
    assert len(shards) == 4 * num_ps
    assert {s["device"].split("/device:")[0] for s in shards} == {
        f"/job:ps/replica:0/task:{i}" for i in range(num_ps)}
    assert result["total_steps"] == 8


def test_warm_start_beats_cold_start_on_the_same_budget(preprocessed, tmp_path):
    """Same trainer without TF_CONFIG (one process, in this one): a model warm-started
    from a previous export, then given 3 steps, beats a cold start given the same 3 steps."""
    from components.ctr.ps_train import PsTrainSpec, run

    pre = preprocessed["output_dir"]
    previous = run(PsTrainSpec(preprocess_dir=pre, out_dir=str(tmp_path / "previous"),
                               batch_size=256, epochs=1))
    budget = dict(preprocess_dir=pre, batch_size=256, max_steps=3)
    cold = run(PsTrainSpec(out_dir=str(tmp_path / "cold"), **budget))
    warm = run(PsTrainSpec(out_dir=str(tmp_path / "warm"), warm_start_from=previous["model_dir"],
                           **budget))
    print(f"\nval log loss / AUC: previous {previous['val_log_loss']} / {previous['val_auc']}; "
          f"cold {cold['val_log_loss']} / {cold['val_auc']}; warm {warm['val_log_loss']} / "
          f"{warm['val_auc']} (3 steps each)")
    assert warm["val_log_loss"] < cold["val_log_loss"]
    # Not AUC: ~40 positives in 1,008 eval rows give it a standard error near 0.04, so
    # warm and cold swap places by chance. What warm start must do is carry the learned
    # parameters over: after the same 3 steps, warm sits next to the previous model and
    # cold does not.
    prev_w, cold_w, warm_w = (_params(r["model_dir"]) for r in (previous, cold, warm))
    warm_gap = sum(np.linalg.norm(warm_w[k] - prev_w[k]) for k in prev_w)
    cold_gap = sum(np.linalg.norm(cold_w[k] - prev_w[k]) for k in prev_w)
    print(f"parameter distance to the previous model: warm {warm_gap:.3f}, cold {cold_gap:.3f}")
    assert warm_gap < 0.5 * cold_gap
    with pytest.raises(FileNotFoundError, match="no SavedModel variables"):
        run(PsTrainSpec(out_dir=str(tmp_path / "bad"), warm_start_from=str(tmp_path), **budget))
    # The published model it starts from, its variables swapped after publishing (same
    # size): refused with the file named, not learned from.
    from components.gate import Thresholds, decide
    from retrain.common.registry import ModelTampered, Registry

    registry = Registry(tmp_path / "registry")
    metrics = {"auc": previous["val_auc"], "log_loss": previous["val_log_loss"]}
    registry.publish(previous["model_dir"], "ctr", {
        "metrics": metrics, "run_id": "previous",
        "gate": decide(metrics, None, Thresholds()).to_dict()})
    version = registry.model_path("ctr", 1)
    data = next(version.rglob("variables.data-*"))
    data.write_bytes(b"\0" * data.stat().st_size)
    with pytest.raises(ModelTampered, match="variables.data"):
        run(PsTrainSpec(out_dir=str(tmp_path / "tampered"), warm_start_from=str(version),
                        **budget))


def test_warm_start_keeps_each_vocabulary_value_on_its_row(home, preprocessed, tmp_path):
    """category_id is a frequency-ordered vocabulary: another window orders it otherwise.
    Warm-started across that change (one step at a negligible learning rate), every value
    the published model knew has its learned row again, wherever its row now is."""
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    from components.ctr.ps_train import PsTrainSpec, run
    from components.ctr.warm_vocab import read_vocabulary

    previous = run(PsTrainSpec(preprocess_dir=preprocessed["output_dir"], batch_size=256,
                               epochs=1, out_dir=str(tmp_path / "previous")))
    other = preprocess(PreprocessSpec(raw_root=str(home / "raw" / "ctr"), span="2026-11-01",
                                      output_dir=str(tmp_path / "pre-other"), window_days=1,
                                      eval_percent=25))
    assets = "transform_fn_output/transform_fn/assets/category_id"
    old = read_vocabulary(Path(preprocessed["output_dir"]) / assets)
    new = read_vocabulary(Path(other["output_dir"]) / assets)
    moved = [v for i, v in enumerate(new) if v in old and old.index(v) != i]
    assert moved, "the two windows order category_id alike: the test would prove nothing"
    warm = run(PsTrainSpec(preprocess_dir=other["output_dir"], out_dir=str(tmp_path / "warm"),
                           warm_start_from=previous["model_dir"], batch_size=256, max_steps=1,
                           learning_rate=1e-9, validation_percent=0))
    key = "model/params/bias/category_id/.ATTRIBUTES/VARIABLE_VALUE"
    before, after = _params(previous["model_dir"])[key], _params(warm["model_dir"])[key]
    for value in moved:
        np.testing.assert_allclose(after[new.index(value)], before[old.index(value)],
                                   atol=1e-5, err_msg=f"{value!r} lost its row")
    # Positional copying would have given the moved values other values' rows.
    assert max(abs(float(after[new.index(v)][0] - before[new.index(v)][0]))
               for v in moved) > 1e-3


def test_embeddings_set_in_the_feature_config_are_trained(home, tmp_path):
    """A user config that gives user_id an 8-wide embedding (zeros-initialized, its own
    prior): preprocessing carries the config to the trainer, whose exported model holds
    that table and has moved it from zero."""
    import yaml

    from components.ctr import feature_config as fc
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    from components.ctr.ps_train import PsTrainSpec, run

    d = fc.default().to_dict()
    d["model"]["embeddings"] = {"user_id": {"dim": 8, "init": "zeros", "l2": 1.0}}
    config = tmp_path / "with-embeddings.yaml"
    config.write_text(yaml.safe_dump(d))
    pre = preprocess(PreprocessSpec(raw_root=str(home / "raw" / "ctr"), span="2026-11-03",
                                    output_dir=str(tmp_path / "pre"), window_days=1,
                                    eval_percent=25, feature_config=str(config)))
    model = run(PsTrainSpec(preprocess_dir=pre["output_dir"], out_dir=str(tmp_path / "model"),
                            batch_size=256, max_steps=20, validation_percent=0))
    table = _params(model["model_dir"])["model/params/emb/user_id/.ATTRIBUTES/VARIABLE_VALUE"]
    assert table.shape == (fc.default().categorical_size("user_id"), 8)
    assert np.abs(table).max() > 0          # trained from its zero start


def _params(model_dir: str) -> dict:
    """The learned parameters of an exported model, by checkpoint key."""
    import tensorflow as tf
    from components.ctr.train_checkpoint import warm_start_path

    reader = tf.train.load_checkpoint(warm_start_path(model_dir))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k.startswith("model/params/") and k.endswith("VARIABLE_VALUE")}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")      # a zombie has exited; only its parent may reap it


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killing_the_launcher_leaves_no_orphans(preprocessed, tmp_path, sig):
    """What Airflow does to a killed task (SIGTERM to the launcher's group), and the worst
    case (SIGKILL, no cleanup code runs): every ps, worker and chief process goes too."""
    import subprocess
    import sys

    status = tmp_path / "status.json"
    spec = {"train": _train_spec(preprocessed, tmp_path), "num_ps": 2, "num_workers": 2,
            "status_file": str(status)}
    launcher = subprocess.Popen([sys.executable, "-m", "components.ctr.cluster", "--spec",
                                 json.dumps(spec)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        pids = _wait_for(lambda: status.exists() and json.loads(status.read_text())["pids"],
                         60, "the cluster to start")
        assert len(pids) == 5 and all(_alive(p) for p in pids.values())
        os.killpg(launcher.pid, sig)
        launcher.wait(30)
        _wait_for(lambda: not any(_alive(p) for p in pids.values()), 20,
                  f"every cluster process to exit after {sig.name} to the launcher")
    finally:
        if launcher.poll() is None:
            launcher.kill()


def test_early_stopping_exports_the_best_validated_parameters(preprocessed, tmp_path):
    """A learning rate far too high for ~7k rows overfits the per-id biases within a few
    steps, so the validation loss (on the trainer's own slice of the window, not the eval
    rows) turns up: training stops `patience` validations after its best and exports the
    parameters of that validation, not those of the last step."""
    import tensorflow as tf

    import tensorflow_transform as tft

    from components.ctr import feature_config as fc
    from components.ctr.formats import TRANSFORM_DIR, VALIDATION_DIR
    from components.ctr.ps_train import PsTrainSpec, run
    from components.ctr.train_input import make_dataset_fn

    pre = preprocessed["output_dir"]
    result = run(PsTrainSpec(preprocess_dir=pre, out_dir=str(tmp_path / "model"), batch_size=256,
                             learning_rate=0.3, lr_decay="none", steps_per_execution=4,
                             validate_every_steps=4, early_stopping_patience=2))
    summary = json.loads((tmp_path / "model" / "train_summary.json").read_text())
    stopping = summary["early_stopping"]
    print(f"\nvalidations (step, log loss): {stopping['validations']}")
    assert stopping["stopped_early"] and result["steps_run"] < result["total_steps"]
    assert result["best_step"] == stopping["best_step"] < result["steps_run"]
    assert [s for s, _ in stopping["validations"]][-3] == stopping["best_step"]
    # The slice: ~10% of the window's training rows, none of them trained on, counted by
    # the preprocessing job (no counting pass in the trainer).
    window = preprocessed["rows_train"] + preprocessed["rows_validation"]
    assert abs(stopping["validation_rows"] / window - 0.10) < 0.02
    assert stopping["validation_rows"] == preprocessed["rows_validation"]
    assert summary["train_rows"] == preprocessed["rows_train"]

    # The exported parameters give the best validation loss again (computed with the
    # trainer's own loss: at this learning rate many probabilities saturate, where numpy's
    # log of a clipped float32 and Keras' clip-plus-epsilon differ by ~0.02).
    from tensorflow_transform.keras_lib import tf_keras
    loaded = tf.saved_model.load(result["model_dir"])
    spec = tft.TFTransformOutput(f"{pre}/{TRANSFORM_DIR}").transformed_feature_spec()
    ds = make_dataset_fn(f"{pre}/{VALIDATION_DIR}/*.tfrecord.gz", dict(spec), 4096, {},
                          None, repeat=False, label=fc.for_preprocess_dir(Path(pre)).label,
                          split="validation")()
    total, count = 0.0, 0
    for feats, labels in ds:
        probs = loaded.model(feats)
        total += float(tf.reduce_sum(tf_keras.losses.binary_crossentropy(
            labels[:, None], probs[:, None])))
        count += int(labels.shape[0])
    assert count == stopping["validation_rows"]
    assert total / count == pytest.approx(stopping["best_val_log_loss"], rel=1e-3)
