"""The two lists a personalised model's top K must beat to be worth its parameter servers:
popularity and item-kNN, built from the same window and the same pool as the model's.

Why here, apart from the quality check: a baseline is only fair if it plays by the model's
rules. Both draw from the model's candidate pool and leave out the same items the model's
list left out (the user's window items when the partition was made with `exclude_seen`,
nothing otherwise); a popularity list that may repeat what a user already rated beats a
model that may not, on any rating log (issue 44).

- popularity: the pool's items by their window clicks (ties by id), each user's seen
  items left out, the first K;
- item-kNN: "who clicked these also clicked": items co-clicked by the same user in the
  window, cosine-normalised (count(i, j) / sqrt(count(i) count(j))), summed over the
  user's own window clicks; the best K unseen, topped up from popularity when fewer than
  K items co-occur. Memory is bounded by the candidate space, never by rows: only the
  `max_items` most clicked pool items are candidates (and profile items), the pairs are
  counted by one sparse product, and users are scored `USERS_PER_BLOCK` at a time.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

USERS_PER_BLOCK = 2048
DEFAULT_KNN_ITEMS = 2000


def _strings(values) -> pa.Array:
    """Ids as one string array (a list, an Arrow array or a table's column)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    elif not isinstance(values, pa.Array):
        values = pa.array(list(values))
    return values if pa.types.is_string(values.type) else pc.cast(values, pa.string())


def popularity_order(items: list[str], clicks: list[int]) -> list[str]:
    """Items by window clicks, most first, ties by id."""
    return [i for _, i in sorted(zip((-int(c) for c in clicks), map(str, items)))]


def _top_unseen(ranked, seen: set[str], k: int, taken: list[str] | None = None) -> list[str]:
    out = list(taken or [])
    have = set(out)
    for item in ranked:
        if len(out) >= k:
            break
        if item not in seen and item not in have:
            out.append(item)
            have.add(item)
    return out


def popularity_lists(order: list[str], users: list[str], seen: dict[str, set[str]],
                     k: int) -> dict[str, list[str]]:
    """Each user's K most popular pool items that are not among their `seen` items."""
    return {u: _top_unseen(order, seen.get(u, set()), k) for u in users}


def item_knn_lists(window_users, window_items, order: list[str], users: list[str],
                   seen: dict[str, set[str]], k: int,
                   max_items: int = DEFAULT_KNN_ITEMS) -> dict[str, list[str]]:
    """Item-kNN lists of `users` from the window's clicks (`window_users[i]` clicked
    `window_items[i]`, repeats allowed; lists or Arrow columns, counted by Arrow and one
    sparse product, never a Python loop over rows) over the first `max_items` of `order`
    (the pool by popularity); topped up from `order`, seen items left out."""
    from scipy import sparse

    candidates = np.asarray(order[:max(1, max_items)], dtype=object)
    n = len(candidates)
    items_at = _strings(window_items)
    users_at = _strings(window_users)
    cols = pc.index_in(items_at, value_set=pa.array(list(candidates), pa.string()))
    cols = cols.fill_null(-1).to_numpy().astype(np.int64)
    keep = cols >= 0
    names = pc.unique(users_at)
    rows = pc.index_in(users_at, value_set=names).to_numpy().astype(np.int64)[keep]
    names = np.asarray(names.to_pylist(), dtype=object)
    clicked = sparse.csr_matrix((np.ones(int(keep.sum()), dtype=np.float32),
                                 (rows, cols[keep])), shape=(len(names), n))
    clicked.sum_duplicates()
    clicked.data[:] = 1.0                          # one per (user, item), however often
    pairs = (clicked.T @ clicked).tocsr()          # co-click counts, the diagonal = count(i)
    count = pairs.diagonal().astype(np.float64)
    norm = np.where(count > 0, 1.0 / np.sqrt(np.maximum(count, 1.0)), 0.0)
    sim = sparse.diags(norm) @ pairs @ sparse.diags(norm)
    sim = (sim - sparse.diags(sim.diagonal())).tocsr()   # an item is not its own neighbour
    row_of = {u: r for r, u in enumerate(names)}
    nobody = len(names)                            # users without a window click: no row
    profiles = sparse.vstack([clicked, sparse.csr_matrix((1, n), dtype=np.float32)]).tocsr()

    out: dict[str, list[str]] = {}
    for start in range(0, len(users), USERS_PER_BLOCK):
        block = users[start:start + USERS_PER_BLOCK]
        idx = np.asarray([row_of.get(str(u), nobody) for u in block], dtype=np.int64)
        scores = np.asarray((profiles[idx] @ sim).todense())
        for u, row in zip(block, scores):
            gone = seen.get(u, set())
            hit = np.flatnonzero(row > 0)
            ranked = hit[np.lexsort((hit, -row[hit]))]    # score, then popularity rank
            near = _top_unseen(candidates[ranked], gone, k)
            out[u] = _top_unseen(order, gone, k, near)
    return out
