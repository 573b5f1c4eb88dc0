"""Ids the analysis window never saw take their field's new-id row (issue 44), on the
session's generated days with a few values planted (docs/feature-config.md, "Ids the
window never saw"):

- day 1 has a category, `cat-retired`, that days 2 and 3 never have: in the window of
  days 1-2 it is in the vocabulary, in the window of days 2-3 it left it;
- day 3 has a category seen on two training rows only (`cat-rare`, below the config's
  frequency_threshold of 3): an OOV bucket, not the new-id row;
- day 3 has hours 99 and -3 (identity, size 24): clipped to rows 23 and 0, counted.

Each value's row is read from the transform graph that training, evaluation and serving
use; the counts from the preprocessing summary, checked against the raw rows.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from components.ctr import feature_config as fc
from components.ctr import features as F

pytestmark = pytest.mark.integration

EVAL_PERCENT = 25
DAYS = ("2026-11-01", "2026-11-02", "2026-11-03")
RETIRED, RARE = "cat-retired", "cat-rare"
BAD_HOURS = {99: 5, -3: 2}          # value: rows


def _training_rows(table: pa.Table) -> np.ndarray:
    """Mask of the rows a run analyses and trains on (not held out for evaluation)."""
    return ~np.asarray(F.eval_mask(table.column("example_id"), EVAL_PERCENT))


def _set(table: pa.Table, column: str, rows: np.ndarray, value) -> pa.Table:
    values = table.column(column).to_numpy(zero_copy_only=False).copy()
    values[rows] = value
    i = table.schema.get_field_index(column)
    return table.set_column(i, column, pa.array(values, table.schema.field(column).type))


@pytest.fixture(scope="module")
def planted(home, tmp_path_factory):
    """The session's three days with the values above planted; returns (raw root, config)."""
    work = tmp_path_factory.mktemp("new-id")
    root = work / "raw"
    for day in DAYS:
        shutil.copytree(home / "raw" / "ctr" / f"dt={day}", root / f"dt={day}")
    day1 = root / f"dt={DAYS[0]}" / "part-00000.parquet"
    t = pq.read_table(day1)
    pq.write_table(_set(t, "category_id", np.flatnonzero(_training_rows(t))[:300], RETIRED),
                   day1)
    day3 = root / f"dt={DAYS[2]}" / "part-00000.parquet"
    t = pq.read_table(day3)
    train = np.flatnonzero(_training_rows(t))
    t = _set(t, "category_id", train[:2], RARE)
    start = 10
    for value, n in BAD_HOURS.items():
        t = _set(t, "hour", np.arange(start, start + n), value)
        start += n
    pq.write_table(t, day3)

    config = fc.default().to_dict()
    for f in config["features"]:
        if f["name"] == "user_id":
            f["new_id_row"] = True
        if f["name"] == "category_id":
            f.update(new_id_row=True, frequency_threshold=3)
    path = work / "new_ids.yaml"
    path.write_text(yaml.safe_dump(config))
    return root, path


def _preprocess(planted, span: str, out):
    from components.ctr.preprocess import PreprocessSpec, run
    root, config = planted
    run(PreprocessSpec(raw_root=str(root), span=span, output_dir=str(out), window_days=2,
                       eval_percent=EVAL_PERCENT, feature_config=str(config)))
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def days_1_2(planted, tmp_path_factory):
    out = tmp_path_factory.mktemp("pre-a") / "pre"
    return out, _preprocess(planted, DAYS[1], out)


@pytest.fixture(scope="module")
def days_2_3(planted, tmp_path_factory):
    out = tmp_path_factory.mktemp("pre-b") / "pre"
    return out, _preprocess(planted, DAYS[2], out)


def _rows_of(out, rows: list[dict]) -> dict[str, np.ndarray]:
    """`rows` (raw values) through the run's transform graph."""
    import tensorflow as tf
    import tensorflow_transform as tft
    from components.ctr import rawdata
    cfg = fc.load(out / fc.FEATURE_CONFIG_FILE)
    raw = rawdata.to_raw_features(pa.Table.from_pylist(rows), cfg)
    layer = tft.TFTransformOutput(str(out / "transform_fn_output")).transform_features_layer()
    return {k: v.numpy().reshape(-1)
            for k, v in layer({k: tf.constant(v) for k, v in raw.items()}).items()}


def _template(planted) -> dict:
    """A real training row of day 2, to vary one field at a time."""
    t = pq.read_table(planted[0] / f"dt={DAYS[1]}" / "part-00000.parquet")
    return t.filter(pa.array(_training_rows(t))).slice(0, 1).to_pylist()[0]


def _vocabulary(out, field: str) -> list[str]:
    path = out / "transform_fn_output" / "transform_fn" / "assets" / field
    return path.read_bytes().decode().splitlines()


def test_each_value_takes_its_documented_row(planted, days_1_2, days_2_3):
    cfg = fc.load(planted[1])
    users, cats = cfg.feature("user_id"), cfg.feature("category_id")
    assert (users.new_id_index, cats.new_id_index) == (users.hash_buckets,
                                                      cats.top_k + cats.oov_buckets)
    row = _template(planted)
    rows = [row | {"user_id": "u-never-seen-anywhere"},      # a new id
            row,                                            # a user of the window
            row | {"category_id": RETIRED},
            row | {"category_id": RARE},
            row | {"hour": 99}, row | {"hour": -3}]
    (a, _), (b, _) = days_1_2, days_2_3
    in_b = _rows_of(b, rows)
    user, cat, hour = (in_b[F.transformed_name(k)] for k in ("user_id", "category_id", "hour"))
    assert user[0] == users.new_id_index
    assert 0 <= user[1] < users.hash_buckets
    vocab_b = _vocabulary(b, "category_id")
    assert RETIRED not in vocab_b and RARE not in vocab_b
    assert cat[2] == cats.new_id_index, "an id that left the vocabulary: the new-id row"
    assert len(vocab_b) <= cat[3] < len(vocab_b) + cats.oov_buckets, "seen, too rare: OOV"
    assert (hour[4], hour[5]) == (23, 0)
    # The same retired category in the window that still had it: its vocabulary row.
    vocab_a = _vocabulary(a, "category_id")
    assert _rows_of(a, rows[2:3])[F.transformed_name("category_id")][0] == \
        vocab_a.index(RETIRED)


