"""The new-id row's parts (issue 44; components/ctr/seen_filter.py): the window's Bloom
filter (bits set and tested the same way, merged by OR, cached losslessly), its size and
false-positive rate, and what training and warm start do with the row."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from components.ctr import feature_config as fc
from components.ctr import seen_filter as sf
from components.ctr.feature_config_model import default_seen_filter_bits
from components.ctr.train_input import NEW_ID_TRAIN_SHARE, move_to_new_id_row, prior_weights
from components.ctr.warm_vocab import row_sources

BITS = 1 << 14


def _filter_of(values: list[str], bits: int = BITS) -> np.ndarray:
    """The analyzer's combine, in two bundles merged as Beam would."""
    fn = sf.OrBits(bits // 8, packed_inputs=False)
    halves = [values[: len(values) // 2], values[len(values) // 2:]]
    accs = [fn.add_input(fn.create_accumulator(), [sf.positions(tf.constant(h), bits).numpy()])
            for h in halves]
    return fn.extract_output(fn.merge_accumulators(accs))


def test_every_value_put_in_is_seen_and_few_others_are():
    seen_ids = [f"user-{i}" for i in range(500)]
    packed = _filter_of(seen_ids)
    assert sf.seen(tf.constant(seen_ids), packed, BITS).numpy().all()     # no false negatives
    others = [f"other-{i}" for i in range(5000)]
    false_positives = sf.seen(tf.constant(others), packed, BITS).numpy().mean()
    expected = sf.false_positive_rate(int(np.unpackbits(packed).sum()), BITS)
    assert 0 < expected < 0.01
    assert false_positives <= 3 * expected + 0.002


def test_integer_ids_are_tested_as_their_text():
    packed = _filter_of(["7", "12"])
    assert list(sf.seen(tf.constant([7, 12, 13], tf.int64), packed, BITS).numpy()) == [
        True, True, False]


def test_merging_packed_filters_is_their_union_and_empty_bundles_cost_nothing():
    a, b = _filter_of(["x"]), _filter_of(["y"])
    fn = sf.OrBits(BITS // 8, packed_inputs=True)
    assert fn.create_accumulator() is None
    merged = fn.add_input(fn.add_input(fn.create_accumulator(), a), b)
    np.testing.assert_array_equal(merged, a | b)
    assert fn.merge_accumulators([None, None]) is None
    assert not fn.extract_output(None).any() and fn.extract_output(None).size == BITS // 8


def test_the_cache_coder_round_trips_and_refuses_another_size():
    packed = _filter_of(["a", "b", "c"])
    coder = sf.PackedBitsCoder(BITS // 8)
    np.testing.assert_array_equal(coder.decode_cache(coder.encode_cache(packed)), packed)
    with pytest.raises(ValueError, match="expected 1024"):
        sf.PackedBitsCoder(1024).decode_cache(coder.encode_cache(packed))


def test_the_analyzers_repr_is_the_same_every_run():
    """tf.Transform hashes it into the analysis cache's keys."""
    first, second = repr(sf._analyzer(BITS, "user_id")), repr(sf._analyzer(BITS, "user_id"))
    assert first == second and " at 0x" not in first
    assert repr(sf._analyzer(BITS * 2, "user_id")) != first


def test_filter_size_follows_the_table():
    assert default_seen_filter_bits(10) == 1024                  # the floor
    assert default_seen_filter_bits(1 << 18) == 16 << 18         # 512 KB for 2^18 rows
    assert default_seen_filter_bits(1 << 31) == 1 << 32          # the ceiling
    assert default_seen_filter_bits(1001) % 8 == 0


def _config(**user) -> fc.FeatureConfig:
    d = fc.default().to_dict()
    for f in d["features"]:
        if f["name"] == "user_id":
            f.update(user)
    return fc.from_dict(d)


def test_the_row_is_the_tables_last_and_default_configs_keep_their_fingerprint():
    cfg = _config(new_id_row=True)
    user = cfg.feature("user_id")
    assert user.new_id_index == user.hash_buckets and user.table_size == user.hash_buckets + 1
    assert user.filter_bits == default_seen_filter_bits(user.hash_buckets)
    assert cfg.new_id_rows() == {"user_id": user.hash_buckets}
    assert _config(new_id_row=True, seen_filter_bits=2048).feature("user_id").filter_bits == 2048
    assert fc.from_dict(cfg.to_dict()) == cfg
    off = _config(new_id_row=False)
    assert off.fingerprint() == fc.default().fingerprint() and off.new_id_rows() == {}


def test_training_moves_a_fixed_share_of_rows_to_the_new_row():
    ids = tf.constant(np.arange(20000, dtype=np.int64))
    serialized = tf.constant([f"example-{i}" for i in range(20000)])
    moved = move_to_new_id_row(ids, serialized, 99999, "user_id").numpy()
    share = (moved == 99999).mean()
    assert abs(share - NEW_ID_TRAIN_SHARE) < 0.005
    again = move_to_new_id_row(ids, serialized, 99999, "user_id").numpy()
    np.testing.assert_array_equal(moved, again)                 # the same rows every pass
    other = move_to_new_id_row(ids, serialized, 99999, "item_id").numpy()
    assert not np.array_equal(moved == 99999, other == 99999)   # salted per field


def test_the_new_rows_prior_counts_the_rows_that_train_it():
    spec = type("Spec", (), {"l2": 10.0, "embedding_l2": 0.0, "fm_l2": 0.0})()
    net = {"id_l2": {}, "embedding_l2": {}, "dims": {}, "fm": {}}
    counts = {"user_id": np.array([5, 0, 3, 0])}               # row 3: the new-id row
    priors = prior_weights(spec, net, counts, {"user_id": 3}, rows=6400)
    weights = priors["__prior_bias_user_id"][1]
    assert weights[3] == pytest.approx(10.0 / (NEW_ID_TRAIN_SHARE * 6400))
    assert weights[0] == pytest.approx(10.0 / 5) and counts["user_id"][3] == 0   # not mutated


def test_warm_start_keeps_the_new_rows_learned_values():
    old, new = [b"a", b"b"], [b"b", b"c"]             # rows: vocab | 1 oov | spare | new-id
    src = row_sources(old, new, oov_buckets=1, rows=5, new_id_row=4)
    assert list(src) == [1, -1, 2, -1, 4]
