"""Is a recommendations partition well-formed, and is it any good?

`check_output` is the contract readers rely on (raised before the partition is
committed): every scored user has exactly min(K, pool) rows ranked 1..n (fewer only for
the pool items they have seen, with exclude_seen, and never one of those), no item
twice for a user, every item from the pool, every score in [0, 1].

`quality` measures the lists against the next day's clicks, rows no model was trained
on: precision@K and recall@K per user who clicked a pool item that day, beside two
baselines built in the same call by the model's own rules (`recommend_baselines`: the
same pool, the same seen items left out): popularity and item-kNN. A personalised model
that cannot beat them is not worth its parameter servers.

A verdict needs evidence (design rule 21): each comparison is the mean over users of the
paired difference model - baseline in precision@K, with a percentile-bootstrap interval
over users (the project's resampler, `components.metrics`). "beats" only when the
interval lies wholly above 0, "worse" when wholly below, "level" otherwise, and "not
enough evidence" below `min_users` users, whatever the means say. `headline` says it in
one line for a page to show.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from components.ctr.recommend_baselines import (DEFAULT_KNN_ITEMS, item_knn_lists,
                                                popularity_lists, popularity_order)
from retrain.common.errors import BadData

BEATS, WORSE, LEVEL, NOT_ENOUGH = "beats", "worse", "level", "not enough evidence"
DEFAULT_MIN_USERS = 100
BASELINES = ("popularity", "item_knn")
NAMES = {"popularity": "popularity", "item_knn": "item-kNN"}


class RecommendationsInvalid(BadData, ValueError):
    """The job's output breaks the partition's contract; nothing is committed."""


def check_output(recs: pa.Table, users: list[str], pool: list[str], k: int,
                 seen: dict[str, list[str]] | None = None) -> dict:
    """Raise RecommendationsInvalid naming every broken rule; return the figures.
    `seen`: items each user must not get back (exclude_seen); they shorten the lists of
    users who saw nearly the whole pool."""
    seen = seen or {}
    pool_set = set(pool)
    want = {u: min(k, len(pool_set - set(seen.get(u) or ()))) for u in users}
    frame = recs.select(["user", "rank", "item", "score"]).to_pandas()
    problems = []
    per_user = frame.groupby("user").size()
    missing = sorted(u for u in set(users) - set(per_user.index) if want[u])
    if missing:
        problems.append(f"{len(missing)} of {len(users)} users have no rows")
    wrong = [u for u, n in per_user.items() if n != want.get(u, k)]
    if wrong:
        problems.append(f"{len(wrong)} users have a row count other than min(K={k}, the "
                        f"pool items they have not seen)")
    again = [u for u, i in zip(frame["user"], frame["item"]) if i in set(seen.get(u) or ())]
    if again:
        problems.append(f"{len(again)} rows give a user an item they have already seen")
    if frame.duplicated(["user", "item"]).any():
        problems.append(f"{int(frame.duplicated(['user', 'item']).sum())} repeated "
                        f"(user, item) pairs")
    ranks_ok = frame.groupby("user")["rank"].apply(
        lambda r: sorted(r.tolist()) == list(range(1, len(r) + 1)))
    if not ranks_ok.all():
        problems.append(f"{int((~ranks_ok).sum())} users' ranks are not 1..n")
    outside = ~frame["item"].isin(pool_set)
    if outside.any():
        problems.append(f"{int(outside.sum())} rows name an item outside the pool")
    scores = frame["score"].to_numpy()
    bad = ~np.isfinite(scores) | (scores < 0) | (scores > 1)
    if bad.any():
        problems.append(f"{int(bad.sum())} scores outside [0, 1] or not finite")
    if problems:
        raise RecommendationsInvalid("recommendations rejected: " + "; ".join(problems))
    return {"users": int(per_user.size), "rows": int(len(frame)),
            "k_per_user": max(want.values(), default=0),
            "score_min": float(scores.min()) if len(scores) else None,
            "score_max": float(scores.max()) if len(scores) else None}


def verdict(low: float | None, high: float | None, users: int, min_users: int) -> str:
    """The word for a paired interval of model - baseline over `users` users."""
    if users < min_users or low is None or high is None:
        return NOT_ENOUGH
    return BEATS if low > 0 else WORSE if high < 0 else LEVEL


def paired_interval(diff: np.ndarray, *, n_resamples: int = 1000, seed: int = 0,
                    level: float = 0.95) -> dict:
    """Percentile-bootstrap interval of the mean of per-user differences (users resampled
    with replacement, the same resamples for every comparison with the same seed)."""
    from components.metrics import _bootstrap_weights, percentile_interval

    n = int(diff.size)
    if n < 2:
        return {"estimate": float(diff.mean()) if n else None, "low": None, "high": None}
    means = np.concatenate([w @ diff / n for w in _bootstrap_weights(n, n_resamples, seed)])
    out = percentile_interval(means, float(diff.mean()), level)
    return {"estimate": out["estimate"], "low": out["low"], "high": out["high"]}


def _lists_of(recs: pa.Table) -> dict[str, list[str]]:
    ordered = recs.sort_by([("user", "ascending"), ("rank", "ascending")]).to_pandas()
    ordered["user"], ordered["item"] = ordered["user"].astype(str), ordered["item"].astype(str)
    return ordered.groupby("user")["item"].apply(list).to_dict()


def _shown(next_day: pa.Table, users: set[str], pool: set[str], user_column: str,
           item_column: str, label: str) -> pd.Series:
    """Next day's (user, pool item) -> clicked (0/1), for the given users."""
    frame = next_day.select([user_column, item_column, label]).to_pandas()
    frame[user_column] = frame[user_column].astype(str)
    frame[item_column] = frame[item_column].astype(str)
    frame = frame[frame[user_column].isin(users) & frame[item_column].isin(pool)]
    return (frame[label] > 0).astype(int).groupby([frame[user_column],
                                                   frame[item_column]]).max()


