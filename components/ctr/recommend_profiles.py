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

import pyarrow as pa

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


def _last_rows(keys: list) -> dict:
    """key -> index of its last row."""
    return {k: i for i, k in enumerate(keys)}


def part_users(table: pa.Table, day: int, part: int, first: int, user: str,
               user_side: list[str], item: str, seen_max: int,
               active: bool) -> Iterator[tuple]:
    """(user id, UserTally) for rows `first`.. of one part (in file order); outside the
    active days only the seen items count."""
    users = table.column(user).to_pylist()
    last = _last_rows(users)
    counts: dict = {}
    for u in users:
        counts[u] = counts.get(u, 0) + 1
    seen: dict = {u: {} for u in last}
    if seen_max > 0:
        for i, (u, it) in enumerate(zip(users, table.column(item).to_pylist())):
            seen[u][str(it)] = (day, part, first + i)
    values = {}
    if active:
        rows = table.take(pa.array(list(last.values()), pa.int64())).select(user_side)
        values = dict(zip(last, (tuple(r.values()) for r in rows.to_pylist())))
    for u, i in last.items():
        tally = UserTally((day, part, first + i) if active else None, values.get(u),
                          counts[u] if active else 0, seen[u])
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
    items = table.column(item).to_pylist()
    last = _last_rows(items)
    clicks: dict = {}
    shown: dict = {}
    for it, y in zip(items, table.column(label).to_pylist()):
        shown[it] = shown.get(it, 0) + 1
        clicks[it] = clicks.get(it, 0) + (1 if y and y == y else 0)   # NaN: no click
    rows = table.take(pa.array(list(last.values()), pa.int64())).select(item_side)
    for (it, i), vals in zip(last.items(), rows.to_pylist()):
        yield it, ItemTally((day, part, first + i), tuple(vals.values()), clicks[it], shown[it])


def merge_items(a: ItemTally | None, b: ItemTally | None) -> ItemTally | None:
    if a is None or b is None:
        return a if b is None else b
    latest = a if a.where > b.where else b
    return latest._replace(clicks=a.clicks + b.clicks, impressions=a.impressions + b.impressions)
