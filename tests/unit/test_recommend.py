"""The recommendations' inputs, contract and quality figures on hand-made tables."""
from __future__ import annotations

import pyarrow as pa
import pytest

from components.ctr import recommend_inputs as I
from components.ctr.recommend_quality import RecommendationsInvalid, check_output, quality
from components.ctr.recommend_scoring import PairLayout

ROWS = pa.table({
    "user_id": ["u1", "u2", "u1", "u3", "u2", "u1"],
    "item_id": ["a", "b", "b", "c", "a", "a"],
    "category_id": ["x", "y", "y", "x", "x", "x"],
    "device": ["ios", "web", "android", "ios", "web", "web"],
    "price": [1.0, 2.0, 2.5, 3.0, 1.5, 1.2],
    "click": [1, 0, 1, 0, 0, 1],
})


def recs(rows):
    user, rank, item, score = zip(*rows)
    return pa.table({"user": list(user), "rank": list(rank), "item": list(item),
                     "score": list(score), "model_version": [1] * len(rows)})


def test_shards_are_stable_and_hash_the_id_as_text():
    ids = [f"user-{i}" for i in range(500)]
    first, again = I.shard_of(ids, 7), I.shard_of(list(reversed(ids)), 7)[::-1]
    assert (first == again).all() and set(first) == set(range(7))
    assert (I.shard_of([7, 8], 7) == I.shard_of(["7", "8"], 7)).all()   # by the id's text


def test_the_layout_puts_every_input_on_one_side():
    layout = PairLayout("user_id", "item_id", ("category_id", "price"), {"position": 1})
    assert layout.user_columns(["user_id", "device", "item_id", "category_id", "price",
                                "position"]) == ["user_id", "device"]
    assert PairLayout.from_dict({"user_column": "user_id", "item_column": "item_id",
                                 "item_columns": ["price"], "context": {}}).item_columns == (
        "price",)


def test_a_good_partition_passes_and_each_broken_rule_is_named():
    good = recs([("u1", 1, "a", 0.9), ("u1", 2, "b", 0.5), ("u2", 1, "b", 0.7),
                 ("u2", 2, "c", 0.1)])
    assert check_output(good, ["u1", "u2"], ["a", "b", "c"], 2)["rows"] == 4
    bad = recs([("u1", 1, "a", 0.9), ("u1", 2, "a", 1.5), ("u2", 1, "z", 0.7)])
    with pytest.raises(RecommendationsInvalid) as e:
        check_output(bad, ["u1", "u2", "u3"], ["a", "b", "c"], 2)
    message = str(e.value)
    for rule in ("1 of 3 users have no rows", "row count other than min(K=2", "repeated (user, item)",
                 "outside the pool", "outside [0, 1]"):
        assert rule in message, message


def test_quality_counts_hits_at_k_for_the_model_and_for_popularity():
    pool = pa.table({"item_id": ["a", "b", "c", "d"], I.CLICKS: [9, 5, 1, 0]})
    lists = recs([("u1", 1, "c", 0.9), ("u2", 1, "a", 0.8)])
    next_day = pa.table({"user_id": ["u1", "u1", "u1", "u2", "u2", "u2", "u9"],
                         "item_id": ["a", "c", "d", "a", "b", "c", "a"],
                         "click": [0, 1, 0, 1, 0, 0, 1]})
    scores = {"u1": {"a": 0.1, "b": 0.2, "c": 0.9, "d": 0.3},
              "u2": {"a": 0.2, "b": 0.8, "c": 0.1, "d": 0.5}}
    q = quality(lists, pool, next_day, scores, user_column="user_id", item_column="item_id",
                label="click", k=1, clicks_column=I.CLICKS)
    assert q["pool"]["users_evaluated"] == 2      # u9 got no list: not counted
    assert q["pool"]["model"]["hits"] == 2 and q["pool"]["popularity"]["hits"] == 1
    held = q["held_out_impressions"]
    # u1 was shown a, c, d: the model ranks c first (clicked), popularity a (not clicked);
    # u2 was shown a, b, c: the model ranks b first (not clicked), popularity a (clicked).
    assert held["model"]["hits"] == 1 and held["popularity"]["hits"] == 1
    assert q["beats_popularity"] is False


def test_seen_items_never_come_back():
    seen = {"u1": ["a", "b"], "u2": ["a", "b", "c"]}
    # u1 has one unseen item left (c), u2 none: shorter lists, not a broken partition.
    assert check_output(recs([("u1", 1, "c", 0.4)]), ["u1", "u2"], ["a", "b", "c"], 2,
                        seen)["rows"] == 1
    with pytest.raises(RecommendationsInvalid, match="already seen"):
        check_output(recs([("u1", 1, "a", 0.4)]), ["u1", "u2"], ["a", "b", "c"], 1, seen)
