"""A user's own logs described by a feature config (feature_configs/example_user_logs.yaml:
every kind and transform) through the real stack: the tf.Transform preprocessing_fn built
from the config (AnalyzeAndTransformDataset on in-memory rows, values checked), then
transformed TFRecords -> the parameter-server trainer in one process and the Keras trainer
-> export -> the serving signature on raw rows, multi-valued ones included."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from components.ctr import feature_config as fc

pytestmark = pytest.mark.integration

EXAMPLE = fc.PACKAGED_DIR / "example_user_logs.yaml"

# Twelve hand-made rows: counts chosen so vocabulary order is unambiguous.
# country: DE x6, FR x5, US x1 (frequency_threshold 5: US is out of vocabulary);
# device: ios x7, web x4, tv x1; tags (first 5 of each row): shoes x5, sports x3, news x2, run x1.
ROWS = [
    dict(clicked=1, dwell_time=10.0, age=18.0, country="DE", device="ios", ad_id="ad-1", slot=1,
         tags=["shoes", "sports"], query="Running shoes, trail!"),
    dict(clicked=0, dwell_time=None, age=None, country="DE", device="web", ad_id="ad-2", slot=9,
         tags=[], query=""),
    dict(clicked=0, dwell_time=1.0, age=65.0, country="FR", device="ios", ad_id="ad-3", slot=0,
         tags=["shoes", "news", "sports", "run", "shoes", "x", "y"], query="Été à Paris"),
    dict(clicked=1, dwell_time=3.0, age=30.0, country="DE", device="ios", ad_id="ad-1", slot=3,
         tags=["", "shoes"], query="one two three four five six seven eight nine ten eleven "
                                  "twelve thirteen fourteen fifteen sixteen seventeen"),
    dict(clicked=0, dwell_time=0.0, age=40.0, country="FR", device="web", ad_id="ad-4", slot=2,
         tags=["news"], query="news"),
    dict(clicked=0, dwell_time=7.0, age=22.0, country="FR", device="ios", ad_id="ad-5", slot=2,
         tags=["sports"], query="a b"),
    dict(clicked=1, dwell_time=2.0, age=50.0, country="DE", device="tv", ad_id="ad-6", slot=4,
         tags=["shoes"], query="c"),
    dict(clicked=0, dwell_time=5.0, age=35.0, country="FR", device="ios", ad_id="ad-7", slot=5,
         tags=[], query="d"),
    dict(clicked=0, dwell_time=4.0, age=28.0, country="US", device="web", ad_id="ad-8", slot=6,
         tags=[], query="e"),
    dict(clicked=1, dwell_time=9.0, age=45.0, country="DE", device="ios", ad_id="ad-9", slot=7,
         tags=[], query="f"),
    dict(clicked=0, dwell_time=6.0, age=55.0, country="FR", device="web", ad_id="ad-1", slot=1,
         tags=[], query="g"),
    dict(clicked=0, dwell_time=8.0, age=60.0, country="DE", device="ios", ad_id="ad-2", slot=0,
         tags=[], query="h"),
]


def _instances(rows: list[dict]) -> list[dict]:
    """Rows as tf.Transform instance dicts: missing numerics are NaN."""
    return [{k: (math.nan if v is None else v) for k, v in r.items() if k != "event_id"}
            for r in rows]


def test_preprocessing_fn_of_a_user_config_gives_the_expected_values(user_preprocessed):
    import tensorflow as tf
    cfg, out = user_preprocessed["cfg"], user_preprocessed["handmade"]
    assert len(out) == len(ROWS)
    assert set(out[0]) == set(cfg.transformed_outputs())

    def col(name):
        return np.stack([np.asarray(r[name]) for r in out])

    # Every output is fixed-length; categorical ids lie inside their tables.
    for name, size in cfg.categorical_outputs().items():
        ids = col(name)
        assert ids.shape == (len(ROWS), cfg.multi_valued_outputs()[name]) if \
            name in cfg.multi_valued_outputs() else ids.shape == (len(ROWS),), name
        assert ids.max() < size and ids.min() >= (-1 if name in cfg.multi_valued_outputs() else 0)

    # Vocabulary (top_k 250, frequency_threshold 5, 5 OOV buckets): DE 0, FR 1, US in [2, 7).
    country = col("country_xf")
    assert list(country[[0, 2]]) == [0, 1]
    assert 2 <= country[8] < 7
    assert list(col("device_xf")[[0, 1, 6]]) == [0, 1, 2]            # ios, web, tv
    # Hash: the raw value's bucket; identity: the id, clipped into [0, size).
    expected_ad = tf.strings.to_hash_bucket_fast([r["ad_id"] for r in ROWS], 65536).numpy()
    assert np.array_equal(col("ad_id_xf"), expected_ad)
    assert col("ad_id_xf")[0] == col("ad_id_xf")[3] == col("ad_id_xf")[10]
    assert list(col("slot_xf")[:4]) == [1, 7, 0, 3]

    # Multi-valued vocabulary, padded with -1 to max_values 5, first 5 values in order,
    # empty strings dropped: shoes 0, sports 1, news 2, run 3.
    tags = col("tags_xf")
    assert tags[0].tolist() == [0, 1, -1, -1, -1]
    assert tags[1].tolist() == [-1] * 5
    assert tags[2].tolist() == [0, 2, 1, 3, 0]                          # "x", "y" cut off
    assert tags[3].tolist() == [0, -1, -1, -1, -1]

    # Text: lower-cased tokens (letters and digits), hashed, the first 16, padded with -1.
    query = col("query_xf")

    def hashed(tokens):
        return tf.strings.to_hash_bucket_fast(tokens, 32768).numpy().tolist()
    assert query[0].tolist() == hashed(["running", "shoes", "trail"]) + [-1] * 13
    assert query[1].tolist() == [-1] * 16
    assert query[2].tolist() == hashed(["été", "à", "paris"]) + [-1] * 13
    assert query[3].tolist() == hashed(ROWS[3]["query"].split()[:16])

    # Bucketize (8 quantile buckets of the present ages): ordered like the ages, the
    # youngest in bucket 0, a missing age in the extra bucket 8.
    age = col("age_xf")
    assert age[1] == 8
    present = [i for i, r in enumerate(ROWS) if r["age"] is not None]
    order = sorted(present, key=lambda i: ROWS[i]["age"])
    assert age[order[0]] == 0 and age[order[-1]] == 7
    assert all(age[a] <= age[b] for a, b in zip(order, order[1:]))
    assert len(set(age[present])) >= 6

    # log_zscore: z-score of log1p over the present values; missing -> 0 and indicator 1.
    dwell = np.array([np.nan if r["dwell_time"] is None else r["dwell_time"] for r in ROWS])
    logged = np.log1p(dwell[~np.isnan(dwell)])
    z = np.where(np.isnan(dwell), 0.0, (np.log1p(dwell) - logged.mean()) / logged.std())
    np.testing.assert_allclose(col("dwell_time_xf"), z, rtol=1e-5, atol=1e-5)
    assert col("dwell_time_missing_xf").tolist() == [0.0, 1.0] + [0.0] * 10

    # Cross of country x device: one id per row, equal pairs equal ids.
    cross = col("country_x_device_xf")
    assert cross[0] == cross[3] == cross[9] and cross[4] == cross[10]
    assert len({cross[0], cross[1], cross[2], cross[6], cross[8]}) == 5
    assert col("clicked").tolist() == [float(r["clicked"]) for r in ROWS]


# ----------------------------------------------------------------------------- end to end

def _synthetic_rows(n: int, seed: int) -> list[dict]:
    """Click-stream rows whose click probability depends on country, device, tags, query
    words, dwell time and age, so a model has something to learn."""
    rng = np.random.default_rng(seed)
    countries, devices = ["DE", "FR", "US", "IT", "ES"], ["ios", "android", "web"]
    words = ["cheap", "shoes", "running", "news", "weather", "sale", "trail", "city"]
    tag_pool = ["sports", "shoes", "news", "travel", "food", "tech"]
    rows = []
    for i in range(n):
        country, device = rng.choice(countries), rng.choice(devices)
        tags = list(rng.choice(tag_pool, size=rng.integers(0, 8)))
        query = " ".join(rng.choice(words, size=rng.integers(0, 5)))
        dwell = None if rng.random() < 0.1 else float(rng.lognormal(1.0, 1.0))
        age = None if rng.random() < 0.1 else float(rng.integers(16, 80))
        logit = (-1.2 + 1.5 * (country == "DE") - 1.0 * (device == "web")
                 + 1.2 * ("sports" in tags) + 1.0 * ("sale" in query.split())
                 + 0.5 * (math.log1p(dwell) - 1.2 if dwell is not None else 0.0)
                 - 0.8 * (age is not None and age > 60))
        clicked = int(rng.random() < 1 / (1 + math.exp(-logit)))
        rows.append(dict(event_id=f"e{seed}-{i}", clicked=clicked,
                         dwell_time=dwell, age=age, country=str(country), device=str(device),
                         ad_id=f"ad-{rng.integers(0, 50)}", slot=int(rng.integers(0, 10)),
                         tags=[str(t) for t in tags], query=query))
    return rows


@pytest.fixture(scope="module")
def user_preprocessed(tmp_path_factory):
    """A preprocess output dir laid out like the Beam job's, for the example user config:
    transform graph, gzip TFRecord shards of transformed train/eval rows, the config."""
    import tensorflow as tf
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam

    from components.ctr.formats import EVAL_DIR, TRAIN_DIR, TRANSFORM_DIR
    from components.ctr.transform import make_preprocessing_fn, raw_training_spec

    cfg = fc.load(EXAMPLE)
    out = tmp_path_factory.mktemp("user-pre")
    train_rows, eval_rows = _synthetic_rows(1500, 1), _synthetic_rows(300, 2)
    metadata = tft.DatasetMetadata.from_feature_spec(raw_training_spec(cfg))
    # Two analyses: the hand-made ROWS on their own (values checked in the first test) and
    # the synthetic train rows (eval rows transformed with the train analysis). Implicit
    # (in-memory) pipelines, as in tf.Transform's own examples.
    with tft_beam.Context(temp_dir=str(out / "tmp_handmade")):
        (handmade, _), _ = ((_instances(ROWS), metadata)
                            | "Handmade" >> tft_beam.AnalyzeAndTransformDataset(
                                make_preprocessing_fn(cfg)))
    with tft_beam.Context(temp_dir=str(out / "tmp")):
        (train, transformed_metadata), transform_fn = (
            (_instances(train_rows), metadata)
            | "Train" >> tft_beam.AnalyzeAndTransformDataset(make_preprocessing_fn(cfg)))
        _ = transform_fn | "Write" >> tft_beam.WriteTransformFn(str(out / TRANSFORM_DIR))
        (evals, _) = (((_instances(eval_rows), metadata), transform_fn)
                      | "Eval" >> tft_beam.TransformDataset())
    coder = tft.coders.ExampleProtoCoder(transformed_metadata.schema)
    for split, data in ((TRAIN_DIR, train), (EVAL_DIR, evals)):
        (out / split).mkdir()
        with tf.io.TFRecordWriter(str(out / split / "part-0.tfrecord.gz"), "GZIP") as w:
            for row in data:
                w.write(coder.encode(row))
    (out / fc.FEATURE_CONFIG_FILE).write_text(json.dumps(cfg.to_dict()))
    _write_split_stats(out, cfg, train)
    return {"dir": out, "cfg": cfg, "eval_rows": eval_rows, "handmade": handmade}


def _write_split_stats(out, cfg, train: list[dict]) -> None:
    """What the Beam job counts while it transforms (rows, clicks, ids per field), here
    from the transformed training rows in memory."""
    import numpy as np

    from components.ctr import split_stats
    from components.ctr.formats import SPLIT_STATS_FILE, TRAIN_DIR
    sizes = {k: cfg.categorical_size(k) for k in cfg.categorical_fields()}
    stats = split_stats.empty(sizes)
    stats.rows = len(train)
    stats.clicks = float(sum(np.sum(r[cfg.label]) for r in train))
    for k, size in sizes.items():
        ids = np.concatenate([np.ravel(r[fc.transformed_name(k)]) for r in train]).astype(int)
        stats.counts[k] += np.bincount(ids[(ids >= 0) & (ids < size)], minlength=size)
    split_stats.write(out / SPLIT_STATS_FILE, {TRAIN_DIR: stats})


def _serve(model_dir, cfg, rows):
    import tensorflow as tf

    from components.ctr.transform import raw_batch
    serve = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    columns = {f.name: [r[f.name] for r in rows] for f in cfg.features}
    return serve(**raw_batch(cfg, columns))["p_click"].numpy()


def test_ps_trainer_trains_and_serves_a_user_config(user_preprocessed, tmp_path):
    from components.ctr.ps_train import PsTrainSpec, run

    cfg, rows = user_preprocessed["cfg"], user_preprocessed["eval_rows"][:64]
    check = tmp_path / "rows.json"
    check.write_text(json.dumps({f.name: [r[f.name] for r in rows] for f in cfg.features}))
    result = run(PsTrainSpec(preprocess_dir=str(user_preprocessed["dir"]),
                             out_dir=str(tmp_path / "model"), batch_size=64, epochs=4,
                             steps_per_execution=4, learning_rate=0.03,
                             checkpoint_every_steps=0, check_raw_rows=str(check)))
    summary = json.loads((tmp_path / "model" / "train_summary.json").read_text())
    losses = [x for _, x in summary["losses"]]
    print(f"\nuser config, ps trainer: loss per 4 steps {losses[0]:.3f} -> {losses[-1]:.3f}; "
          f"val log loss {result['val_log_loss']} (untrained {summary['initial_val_log_loss']}), "
          f"AUC {result['val_auc']}")
    assert np.mean(losses[-5:]) < np.mean(losses[:3]) - 0.02, losses
    assert result["val_log_loss"] < summary["initial_val_log_loss"] - 0.01, summary
    assert result["val_auc"] > 0.65
    assert summary["feature_config"]["fingerprint"] == cfg.fingerprint()
    assert summary["fields"]["deep_fields"] == list(cfg.model.deep_fields)
    assert sorted(summary["serving_inputs"]) == sorted(f.name for f in cfg.features)

    # The export takes the config's RAW features (tags as lists, missing numerics as None)
    # and equals the trained model on the same rows transformed during training.
    probs = _serve(result["model_dir"], cfg, rows)
    assert probs.shape == (len(rows),)
    assert np.all((probs > 0) & (probs < 1)) and probs.std() > 1e-3
    assert fc.for_model_dir(result["model_dir"]) == cfg     # travels inside the SavedModel
    in_training = json.loads((tmp_path / "model" / "in_training_predictions.json").read_text())
    np.testing.assert_allclose(probs, in_training["p_click"], rtol=1e-5, atol=1e-6)
    # Multi-valued inputs matter: the same row with other tags scores differently.
    row = dict(rows[0], tags=["sports", "shoes", "news"])
    other = dict(rows[0], tags=[])
    assert abs(float(_serve(result["model_dir"], cfg, [row])[0])
               - float(_serve(result["model_dir"], cfg, [other])[0])) > 1e-4

    # A trainer option naming a field the config does not have fails clearly.
    with pytest.raises(ValueError, match=r"PsTrainSpec.deep_fields: \['category_id'\] are not "
                                         r"categorical features of the feature config"):
        run(PsTrainSpec(preprocess_dir=str(user_preprocessed["dir"]),
                        out_dir=str(tmp_path / "bad"), deep_fields=["category_id"]))