def _clicked_of(shown: pd.Series) -> dict[str, set[str]]:
    clicked = shown[shown > 0]
    return {u: set(g.index.get_level_values(1)) for u, g in clicked.groupby(level=0)}


def _score(frame: dict, name: str, lists: dict[str, list[str]],
           clicked: dict[str, set[str]], k: int) -> None:
    hits = np.array([len(set(lists.get(u, [])[:k]) & items) for u, items in clicked.items()])
    frame[f"hits_{name}"] = hits
    frame[f"precision_{name}"] = hits / k
    frame[f"recall_{name}"] = hits / np.array([len(v) for v in clicked.values()])


def user_metrics(recs: pa.Table, pool: pa.Table, next_day: pa.Table, *, user_column: str,
                 item_column: str, label: str, k: int, clicks_column: str,
                 window: pa.Table | None = None, seen: dict | None = None,
                 knn_items: int = DEFAULT_KNN_ITEMS) -> pd.DataFrame:
    """One row per user who has a list and clicked a pool item on the next day: hits,
    precision@K and recall@K of the model's list and of each baseline's.

    `seen`: the items each user's list left out (the partition's exclude_seen), left out
    of the baselines too; `window`: the window's rows (user, item, label), whose clicks
    build item-kNN (without it, no item-kNN columns)."""
    seen = {str(u): set(map(str, v or ())) for u, v in (seen or {}).items()}
    items = [str(i) for i in pool.column(item_column).to_pylist()]
    order = popularity_order(items, pool.column(clicks_column).to_pylist())
    lists = _lists_of(recs)
    clicked = _clicked_of(_shown(next_day, set(lists), set(items), user_column,
                                 item_column, label))
    users = sorted(clicked)
    clicked = {u: clicked[u] for u in users}
    frame: dict = {"user": users, "clicks": [len(clicked[u]) for u in users]}
    _score(frame, "model", lists, clicked, k)
    _score(frame, "popularity", popularity_lists(order, users, seen, k), clicked, k)
    if window is not None:
        liked = window.filter(pc.greater(window.column(label), 0))
        knn = item_knn_lists(liked.column(user_column).to_pylist(),
                             liked.column(item_column).to_pylist(), order, users, seen, k,
                             knn_items)
        _score(frame, "item_knn", knn, clicked, k)
    return pd.DataFrame(frame)


def held_out_metrics(users: set[str], pool: pa.Table, next_day: pa.Table,
                     user_scores: dict[str, dict[str, float]], *, user_column: str,
                     item_column: str, label: str, k: int, clicks_column: str) -> pd.DataFrame:
    """Each user's next-day impressions of pool items (more than K of them, at least one
    clicked), ranked by the model's score or by window clicks: which ranking puts the
    clicked ones in its top K. Every ranking sees the same exposed items."""
    window_clicks = dict(zip(map(str, pool.column(item_column).to_pylist()),
                             pool.column(clicks_column).to_pylist()))
    shown = _shown(next_day, users, set(window_clicks), user_column, item_column, label)
    exposed = {u: list(g.index.get_level_values(1)) for u, g in shown.groupby(level=0)}
    clicked = {u: items for u, items in _clicked_of(shown).items()
               if len(exposed[u]) > k and u in user_scores}
    clicked = {u: clicked[u] for u in sorted(clicked)}
    by_model = {u: sorted(exposed[u], key=lambda i: (-user_scores[u][i], i)) for u in clicked}
    by_clicks = {u: sorted(exposed[u], key=lambda i: (-window_clicks[i], i)) for u in clicked}
    frame: dict = {"user": list(clicked), "clicks": [len(v) for v in clicked.values()]}
    _score(frame, "model", by_model, clicked, k)
    _score(frame, "popularity", by_clicks, clicked, k)
    return pd.DataFrame(frame)


