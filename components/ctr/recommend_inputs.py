"""What the recommendation job scores: the users active in the last N days and a pool of
candidate items, both read from the raw click logs with the model's own feature config.

Why from raw logs: a user's profile and an item's columns are exactly what the model's
serving signature takes (the latest values seen), read by the same readers as
preprocessing, so a column the model was trained on can never be missing or typed
differently at scoring time.

The users and the items' table are built by the Beam job `beam_jobs.recommend_profiles`
(no process holds the window); here is what the driver does around it:

- `delivered_days`: the window's days that have their `_SUCCESS` marker;
- `sample_rows`: a bounded sample of the newest rows, which the column roles are
  derived from (`recommend_roles.sides`);
- `pool`: the candidate pool from the items' table, `window` (every item seen in the
  window, the most shown first, at most `pool_size` when it is > 0) or `top_per_category`
  (the `pool_size` most clicked items of each category), with their latest item-side
  columns and their window's clicks and impressions (the popularity baseline of the
  quality check reads them);
- `shard_of`: users are split into shards by a stable hash of the user id (CRC-32 of
  its text), so a rerun puts every user in the same shard.

With `exclude_seen`, each user carries the items of their rows (`SEEN`: in the window, or
in the longer `seen_days`; at most `seen_max`, the newest), which their list leaves out
(a rating log, where each item is rated once).
"""
from __future__ import annotations

import datetime as dt
import logging
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa

from retrain.common.paths import partition

log = logging.getLogger("retrain.recommend")

POOLS = ("window", "top_per_category")
CLICKS, IMPRESSIONS, SEEN = "_clicks", "_impressions", "_seen"
# Rows the column roles are derived from (recommend_roles.sides): enough for a per-user and
# per-item dispersion, read whatever the window's size.
ROLE_SAMPLE_ROWS = 200_000


def delivered_days(raw_root: str, span: str, days: int) -> list[str]:
    """The delivered days (with their `_SUCCESS` marker) of the `days` ending at `span`,
    oldest first; a day without it is left out and logged."""
    from retrain.common.spans import window

    read = []
    for day in (d.isoformat() for d in window(dt.date.fromisoformat(span), days)):
        folder = Path(partition(raw_root, day))
        if (folder / "_SUCCESS").is_file():
            read.append(day)
        else:
            log.info("window day %s not delivered (no %s/_SUCCESS): left out", day, folder)
    return read


def sample_rows(raw_root: str, days: list[str], cfg, limit: int = ROLE_SAMPLE_ROWS) -> pa.Table:
    """At most `limit` accepted rows, the newest days first, each read from its first
    part on (what the column roles are derived from: a bounded read, whatever the window's
    size); in time order."""
    from components.ctr import rawdata

    tables, got = [], 0
    for day in reversed(days):
        if got >= limit:
            break
        rows = rawdata.first_rows(partition(raw_root, day), limit - got, cfg)
        if rows.num_rows:
            tables.insert(0, rows)
            got += rows.num_rows
    if not tables:
        raise FileNotFoundError(f"no accepted row in {raw_root} on {days}: nothing to "
                                f"recommend from")
    return pa.concat_tables(tables)


def pool(table: pa.Table, item_column: str, pool: str, pool_size: int,
         category_column: str | None = None) -> pa.Table:
    """The candidate pool from the items' table (`beam_jobs.recommend_profiles`: latest
    item-side columns, window clicks and impressions): `window`, the most shown first (at
    most `pool_size` when > 0), or `top_per_category`."""
    if pool not in POOLS:
        raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")
    frame = table.to_pandas().sort_values([IMPRESSIONS, CLICKS, item_column],
                                          ascending=[False, False, True])
    if pool == "top_per_category":
        if category_column not in frame.columns:
            raise ValueError(f"pool top_per_category needs the category column "
                             f"{category_column!r} among the item columns "
                             f"{[c for c in table.column_names if c != item_column]}")
        kind = table.schema.field(category_column).type
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            raise ValueError(f"category column {category_column!r} holds lists; pool "
                             f"top_per_category needs one category per item (or use pool "
                             f"window with pool_size)")
        frame = (frame.sort_values([CLICKS, IMPRESSIONS, item_column],
                                   ascending=[False, False, True])
                 .groupby(category_column, sort=False).head(max(pool_size, 1)))
    elif pool_size > 0:
        frame = frame.head(pool_size)
    return pa.Table.from_pandas(frame, schema=table.schema, preserve_index=False)


def shard_of(user_ids: pa.Array | list, num_shards: int) -> np.ndarray:
    """Stable shard 0..num_shards-1 of each user id: CRC-32 of its text, the same in every
    process and run (Python's own hash of a string is salted per process)."""
    return np.array([zlib.crc32(str(u).encode()) % num_shards for u in user_ids],
                    dtype=np.int64)
