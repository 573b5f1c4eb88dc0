"""Is a recommendations partition well-formed, and is it any good?

`check_output` is the contract readers rely on (raised before the partition is
committed): every scored user has exactly min(K, pool) rows ranked 1..n (fewer only for
the pool items they have seen, with exclude_seen, and never one of those), no item
twice for a user, every item from the pool, every score in [0, 1].

`quality` measures the lists against the next day's clicks, rows no model was trained
on: precision@K and recall@K over the users who clicked something that day, beside a
popularity baseline computed in the same call (the K most clicked pool items of the
window, the same list for everyone): a personalised model that cannot beat it is not
worth its parameter servers.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retrain.common.errors import BadData


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


def _at_k(lists: dict[str, list[str]], clicked: dict[str, set[str]], k: int) -> dict:
    precision, recall, hits = [], [], 0
    for user, items in clicked.items():
        got = len(set(lists.get(user, [])[:k]) & items)
        hits += got
        precision.append(got / k)
        recall.append(got / len(items))
    n = len(clicked)
    return {"precision_at_k": float(np.mean(precision)) if n else None,
            "recall_at_k": float(np.mean(recall)) if n else None, "hits": hits}


def _compare(model: dict[str, list[str]], popular: dict[str, list[str]],
             clicked: dict[str, set[str]], k: int) -> dict:
    return {"users_evaluated": len(clicked),
            "clicks_evaluated": sum(len(v) for v in clicked.values()),
            "model": _at_k(model, clicked, k), "popularity": _at_k(popular, clicked, k)}


def quality(recs: pa.Table, pool: pa.Table, next_day: pa.Table,
            user_scores: dict[str, dict[str, float]], *, user_column: str, item_column: str,
            label: str, k: int, clicks_column: str) -> dict:
    """Model vs popularity at K against the next day's clicks, measured two ways:

    - `pool`: the committed top-K lists against the pool items each user clicked. Logged
      clicks follow exposure (popular items are shown most, so clicked most), which
      favours popularity whatever the model knows: reported, not the verdict.
    - `held_out_impressions`: each user's next-day impressions of pool items (more than K
      of them, at least one clicked), ranked by the model's score (`user_scores`, the same
      pair scoring as the lists) or by window clicks: which ranking puts the clicked ones
      in its top K. Every ranking sees the same exposed items, so this one decides
      `beats_popularity`.
    """
    scored = set(pc.unique(recs.column("user")).to_pylist())
    window_clicks = dict(zip(map(str, pool.column(item_column).to_pylist()),
                             pool.column(clicks_column).to_pylist()))
    frame = next_day.select([user_column, item_column, label]).to_pandas()
    frame[user_column] = frame[user_column].astype(str)
    frame[item_column] = frame[item_column].astype(str)
    frame = frame[frame[user_column].isin(scored) & frame[item_column].isin(window_clicks)]
    shown = frame.groupby([user_column, item_column])[label].max()

    clicked = {u: set(g.index.get_level_values(1)[g.to_numpy() > 0])
               for u, g in shown.groupby(level=0)}
    clicked = {u: items for u, items in clicked.items() if items}
    ordered = recs.sort_by([("user", "ascending"), ("rank", "ascending")]).to_pandas()
    lists = ordered.groupby("user")["item"].apply(list).to_dict()
    popular = sorted(window_clicks, key=lambda i: (-window_clicks[i], i))[:k]
    pool_result = _compare(lists, {u: popular for u in clicked}, clicked, k)

    exposed = {u: list(g.index.get_level_values(1)) for u, g in shown.groupby(level=0)}
    held = {u: items for u, items in clicked.items()
            if len(exposed[u]) > k and u in user_scores}
    by_model = {u: sorted(exposed[u], key=lambda i: (-user_scores[u][i], i)) for u in held}
    by_clicks = {u: sorted(exposed[u], key=lambda i: (-window_clicks[i], i)) for u in held}
    held_result = _compare(by_model, by_clicks, held, k)
    m, b = held_result["model"]["precision_at_k"], held_result["popularity"]["precision_at_k"]
    return {"k": k, "pool": pool_result, "held_out_impressions": held_result,
            "beats_popularity": bool(m is not None and m > b)}
