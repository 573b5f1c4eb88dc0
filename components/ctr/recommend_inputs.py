"""What the recommendation job scores: the users active in the last N days and a pool of
candidate items, both read from the raw click logs with the model's own feature config.

Why from raw logs: a user's profile and an item's columns are exactly what the model's
serving signature takes (the latest values seen), read by the same readers as
preprocessing, so a column the model was trained on can never be missing or typed
differently at scoring time.

- users: one row per user seen in the window, their latest user-side columns;
- items: the pool, `window` (every item seen in the window, the most shown first, at most
  `pool_size` when it is > 0) or `top_per_category` (the `pool_size` most clicked items of
  each category), with their latest item-side columns and their window's clicks and
  impressions (the popularity baseline of the quality check reads them);
- with `exclude_seen`, each user also carries the items they were shown in the window
  (`SEEN`), which their list leaves out (a rating log, where each item is rated once);
- `most_active` keeps the users with the most rows in the window (ties by id), the cap a
  run on one machine starts with;
- users are split into shards by a stable hash of the user id (pandas' fixed-key row
  hash), so a rerun puts every user in the same shard.
"""
from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa

from retrain.common.paths import partition

log = logging.getLogger("retrain.recommend")

POOLS = ("window", "top_per_category")
CLICKS, IMPRESSIONS, SEEN = "_clicks", "_impressions", "_seen"


def read_window(raw_root: str, span: str, days: int, cfg) -> tuple[pa.Table, list[str]]:
    """The accepted rows of the delivered days of the window (oldest first) and the days
    read; a day without its `_SUCCESS` marker is left out and logged."""
    from components.ctr import rawdata

    from retrain.common.spans import window

    tables, read = [], []
    for day in (d.isoformat() for d in window(dt.date.fromisoformat(span), days)):
        folder = Path(partition(raw_root, day))
        if not (folder / "_SUCCESS").is_file():
            log.info("window day %s not delivered (no %s/_SUCCESS): left out", day, folder)
            continue
        tables.append(rawdata.read_span(folder, cfg))
        read.append(day)
    if not tables:
        raise FileNotFoundError(f"no delivered day in {raw_root} for the {days} days ending "
                                f"{span}: nothing to recommend from")
    return pa.concat_tables(tables), read


def _latest(frame, key: str, columns: list[str]):
    """The last row of each key (rows are in time order), only `columns`."""
    return frame.drop_duplicates(subset=[key], keep="last")[[key, *columns]]


def users(rows: pa.Table, user_column: str, user_side: list[str],
          seen_column: str | None = None) -> pa.Table:
    """One row per user: the latest user-side values; with `seen_column` (the item id)
    also the distinct items of their window rows, as SEEN."""
    frame = rows.select([user_column, *user_side]).to_pandas()
    latest = _latest(frame, user_column, user_side).sort_values(user_column)
    if seen_column:
        shown = rows.select([user_column, seen_column]).to_pandas().astype(str)
        seen = shown.groupby(user_column)[seen_column].agg(lambda s: sorted(set(s)))
        latest[SEEN] = latest[user_column].astype(str).map(seen)
    return pa.Table.from_pandas(latest, preserve_index=False)


def most_active(users_table: pa.Table, rows: pa.Table, user_column: str,
                limit: int) -> pa.Table:
    """The `limit` users of `users_table` with the most window rows (ties: by id), in the
    table's order; all of them when limit <= 0 or there are no more."""
    if limit <= 0 or users_table.num_rows <= limit:
        return users_table
    import pyarrow.compute as pc

    counts = rows.column(user_column).value_counts()
    ranked = sorted(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()),
                    key=lambda vc: (-vc[1], str(vc[0])))
    keep = pa.array([v for v, _ in ranked[:limit]], type=rows.schema.field(user_column).type)
    return users_table.filter(pc.is_in(users_table.column(user_column), value_set=keep))


def items(rows: pa.Table, label: str, item_column: str, item_side: list[str], pool: str,
          pool_size: int, category_column: str | None = None) -> pa.Table:
    """The candidate pool with the item-side columns and its window counts."""
    if pool not in POOLS:
        raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")
    frame = rows.select(list(dict.fromkeys([item_column, label, *item_side]))).to_pandas()
    counts = frame.groupby(item_column, sort=False)[label].agg(["sum", "size"])
    counts.columns = [CLICKS, IMPRESSIONS]
    table = _latest(frame, item_column, item_side).set_index(item_column).join(counts)
    table = table.reset_index().sort_values([IMPRESSIONS, CLICKS, item_column],
                                            ascending=[False, False, True])
    if pool == "top_per_category":
        if category_column not in table.columns:
            raise ValueError(f"pool top_per_category needs the category column "
                             f"{category_column!r} among the item columns {item_side}")
        kind = rows.schema.field(category_column).type
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            raise ValueError(f"category column {category_column!r} holds lists; pool "
                             f"top_per_category needs one category per item (or use pool "
                             f"window with pool_size)")
        table = (table.sort_values([CLICKS, IMPRESSIONS, item_column],
                                   ascending=[False, False, True])
                 .groupby(category_column, sort=False).head(max(pool_size, 1)))
    elif pool_size > 0:
        table = table.head(pool_size)
    return pa.Table.from_pandas(table.astype({CLICKS: "int64", IMPRESSIONS: "int64"}),
                                preserve_index=False)


def shard_of(user_ids: pa.Array | list, num_shards: int) -> np.ndarray:
    """Stable shard 0..num_shards-1 of each user id."""
    import pandas as pd

    as_text = pd.Series([str(u) for u in user_ids], dtype=object)
    return (pd.util.hash_pandas_object(as_text, index=False).to_numpy()
            % np.uint64(num_shards)).astype(np.int64)


def shards(table: pa.Table, user_column: str, num_shards: int) -> list[pa.Table]:
    """The users split by `shard_of`; empty shards left out."""
    which = shard_of(table.column(user_column).to_pylist(), num_shards)
    return [table.filter(pa.array(which == s)) for s in range(num_shards)
            if (which == s).any()]
