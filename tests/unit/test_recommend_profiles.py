"""The recommendation inputs built by the Beam job `beam_jobs.recommend_profiles` from raw
day partitions: a user's latest values over days and parts, their seen items over the
window or a longer memory (bounded, the newest kept), the cap on users, the items' counts,
and the merge of tallies that lets no process hold the window."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_jobs import recommend_profiles as job
from components.ctr import feature_config
from components.ctr import recommend_inputs as I
from components.ctr import recommend_profiles as P
from components.ctr.recommend_layout import USERS_DIR

CFG = feature_config.from_dict({
    "name": "shop", "label": "click", "example_id": "event_id",
    "features": [
        {"name": "user_id", "kind": "categorical", "transform": "hash", "hash_buckets": 64},
        {"name": "item_id", "kind": "categorical", "transform": "hash", "hash_buckets": 64},
        {"name": "category_id", "kind": "categorical", "transform": "hash", "hash_buckets": 8},
        {"name": "device", "kind": "categorical", "transform": "hash", "hash_buckets": 8},
        {"name": "price", "kind": "numeric", "transform": "zscore"}],
    "model": {"count_features": ["user_id", "item_id"]}})


def rows(events: list[tuple]) -> pa.Table:
    """(user, item, category, device, price, click) rows, in time order."""
    user, item, cat, device, price, click = zip(*events)
    return pa.table({"event_id": [f"e{id(events)}-{i}" for i in range(len(events))],
                     "user_id": list(user), "item_id": list(item), "category_id": list(cat),
                     "device": list(device), "price": [float(p) for p in price],
                     "click": list(click)})


def write_days(root: Path, days: dict[str, list[pa.Table]]) -> None:
    """Each day's part files, in name order, with the day's _SUCCESS marker."""
    for day, parts in days.items():
        folder = root / f"dt={day}"
        folder.mkdir(parents=True)
        for i, part in enumerate(parts):
            pq.write_table(part, folder / f"part-{i:05d}.parquet")
        (folder / "_SUCCESS").touch()


def build(tmp_path: Path, days: list[str], *, seen_days: list[str] = (), seen_max: int = 0,
          max_users: int = 0, num_shards: int = 3) -> tuple[list[dict], list[dict], dict]:
    model = tmp_path / "model"
    if not model.exists():
        model.mkdir()
        feature_config.write_model_config(model, CFG)
    out = tmp_path / f"inputs-{len(list(tmp_path.glob('inputs-*')))}"
    summary = job.run(["--raw-root", str(tmp_path / "raw"), "--days", json.dumps(days),
                       "--seen-days", json.dumps(list(seen_days)), "--model-dir", str(model),
                       "--output-dir", str(out), "--user-column", "user_id",
                       "--item-column", "item_id", "--user-side", '["device"]',
                       "--item-side", '["category_id", "price"]',
                       "--seen-max", str(seen_max), "--max-users", str(max_users),
                       "--num-shards", str(num_shards)])
    shards = sorted((out / USERS_DIR).glob("part-*.parquet"))
    for shard in shards:   # each user in the shard its id hashes to
        ids = pq.read_table(shard).column("user_id").to_pylist()
        assert set(I.shard_of(ids, num_shards)) == {int(shard.stem.split("-")[1])}
    users = pq.read_table(shards).to_pylist() if shards else []
    items = pq.read_table(out / job.WINDOW_ITEMS).to_pylist()
    return sorted(users, key=lambda u: u["user_id"]), items, summary


OLD = rows([("u1", "z", "x", "tv", 9, 1), ("u4", "y", "y", "tv", 1, 0)])
DAY1 = [rows([("u1", "a", "x", "ios", 1.0, 1), ("u2", "b", "y", "web", 2.0, 0)]),
        rows([("u1", "b", "y", "android", 2.5, 1)])]
DAY2 = [rows([("u3", "c", "x", "ios", 3.0, 0), ("u2", "a", "x", "web", 1.5, 0),
              ("u1", "a", "x", "web", 1.2, 1)])]


@pytest.fixture
def raw(tmp_path):
    write_days(tmp_path / "raw", {"2026-11-01": [OLD], "2026-11-02": DAY1,
                                  "2026-11-03": DAY2})
    return tmp_path


def test_users_keep_their_latest_row_over_days_and_parts_and_items_count_the_window(raw):
    users, items, summary = build(raw, ["2026-11-02", "2026-11-03"])
    assert users == [{"user_id": "u1", "device": "web"}, {"user_id": "u2", "device": "web"},
                     {"user_id": "u3", "device": "ios"}]
    got = {i["item_id"]: (i[I.IMPRESSIONS], i[I.CLICKS], round(i["price"], 4), i["category_id"])
           for i in items}
    assert got == {"a": (3, 2, 1.2, "x"), "b": (2, 1, 2.5, "y"), "c": (1, 0, 3.0, "x")}
    assert summary["rows_read"] == 6 and summary["active_users"] == 3
    assert summary["users_written"] == 3 and summary["parts"] == 3


def test_seen_items_cover_the_window_or_a_longer_memory_bounded_to_the_newest(raw):
    users, _, _ = build(raw, ["2026-11-02", "2026-11-03"], seen_max=10)
    assert {u["user_id"]: u[I.SEEN] for u in users} == {"u1": ["a", "b"], "u2": ["a", "b"],
                                                       "u3": ["c"]}
    # A longer memory: u1's "z" of the older day is seen too; u4, met only then, gets no
    # list (not active), and the older day counts in no item's clicks.
    users, items, summary = build(raw, ["2026-11-02", "2026-11-03"],
                                  seen_days=["2026-11-01", "2026-11-02", "2026-11-03"],
                                  seen_max=10)
    assert {u["user_id"]: u[I.SEEN] for u in users} == {"u1": ["a", "b", "z"],
                                                       "u2": ["a", "b"], "u3": ["c"]}
    assert "z" not in {i["item_id"] for i in items} and summary["active_users"] == 3
    # At most two per user: u1 met z, then a, then b (day 1's second part), then a again
    # (day 2): the two met last are a and b.
    users, _, _ = build(raw, ["2026-11-02", "2026-11-03"],
                        seen_days=["2026-11-01", "2026-11-02", "2026-11-03"], seen_max=2)
    assert users[0][I.SEEN] == ["a", "b"]


def test_the_cap_keeps_the_most_active_users_ties_by_id(raw):
    users, _, summary = build(raw, ["2026-11-02", "2026-11-03"], max_users=2)
    assert [u["user_id"] for u in users] == ["u1", "u2"]       # 3 rows, 2 rows (u3: 1)
    assert summary["active_users"] == 3 and summary["users_written"] == 2
    users, _, _ = build(raw, ["2026-11-03"], max_users=2)      # one row each: by id
    assert [u["user_id"] for u in users] == ["u1", "u2"]


def test_tallies_merge_in_any_order_to_the_same_profile():
    """The combine's contract: order of merging does not matter, and a tally holds at most
    seen_max items whatever it merged."""
    table = rows([("u1", f"i{n}", "x", f"d{n}", 1, n % 2) for n in range(6)])
    halves = [dict(P.part_users(table.slice(s, 3), 0, 0, s, "user_id", ["device"],
                                "item_id", 4, True))["u1"] for s in (0, 3)]
    one = P.merge_users(*halves, seen_max=4)
    other = P.merge_users(*reversed(halves), seen_max=4)
    assert one == other and one.values == ("d5",) and one.rows == 6
    assert sorted(one.seen) == ["i2", "i3", "i4", "i5"]
    whole = dict(P.part_users(table, 0, 0, 0, "user_id", ["device"], "item_id", 4, True))["u1"]
    assert whole == one
    items = [dict(P.part_items(table.slice(s, 3), 0, 0, s, "item_id", ["device"], "click"))
             for s in (0, 3)]
    assert P.merge_items(items[0]["i1"], None).clicks == 1


def test_the_pool_is_picked_from_the_items_table():
    table = pa.table({"item_id": ["c", "a", "b"], "category_id": ["x", "x", "y"],
                      "genres": [["x"], ["x", "y"], []],
                      I.CLICKS: [0, 2, 1], I.IMPRESSIONS: [1, 3, 2]})
    assert I.pool(table, "item_id", "window", 0).column("item_id").to_pylist() == [
        "a", "b", "c"]
    assert I.pool(table, "item_id", "window", 2).num_rows == 2
    top = I.pool(table, "item_id", "top_per_category", 1, "category_id")
    assert sorted(top.column("item_id").to_pylist()) == ["a", "b"]
    with pytest.raises(ValueError, match="category column"):
        I.pool(table.drop_columns(["category_id"]), "item_id", "top_per_category", 2,
               "category_id")
    with pytest.raises(ValueError, match="pool must be one of"):
        I.pool(table, "item_id", "everything", 0)
    with pytest.raises(ValueError, match="'genres' holds lists"):
        I.pool(table, "item_id", "top_per_category", 2, "genres")


def test_the_roles_sample_is_bounded_and_newest_first(raw):
    sample = I.sample_rows(str(raw / "raw"), ["2026-11-01", "2026-11-02", "2026-11-03"],
                           CFG, limit=4)
    # day 3's three rows, then day 2's first row, in time order
    assert sample.column("user_id").to_pylist() == ["u1", "u3", "u2", "u1"]
    assert I.delivered_days(str(raw / "raw"), "2026-11-04", 3) == ["2026-11-02",
                                                                  "2026-11-03"]


def test_a_reader_that_flushes_often_builds_the_same_inputs(raw, monkeypatch):
    """A reader emits its merged tallies whenever it holds FLUSH_KEYS keys (its memory
    bound): flushing after every batch's keys changes nothing downstream."""
    days = ["2026-11-02", "2026-11-03"]
    whole = build(raw, days, seen_days=["2026-11-01", *days], seen_max=10)
    monkeypatch.setattr(job, "FLUSH_KEYS", 1)
    assert build(raw, days, seen_days=["2026-11-01", *days], seen_max=10)[:2] == whole[:2]


def test_a_seen_memory_that_cannot_be_is_refused_by_name():
    from components.ctr.recommend import RecommendSpec, _check_numbers
    from components.ctr.recommend_roles import RecommendSettingError

    def refused(**settings) -> str:
        with pytest.raises(RecommendSettingError) as e:
            _check_numbers(RecommendSpec(raw_root="r", span="2026-11-03", output_dir="o",
                                         **settings))
        return str(e.value)

    assert refused(seen_days=-1).startswith("seen_days (--seen-days): must be >= 0")
    assert refused(exclude_seen=True, seen_days=3, active_days=7).startswith(
        "seen_days (--seen-days): must be 0 (the active days) or at least active_days (7)")
    assert refused(exclude_seen=True, seen_max=0).startswith(
        "seen_max (--seen-max): must be >= 1 with exclude_seen")
    _check_numbers(RecommendSpec(raw_root="r", span="2026-11-03", output_dir="o",
                                 exclude_seen=True, seen_days=365, seen_max=50))
