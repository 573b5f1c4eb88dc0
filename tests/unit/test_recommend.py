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


def test_users_keep_their_latest_row_and_items_count_the_window():
    users = I.users(ROWS, "user_id", ["device"]).to_pylist()
    assert users == [{"user_id": "u1", "device": "web"}, {"user_id": "u2", "device": "web"},
                     {"user_id": "u3", "device": "ios"}]
    items = I.items(ROWS, "click", "item_id", ["category_id", "price"], "window", 0).to_pylist()
    assert [(i["item_id"], i[I.IMPRESSIONS], i[I.CLICKS], i["price"]) for i in items] == [
        ("a", 3, 2, 1.2), ("b", 2, 1, 2.5), ("c", 1, 0, 3.0)]
    top = I.items(ROWS, "click", "item_id", ["category_id"], "top_per_category", 1,
                  "category_id")
    assert sorted(top.column("item_id").to_pylist()) == ["a", "b"]
    assert I.items(ROWS, "click", "item_id", [], "window", 2).num_rows == 2


def test_a_pool_that_needs_a_category_says_so_and_unknown_pools_are_refused():
    with pytest.raises(ValueError, match="category column"):
        I.items(ROWS, "click", "item_id", ["price"], "top_per_category", 2, "category_id")
    with pytest.raises(ValueError, match="pool must be one of"):
        I.items(ROWS, "click", "item_id", [], "everything", 0)


def test_shards_are_stable_and_cover_every_user_once():
    ids = [f"user-{i}" for i in range(500)]
    first, again = I.shard_of(ids, 7), I.shard_of(list(reversed(ids)), 7)[::-1]
    assert (first == again).all() and set(first) == set(range(7))
    table = pa.table({"user_id": ids})
    parts = I.shards(table, "user_id", 7)
    assert sorted(u for p in parts for u in p.column("user_id").to_pylist()) == sorted(ids)


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


def test_a_list_valued_category_is_refused_in_one_line():
    rows = ROWS.append_column("genres", pa.array([["x"], ["y"], ["y", "x"], ["x"], [], ["x"]]))
    with pytest.raises(ValueError, match="'genres' holds lists"):
        I.items(rows, "click", "item_id", ["genres"], "top_per_category", 2, "genres")


def test_seen_items_are_listed_per_user_and_never_come_back():
    users = I.users(ROWS, "user_id", ["device"], "item_id").to_pylist()
    assert {u["user_id"]: u[I.SEEN] for u in users} == {"u1": ["a", "b"], "u2": ["a", "b"],
                                                       "u3": ["c"]}
    seen = {"u1": ["a", "b"], "u2": ["a", "b", "c"]}
    # u1 has one unseen item left (c), u2 none: shorter lists, not a broken partition.
    assert check_output(recs([("u1", 1, "c", 0.4)]), ["u1", "u2"], ["a", "b", "c"], 2,
                        seen)["rows"] == 1
    with pytest.raises(RecommendationsInvalid, match="already seen"):
        check_output(recs([("u1", 1, "a", 0.4)]), ["u1", "u2"], ["a", "b", "c"], 1, seen)