def compare(frame: pd.DataFrame, *, min_users: int = DEFAULT_MIN_USERS,
            n_resamples: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """The model against every baseline of `frame` (rows of `user_metrics`, possibly of
    several days: a user-day per row), paired over its rows."""
    if min_users < 2:
        raise ValueError(f"min_users must be >= 2 (an interval needs two users), "
                         f"got {min_users}")
    n = len(frame)
    out: dict = {"users_evaluated": n, "clicks_evaluated": int(frame["clicks"].sum()),
                 "min_users": min_users}
    for name in ("model", *BASELINES):
        if f"hits_{name}" not in frame:
            continue
        out[name] = {"precision_at_k": float(frame[f"precision_{name}"].mean()) if n else None,
                     "recall_at_k": float(frame[f"recall_{name}"].mean()) if n else None,
                     "hits": int(frame[f"hits_{name}"].sum())}
        if name == "model":
            continue
        p = paired_interval((frame["precision_model"] - frame[f"precision_{name}"])
                            .to_numpy(float), n_resamples=n_resamples, seed=seed, level=level)
        r = paired_interval((frame["recall_model"] - frame[f"recall_{name}"])
                            .to_numpy(float), n_resamples=n_resamples, seed=seed, level=level)
        out[f"vs_{name}"] = {"precision_difference": p, "recall_difference": r,
                             "level": level, "n_resamples": n_resamples,
                             "verdict": verdict(p["low"], p["high"], n, min_users)}
    return out


def _figure(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}".replace("-", "\u2212")


def headline(block: dict, k: int) -> str:
    """One line: the model's precision@K and each baseline's, with the verdict, the
    paired difference, its interval and the users it stands on."""
    if not block.get("users_evaluated"):
        return f"precision@{k}: no user clicked a pool item on the day measured"
    parts = []
    for name in BASELINES:
        vs = block.get(f"vs_{name}")
        if vs is None:
            continue
        d, n = vs["precision_difference"], block["users_evaluated"]
        need = (f", {block['min_users']} needed" if vs["verdict"] == NOT_ENOUGH else "")
        parts.append(f"{NAMES[name]} {_figure(block[name]['precision_at_k'])} "
                     f"({vs['verdict']}: {_figure(d['estimate'])} [{_figure(d['low'])}, "
                     f"{_figure(d['high'])}], {n} users{need})")
    return (f"precision@{k} {_figure(block['model']['precision_at_k'])} vs "
            + "; vs ".join(parts))


def quality(recs: pa.Table, pool: pa.Table, next_day: pa.Table,
            user_scores: dict[str, dict[str, float]], *, user_column: str, item_column: str,
            label: str, k: int, clicks_column: str, window: pa.Table | None = None,
            seen: dict | None = None, min_users: int = DEFAULT_MIN_USERS,
            knn_items: int = DEFAULT_KNN_ITEMS, n_resamples: int = 1000,
            seed: int = 0) -> dict:
    """The model's lists against popularity and item-kNN at K on the next day's clicks,
    measured two ways:

    - `pool` (the verdict): each list against the pool items its user clicked; the
      baselines follow the lists' rules (the same pool, the same `seen` left out).
    - `held_out_impressions`: each user's next-day impressions of pool items ranked by
      the model's score (`user_scores`) or by window clicks. It takes exposure out (on an
      impression log, popular items are clicked most because they are shown most);
      reported beside the verdict, with its own interval.

    `beats_popularity` / `beats_item_knn`: the `pool` verdict is "beats" (the interval
    of the paired difference wholly above 0, on at least `min_users` users).
    """
    args = dict(user_column=user_column, item_column=item_column, label=label, k=k,
                clicks_column=clicks_column)
    frame = user_metrics(recs, pool, next_day, window=window, seen=seen,
                         knn_items=knn_items, **args)
    held = held_out_metrics(set(_lists_of(recs)), pool, next_day, user_scores, **args)
    return summarise(frame, held, k=k, min_users=min_users, n_resamples=n_resamples,
                     seed=seed, exclude_seen=seen is not None)


def summarise(frame: pd.DataFrame, held: pd.DataFrame, *, k: int, min_users: int,
              n_resamples: int = 1000, seed: int = 0, exclude_seen: bool = False) -> dict:
    """The quality JSON from per-user rows (of one day, or pooled over days)."""
    pool_result = compare(frame, min_users=min_users, n_resamples=n_resamples, seed=seed)
    held_result = compare(held, min_users=min_users, n_resamples=n_resamples, seed=seed)
    verdicts = {b: pool_result[f"vs_{b}"]["verdict"] for b in BASELINES
                if f"vs_{b}" in pool_result}
    return {"k": k, "min_users": min_users, "exclude_seen": exclude_seen,
            "pool": pool_result, "held_out_impressions": held_result,
            "verdicts": verdicts, "headline": headline(pool_result, k),
            "beats_popularity": verdicts.get("popularity") == BEATS,
            "beats_item_knn": verdicts.get("item_knn") == BEATS}
