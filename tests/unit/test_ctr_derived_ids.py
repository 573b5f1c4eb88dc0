"""Click logs without an id column: a feature config that names no `example_id` gets a
derived id per row (a hash of the row's configured columns) from every reader, so the
eval split, validation and evaluation work on the logs as they are."""
from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from components.ctr import feature_config as fc
from components.ctr import features as F
from components.ctr import rawdata
from components.ctr.synth import SynthSpec, run as synthesize
from retrain.common.errors import ConfigError


@pytest.fixture(scope="module")
def derived(tmp_path_factory):
    """The packaged example config without its id column, and 2 days of logs made by it."""
    root = tmp_path_factory.mktemp("derived")
    cfg = yaml.safe_load((fc.PACKAGED_DIR / "example_user_logs.yaml").read_text())
    del cfg["example_id"]
    del cfg["validation"]["patterns"]          # it was about event_id
    del cfg["validation"]["drift"]             # 1,500 rows: country drift is noise
    path = root / "no_ids.yaml"
    path.write_text(yaml.safe_dump(cfg))
    synthesize(SynthSpec(feature_config=str(path), raw_root=str(root / "raw"),
                         start="2026-12-01", days=2, rows_per_day=1500))
    return fc.load(path), path, root / "raw"


def test_a_config_without_example_id_derives_it(derived):
    cfg, _, _ = derived
    assert cfg.derived_id and cfg.example_id == fc.DERIVED_ID
    assert fc.DERIVED_ID in cfg.raw_columns() and fc.DERIVED_ID not in cfg.input_columns()
    assert "example_id" not in cfg.to_dict()                    # as the file says
    assert fc.FeatureConfig.from_dict(cfg.to_dict()) == cfg
    named = fc.load(fc.PACKAGED_DIR / "example_user_logs.yaml")
    assert not named.derived_id and named.to_dict()["example_id"] == "event_id"
    clash = {**cfg.to_dict(), "features": [{"name": "example_id", "kind": "categorical",
                                            "transform": "hash", "hash_buckets": 8},
                                           *cfg.to_dict()["features"]]}
    with pytest.raises(ConfigError, match="example_id"):
        fc.FeatureConfig.from_dict(clash)


def test_every_read_derives_the_same_ids_and_split(derived):
    cfg, _, raw = derived
    span = raw / "dt=2026-12-02"
    assert "event_id" not in (gzip.open(span / "part-00000.jsonl.gz", "rt").readline())
    table = rawdata.read_span(span, cfg)
    assert table.schema.names[0] == fc.DERIVED_ID and table.num_rows == 1500
    ids = table.column(fc.DERIVED_ID).to_pylist()
    assert all(len(i) == 16 for i in ids) and len(set(ids)) == len(ids)
    assert rawdata.read_span(span, cfg).column(fc.DERIVED_ID).to_pylist() == ids
    held_out = rawdata.read_eval_rows(span, 25, cfg)
    assert 0.15 < held_out.num_rows / 1500 < 0.35
    # The same rows as Parquet: the same ids (the id is the row, not the file format).
    parquet = raw.parent / "parquet" / "dt=2026-12-02"
    parquet.mkdir(parents=True)
    pq.write_table(table.drop_columns([fc.DERIVED_ID]), parquet / "part-00000.parquet")
    assert rawdata.read_span(parquet, cfg).column(fc.DERIVED_ID).to_pylist() == ids


def test_exact_repeats_share_an_id_and_a_column_not_read_changes_nothing():
    batch = pa.record_batch({"user": ["a", "b", "a"], "price": [1.5, None, 1.5],
                             "tags": pa.array([["x", "y"], None, ["x", "y"]]),
                             "clicked": [0, 1, 0]})
    ids = F.derived_ids(batch, ["user", "price", "tags", "clicked"]).to_pylist()
    assert ids[0] == ids[2] != ids[1]
    wider = batch.append_column("channel", pa.array(["mail", "chat", "web"]))
    assert F.derived_ids(wider, ["user", "price", "tags", "clicked"]).to_pylist() == ids
    assert F.derived_ids(batch, ["user", "price", "clicked"]).to_pylist() != ids


def test_validation_passes_on_logs_without_ids(derived, tmp_path):
    from components.ctr.validate import ValidateSpec, run as validate

    cfg, path, raw = derived
    result = validate(ValidateSpec(span_dir=str(raw / "dt=2026-12-02"), out_dir=str(tmp_path / "v"),
                                   feature_config=str(path)))
    report = json.loads((tmp_path / "v" / "validation.json").read_text())
    failed = [r["rule"] for r in report["results"] if not r["success"]]
    assert report["success"], failed
    rules = {r["rule"] for r in report["results"]}
    assert {"duplicates:example_id", "schema:columns"} <= rules, rules
    assert result["gate"] == "passed"
