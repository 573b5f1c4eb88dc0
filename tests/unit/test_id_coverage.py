"""The id fields' coverage figures (components/ctr/id_coverage.py): exact below the sketch
size, close above it, merged across bundles as one, and the shared-row share as uniform
hashing gives it."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from components.ctr import feature_config, id_coverage


def _fold(batches, fields, k):
    fn = id_coverage.IdSketchFn(fields, k)
    accs = []
    for b in batches:   # one accumulator per batch, merged as workers' would be
        accs.append(fn.add_input(fn.create_accumulator(), b))
    return fn.extract_output(fn.merge_accumulators(accs))


def test_exact_counts_below_the_sketch_size():
    train = [pa.record_batch({"user_id": [f"u{i}" for i in range(0, 60)]}),
             pa.record_batch({"user_id": [f"u{i}" for i in range(40, 100)]})]   # 100 ids
    held = [pa.record_batch({"user_id": [f"u{i}" for i in range(90, 110)]})]    # 10 new of 20
    sketches = {"train": _fold(train, ["user_id"], 1000), "eval": _fold(held, ["user_id"], 1000)}
    out = id_coverage.report(sketches, {"user_id": ("hash", 64)}, k=1000)["user_id"]
    assert out["ids"] == 100 and out["eval_ids"] == 20 and out["exact"] is True
    assert out["new_ids_in_eval_share"] == 0.5
    assert out["ids_sharing_a_row_share"] == pytest.approx(1 - (1 - 1 / 64) ** 99, abs=1e-4)
    assert id_coverage.headline({"user_id": out}) == (
        "user_id: 100 ids in 64 rows, 79% share a row, 50% of eval ids new")


def test_estimates_above_the_sketch_size_are_close():
    rng = np.random.default_rng(3)
    train_ids = rng.choice(10**9, 200_000, replace=False)
    new_ids = rng.choice(np.arange(2 * 10**9, 3 * 10**9), 15_000, replace=False)
    eval_ids = np.concatenate([train_ids[:35_000], new_ids])               # 30 % new
    k = 4096
    sketches = {
        "train": _fold([pa.record_batch({"item_id": pa.array(c)})
                        for c in np.array_split(train_ids, 7)], ["item_id"], k),
        "eval": _fold([pa.record_batch({"item_id": pa.array(eval_ids)})], ["item_id"], k)}
    out = id_coverage.report(sketches, {"item_id": ("vocabulary", 1000)}, k=k)["item_id"]
    assert out["exact"] is False
    assert abs(out["ids"] / 200_000 - 1) < 0.06                  # ~1/sqrt(k) = 1.6 %
    assert abs(out["eval_ids"] / 50_000 - 1) < 0.06
    assert abs(out["new_ids_in_eval_share"] - 0.3) < 0.04
    assert "ids_sharing_a_row_share" not in out                  # a vocabulary: no hashing


def test_the_generated_logs_id_fields_are_the_hashed_and_vocabulary_ones():
    fields = id_coverage.id_fields(feature_config.default())
    assert fields["user_id"] == ("hash", 262144) and fields["item_id"] == ("hash", 131072)
    assert fields["category_id"][0] == "vocabulary"
    assert "hour" not in fields and "position" not in fields     # identity: counted apart


def test_shared_row_share_of_uniform_hashing():
    assert id_coverage.shared_row_share(1, 10) == 0.0
    # 262,144 rows and as many ids: 1 - (1 - 1/B)^(B-1) ~ 1 - 1/e
    assert id_coverage.shared_row_share(262_144, 262_144) == pytest.approx(1 - np.exp(-1),
                                                                          abs=1e-4)