def test_rows_that_took_it_are_counted(planted, days_2_3):
    out, summary = days_2_3
    cfg = fc.load(planted[1])
    tables = {d: pq.read_table(planted[0] / f"dt={d}" / "part-00000.parquet")
              for d in DAYS[1:]}
    seen = {k: set() for k in ("user_id", "category_id")}
    for t in tables.values():
        for k in seen:
            seen[k] |= set(t.filter(pa.array(_training_rows(t))).column(k).to_pylist())
    span = tables[DAYS[2]]
    eval_rows = span.filter(pa.array(~_training_rows(span)))
    assert eval_rows.num_rows == summary["rows_eval"]
    shards = _split_ids(out, "eval")
    for k in seen:
        figures = summary["id_coverage"][k]["new_id_row"]
        expected = sum(v not in seen[k] for v in eval_rows.column(k).to_pylist())
        print(f"{k}: {expected} eval rows with an id the window never saw; filter "
              f"{figures['filter_bits_set']:,} of {figures['filter_bits']:,} bits set, "
              f"false-positive rate {figures['filter_false_positive_rate']}")
        # Exact here: at this fill the filter's false-positive rate is below 1e-6.
        assert figures["filter_false_positive_rate"] < 1e-6
        assert figures["row"] == cfg.feature(k).new_id_index
        assert figures["rows_by_split"]["eval"] == expected
        assert np.count_nonzero(shards[k] == figures["row"]) == expected
        # A Bloom filter has no false negatives: no training row's id is "never seen".
        assert figures["rows_by_split"]["train"] == 0
    assert summary["id_coverage"]["user_id"]["new_id_row"]["rows_by_split"]["eval"] > 0
    assert summary["id_coverage"]["category_id"]["ids_in_vocabulary"] == len(
        _vocabulary(out, "category_id"))
    assert "eval rows took the new-id row" in summary["id_coverage_line"]
    in_window = sum(int(pc.sum(pc.equal(t.column("hour"), v)).as_py() or 0)
                    for t in tables.values() for v in BAD_HOURS)
    assert summary["identity_out_of_range"] == {"hour": in_window} == {
        "hour": sum(BAD_HOURS.values())}


def _split_ids(out, split: str) -> dict[str, np.ndarray]:
    import tensorflow as tf
    import tensorflow_transform as tft
    spec = tft.TFTransformOutput(str(out / "transform_fn_output")).transformed_feature_spec()
    keys = {k: F.transformed_name(k) for k in ("user_id", "category_id")}
    files = tf.io.gfile.glob(str(out / split / "*.tfrecord.gz"))
    got = {k: [] for k in keys}
    for batch in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(4096):
        parsed = tf.io.parse_example(batch, {v: spec[v] for v in keys.values()})
        for k, v in keys.items():
            got[k].append(parsed[v].numpy().reshape(-1))
    return {k: np.concatenate(v) for k, v in got.items()}


def test_the_trainer_trains_the_new_id_row(days_2_3, tmp_path):
    """Every training id is in the window, so only the rows the trainer moves to the
    new-id row (NEW_ID_TRAIN_SHARE) teach it: after training it has left its initial
    value (zeros)."""
    from components.ctr.ps_train import PsTrainSpec, run
    out, _ = days_2_3
    result = run(PsTrainSpec(preprocess_dir=str(out), out_dir=str(tmp_path / "model"),
                             batch_size=256, max_steps=40))
    params = _params(result["model_dir"])
    cfg = fc.load(out / fc.FEATURE_CONFIG_FILE)
    new_row = cfg.feature("user_id").new_id_index
    (bias,) = [v for k, v in params.items() if "user_id" in k and v.shape[0] == new_row + 1]
    moved = float(np.abs(bias[new_row]).max())
    print(f"user_id table {bias.shape}: new-id row moved by {moved:.4g}")
    assert moved > 0


def _params(model_dir: str) -> dict:
    import tensorflow as tf
    from components.ctr.train_checkpoint import warm_start_path
    reader = tf.train.load_checkpoint(warm_start_path(model_dir))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k.startswith("model/params/") and k.endswith("VARIABLE_VALUE")}


def test_the_next_run_reads_the_filter_from_the_analysis_cache(planted, tmp_path):
    """A day's filter is cached like its other statistics: the second run over the same
    days analyses nothing and sends the same rows to the new-id row."""
    from components.ctr.preprocess import PreprocessSpec, run
    root, config = planted
    runs = []
    for i in range(2):
        out = tmp_path / f"pre{i}"
        run(PreprocessSpec(raw_root=str(root), span=DAYS[2], output_dir=str(out),
                           window_days=2, eval_percent=EVAL_PERCENT, feature_config=str(config),
                           analysis_cache_dir=str(tmp_path / "cache")))
        runs.append(json.loads((out / "summary.json").read_text()))
    first, second = runs
    assert set(first["analysis"]["datasets"].values()) == {"computed"}
    assert set(second["analysis"]["datasets"].values()) == {"cache"}
    assert second["id_coverage"]["user_id"]["new_id_row"] == \
        first["id_coverage"]["user_id"]["new_id_row"]
