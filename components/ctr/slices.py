"""Which segment each CTR eval row belongs to, for per-slice metrics and slice guards.

A model can improve on average while getting worse for one device or category; the gate
can only see that if evaluation reports metrics per segment. Every slice is computed
from the raw eval rows alone, so candidate and baseline are sliced identically and no
other data (training window, user history store) has to be read:

- `category`: the `top_categories` categories with the most eval rows, the rest "other";
- `device`: the raw device string ("unknown" if missing);
- `user_type`: "returning" if `user_past_clicks` > 0, "new" if it is 0, "unknown" if it
  is missing. Past clicks stand in for "seen before": a user with clicks has history;
  "present in the training window" would need the window's rows and is not used.

Those three are the generated logs' slices. For other logs, the feature config's `slices`
names raw columns; each becomes a slice of its `top_categories` most frequent values plus
"other" (the same rule as `category`).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

OTHER = "other"
UNKNOWN = "unknown"
SLICES = ("category", "device", "user_type")


def _category(table: pa.Table, top_categories: int, column: str = "category_id") -> np.ndarray:
    values = np.asarray(table.column(column).fill_null(UNKNOWN).to_pylist(), dtype=object)
    uniq, counts = np.unique(values.astype(str), return_counts=True)
    ranked = sorted(range(uniq.size), key=lambda k: (-counts[k], uniq[k]))
    top = {str(uniq[k]) for k in ranked[:max(int(top_categories), 0)]}
    return np.array([v if v in top else OTHER for v in values.astype(str)], dtype=object)


def _device(table: pa.Table) -> np.ndarray:
    return np.asarray(table.column("device").fill_null(UNKNOWN).to_pylist(), dtype=object)


def _user_type(table: pa.Table) -> np.ndarray:
    clicks = table.column("user_past_clicks")
    returning = pc.fill_null(pc.greater(clicks, 0), False).to_numpy(zero_copy_only=False)
    missing = pc.is_null(clicks).to_numpy(zero_copy_only=False)
    return np.where(missing, UNKNOWN, np.where(returning, "returning", "new")).astype(object)


def assign(table: pa.Table, slices: tuple[str, ...] | list[str] = SLICES,
           top_categories: int = 10) -> dict[str, np.ndarray]:
    """{slice name: one value per row}, the input `components.metrics.slice_metrics` takes."""
    unknown = sorted(set(slices) - set(SLICES) - set(table.column_names))
    if unknown:
        raise ValueError(f"unknown slice(s) {unknown}; known: {list(SLICES)} or a raw "
                         f"column of the eval rows {table.column_names}")
    makers = {"category": lambda: _category(table, top_categories),
              "device": lambda: _device(table), "user_type": lambda: _user_type(table)}
    return {name: (makers[name]() if name in makers else
                   _category(table, top_categories, column=name)) for name in slices}
