"""What the trainer needs to know about its rows before the first step, counted while the
preprocessing job transforms them: rows, clicks and occurrences per transformed id of
every categorical field (the priors, the intercept, the popularity table), per split.

The trainer used to make its own pass over the window's shards for these (one process:
~57 h at the seed's 7e10 training rows); the job already touches every row in parallel,
so it folds each transformed batch into these mergeable sums (`fold`, `merge`) and
writes them beside the shards (`write`). Memory is the tables' sizes, never the rows.
Numpy only; the file is `.npz` without pickles.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from components.ctr.formats import SPLIT_STATS_FILE


@dataclasses.dataclass
class SplitStats:
    rows: int
    clicks: float
    counts: dict            # {field: occurrences per transformed id}

    @property
    def click_rate(self) -> float:
        return self.clicks / self.rows if self.rows else 0.0


def empty(sizes: dict[str, int]) -> SplitStats:
    return SplitStats(0, 0.0, {k: np.zeros(n, dtype=np.int64) for k, n in sizes.items()})


def column_values(column) -> np.ndarray:
    """A transformed column's values, flat (list columns unnested), as int64."""
    import pyarrow as pa
    import pyarrow.compute as pc
    while pa.types.is_list(column.type) or pa.types.is_large_list(column.type) or \
            pa.types.is_fixed_size_list(column.type):
        column = pc.list_flatten(column)
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def fold(stats: SplitStats, batch, label: str, columns: dict[str, str]) -> SplitStats:
    """Add one transformed RecordBatch; `columns` maps each field to its transformed
    column. Padding (-1) and out-of-table ids do not count."""
    stats.rows += batch.num_rows
    stats.clicks += float(column_values(batch.column(label)).sum())
    for field, column in columns.items():
        ids = column_values(batch.column(column))
        table = stats.counts[field]
        ids = ids[(ids >= 0) & (ids < table.size)]
        table += np.bincount(ids, minlength=table.size)
    return stats


def merge(a: SplitStats, b: SplitStats) -> SplitStats:
    a.rows += b.rows
    a.clicks += b.clicks
    for k, v in b.counts.items():
        a.counts[k] = a.counts[k] + v if k in a.counts else v.copy()
    return a


def write(path, splits: dict[str, SplitStats]) -> None:
    """Every split's sums into one `.npz` at `path` (or a binary file object); the caller
    makes the write atomic."""
    arrays: dict[str, np.ndarray] = {"splits": np.array(list(splits), dtype=str)}
    for i, s in enumerate(splits.values()):
        arrays[f"s{i}.rows_clicks"] = np.array([s.rows, s.clicks], dtype=np.float64)
        arrays[f"s{i}.fields"] = np.array(list(s.counts), dtype=str)
        for j, v in enumerate(s.counts.values()):
            arrays[f"s{i}.c{j}"] = v
    if hasattr(path, "write"):
        np.savez(path, **arrays)
        return
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def read(preprocess_dir: str | Path) -> dict[str, SplitStats]:
    """{split: SplitStats} the job wrote; FileNotFoundError names the file when missing
    (an output of the job before it counted: preprocess again)."""
    path = Path(preprocess_dir) / SPLIT_STATS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no split statistics {path}: the preprocessing output "
                                "predates them; run preprocessing again")
    out = {}
    with np.load(path, allow_pickle=False) as z:
        for i, name in enumerate(z["splits"].tolist()):
            rows, clicks = z[f"s{i}.rows_clicks"].tolist()
            counts = {field: z[f"s{i}.c{j}"].astype(np.int64)
                      for j, field in enumerate(z[f"s{i}.fields"].tolist())}
            out[name] = SplitStats(int(rows), float(clicks), counts)
    return out
