"""The recommendation inputs as mergeable tallies: what one raw part file says about each
user and item, and how two such tallies combine, so the Beam job
`beam_jobs.recommend_profiles` builds them over any number of days and parts without a
process holding the window (DESIGN rule 24).

A row's place in time is its `Where`: (day index, part index, row index), days oldest
first, parts in the order every reader reads them, so "the latest" is the row with the
greatest `Where`, as it was when the window was one table.

- `UserTally`: the latest row's user-side values (`where`, `values`), the user's rows in
  the active days (`rows`; 0 for a user met only in the older seen days), and `seen`: up
  to `seen_max` distinct items with the place of the user's last row with each, the
  newest kept when there are more. Memory per user is bounded by `seen_max`, never by
  the user's rows.
- `ItemTally`: the latest row's item-side values, clicks and impressions.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Where = tuple[int, int, int]


class UserTally(NamedTuple):
    where: Where | None        # None: met only in the seen days (no profile values)
    values: tuple | None
    rows: int
    seen: dict                 # item (as text) -> Where of the user's last row with it


class ItemTally(NamedTuple):
    where: Where
    values: tuple
    clicks: int
    impressions: int


def _by_key(table: pa.Table, keys: list[str], label: str | None = None) -> pa.Table:
    """Per distinct key: its last row's index (`_i_max`), its rows (`_i_count`) and, with
    `label`, its clicks (`_y_sum`: a label that is null, NaN or 0 is no click), computed
    by Arrow's hash aggregation, not a Python loop over rows."""
    t = table.select(keys).append_column("_i", pa.array(np.arange(table.num_rows)))
    aggregates = [("_i", "max"), ("_i", "count")]
    if label is not None:
        y = pc.fill_null(table.column(label), 0).to_numpy(zero_copy_only=False)
        clicks = np.nan_to_num(np.asarray(y, dtype=np.float64)) != 0
        t = t.append_column("_y", pa.array(clicks.astype(np.int64)))
        aggregates.append(("_y", "sum"))
    return t.group_by(keys, use_threads=False).aggregate(aggregates)


def _values(table: pa.Table, rows: pa.Array, columns: list[str]) -> list[tuple]:
    return [tuple(r.values()) for r in table.take(rows).select(columns).to_pylist()]


def part_users(table: pa.Table, day: int, part: int, first: int, user: str,
               user_side: list[str], item: str, seen_max: int,
               active: bool) -> Iterator[tuple]:
    """(user id, UserTally) for rows `first`.. of one part (in file order); outside the
    active days only the seen items count."""
    g = _by_key(table, [user])
    ids, last = g.column(user).to_pylist(), g.column("_i_max")
    seen: dict = {u: {} for u in ids}
    if seen_max > 0:
        pairs = _by_key(table, [user, item])
        for u, it, i in zip(pairs.column(user).to_pylist(), pairs.column(item).to_pylist(),
                            pairs.column("_i_max").to_pylist()):
            seen[u][str(it)] = (day, part, first + i)
    values = _values(table, last, user_side) if active else [None] * len(ids)
    for u, i, n, v in zip(ids, last.to_pylist(), g.column("_i_count").to_pylist(), values):
        tally = UserTally((day, part, first + i) if active else None, v,
                          n if active else 0, seen[u])
        yield u, trim(tally, seen_max)


def trim(tally: UserTally, seen_max: int) -> UserTally:
    """At most `seen_max` seen items: the ones met last."""
    if len(tally.seen) <= seen_max:
        return tally
    newest = sorted(tally.seen.items(), key=lambda kv: (kv[1], kv[0]))[-seen_max:]
    return tally._replace(seen=dict(newest))


def merge_users(a: UserTally | None, b: UserTally | None, seen_max: int) -> UserTally | None:
    if a is None or b is None:
        return a if b is None else b
    latest = max((t for t in (a, b) if t.where is not None), key=lambda t: t.where,
                 default=a)
    seen = dict(a.seen)
    for it, where in b.seen.items():
        if it not in seen or where > seen[it]:
            seen[it] = where
    return trim(UserTally(latest.where, latest.values, a.rows + b.rows, seen), seen_max)


def part_items(table: pa.Table, day: int, part: int, first: int, item: str,
               item_side: list[str], label: str) -> Iterator[tuple]:
    """(item id, ItemTally) for every item of rows `first`.. of one part."""
    g = _by_key(table, [item], label)
    last = g.column("_i_max")
    for it, i, n, clicks, v in zip(g.column(item).to_pylist(), last.to_pylist(),
                                   g.column("_i_count").to_pylist(),
                                   g.column("_y_sum").to_pylist(),
                                   _values(table, last, item_side)):
        yield it, ItemTally((day, part, first + i), v, clicks, n)


def merge_items(a: ItemTally | None, b: ItemTally | None) -> ItemTally | None:
    if a is None or b is None:
        return a if b is None else b
    latest = a if a.where > b.where else b
    return latest._replace(clicks=a.clicks + b.clicks, impressions=a.impressions + b.impressions)
