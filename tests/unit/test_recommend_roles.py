"""`retrain recommend`'s defaults: column roles derived from the model's feature config
and the window, typed errors that name the missing setting, the cap on users, and the
plan and progress lines (issue 46)."""
from __future__ import annotations

import io
import re
import time

import numpy as np
import pyarrow as pa
import pytest

from components.ctr import feature_config
from components.ctr import recommend_inputs as I
from components.ctr import recommend_roles as R
from components.ctr.recommend_progress import Progress, plan_line
from retrain.common.errors import BadData

RATINGS = feature_config.from_dict({
    "name": "ratings", "label": "liked", "example_id": "rating_id",
    "features": [
        {"name": "user_id", "kind": "categorical", "transform": "hash", "hash_buckets": 100},
        {"name": "movie_id", "kind": "categorical", "transform": "hash", "hash_buckets": 100},
        {"name": "age", "kind": "numeric", "transform": "zscore"},
        {"name": "gender", "kind": "categorical", "transform": "hash", "hash_buckets": 4},
        {"name": "genres", "kind": "multi_categorical", "transform": "hash",
         "hash_buckets": 30, "max_values": 3},
        {"name": "release_year", "kind": "numeric", "transform": "zscore"},
        {"name": "hour", "kind": "categorical", "dtype": "int", "transform": "identity",
         "size": 24}],
    "model": {"count_features": ["movie_id", "user_id"]}})


def ratings(n: int = 3000, seed: int = 7) -> pa.Table:
    """Users with fixed age and gender, movies with fixed genres and year, hours at random
    (peaking at 20): the sides a rating log has."""
    rng = np.random.default_rng(seed)
    user, movie = rng.integers(0, 60, n), rng.integers(0, 40, n)
    hours = np.where(rng.random(n) < 0.3, 20, rng.integers(0, 24, n))
    return pa.table({
        "rating_id": [f"r{i}" for i in range(n)], "liked": rng.integers(0, 2, n),
        "user_id": [f"u{u}" for u in user], "movie_id": [f"m{m}" for m in movie],
        "age": (18 + user % 50).astype(float), "gender": [("f", "m")[u % 2] for u in user],
        "genres": [[("drama", "comedy", "horror")[m % 3], "x" if m % 2 else "y"]
                   for m in movie],
        "release_year": (1950 + movie).astype(float), "hour": hours})


def test_ids_come_from_the_feature_config_of_a_rating_log():
    assert R.ids(RATINGS, "cfg.json") == ("user_id", "movie_id", ["user_column",
                                                                  "item_column"])
    # the bundled config: its own names
    assert R.ids(feature_config.default(), "cfg.json")[:2] == ("user_id", "item_id")
    # given ones win, and are checked
    assert R.ids(RATINGS, "cfg.json", "user_id", "movie_id")[2] == []


def test_sides_are_measured_on_the_window():
    roles = R.sides(ratings(), RATINGS, "cfg.json", "user_id", "movie_id")
    assert sorted(roles.item_columns) == ["genres", "release_year"]
    assert roles.context == {"hour": 20}        # decided by neither: its most common value
    assert set(roles.derived) == {"item_columns", "context"}
    # what is given is kept, the rest derived
    given = R.sides(ratings(), RATINGS, "cfg.json", "user_id", "movie_id",
                    item_columns=["release_year"], context={})
    assert given.item_columns == ("release_year",) and given.context == {}
    assert given.derived == ()


def test_the_bundled_data_gets_its_hand_picked_item_columns(tmp_path):
    """The generator's logs: category, price and age come with the item, device and past
    clicks with the user, hour and position with neither."""
    from components.ctr.generate import GenerateSpec, run as generate

    generate(GenerateSpec(out_root=str(tmp_path), start="2026-11-01", days=2,
                          rows_per_day=3000, n_users=800, n_items=400, n_categories=20))
    cfg = feature_config.default()
    rows = I.sample_rows(str(tmp_path / "raw" / "ctr"), ["2026-11-01", "2026-11-02"], cfg)
    roles = R.sides(rows, cfg, "cfg.json", "user_id", "item_id")
    assert sorted(roles.item_columns) == ["category_id", "item_age_days", "price"]
    assert set(roles.context) == {"hour", "position"} and roles.context["position"] == 1


def test_a_setting_that_cannot_be_derived_is_named_with_the_config_file():
    anonymous = feature_config.from_dict({
        "name": "ads", "label": "clicked", "example_id": "event_id",
        "features": [{"name": "ad_id", "kind": "categorical", "transform": "hash",
                      "hash_buckets": 10},
                     {"name": "slot", "kind": "categorical", "dtype": "int",
                      "transform": "identity", "size": 8}]})
    with pytest.raises(R.RecommendSettingError) as e:
        R.ids(anonymous, "/models/ads/assets.extra/feature_config.json")
    assert isinstance(e.value, BadData) and isinstance(e.value, ValueError)
    assert e.value.setting == "user_column"
    message = str(e.value)
    assert message.startswith("user_column (--user-column): ")
    assert "/models/ads/assets.extra/feature_config.json" in message and "'ads'" in message
    with pytest.raises(R.RecommendSettingError, match=r"^item_column \(--item-column\)"):
        R.ids(anonymous, "f.json", user_column="slot")
    with pytest.raises(R.RecommendSettingError, match=r"^user_column .*'customer' is not an "
                                                      r"input of the model"):
        R.ids(RATINGS, "f.json", user_column="customer")
    with pytest.raises(R.RecommendSettingError, match=r"^item_columns .*\['price'\]"):
        R.sides(ratings(50), RATINGS, "f.json", "user_id", "movie_id",
                item_columns=["price"])
    with pytest.raises(R.RecommendSettingError, match=r"^category_column"):
        R.sides(ratings(), RATINGS, "f.json", "user_id", "movie_id",
                item_columns=["release_year"], context={}, pool="top_per_category")


def test_the_plan_says_pairs_and_time():
    assert plan_line(2000, 1000, rate=500_000) == (
        "scoring 2,000 users x 1,000 items = 2,000,000 pairs, about 4 s at 500,000 pairs/s")
    assert "about 2 h 13 min" in plan_line(80_000, 60_000, rate=600_000)


def test_progress_lines_give_done_total_rate_and_eta():
    out, started = io.StringIO(), time.monotonic()
    total = 1_000_000

    def count() -> int:    # 0 while "loading", then 400k pairs/s
        return int(max(0.0, time.monotonic() - started - 0.15) * 400_000)

    with Progress(total, lambda: min(total, count()), every=0.05, out=out):
        while count() < total:
            time.sleep(0.02)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 5, lines
    assert all(line.startswith("recommend: ") for line in lines)
    assert "ETA unknown (loading the model)" in lines[0]
    pattern = re.compile(r"recommend: [\d,]+/1,000,000 pairs \(\d+ %\), [\d,]+ pairs/s, ETA ")
    middle = [line for line in lines if pattern.match(line) and "unknown" not in line]
    assert middle, lines
    assert re.match(r"recommend: 1,000,000/1,000,000 pairs \(100 %\), .* done in ", lines[-1])
