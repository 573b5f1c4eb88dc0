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


# With older days in the window: which day a held-out row came from.
SPAN_SLICE, THIS_SPAN, EARLIER_DAYS = "span", "span", "earlier days"
# Slices whose values are grouped into the `top_categories` most frequent plus OTHER;
# the others (device, user_type, ...) keep every value.
FIXED = ("device", "user_type")


def _strings(table: pa.Table, column: str) -> np.ndarray:
    return np.asarray(table.column(column).fill_null(UNKNOWN).to_pylist(),
                      dtype=object).astype(str).astype(object)


def _user_type(table: pa.Table) -> np.ndarray:
    clicks = table.column("user_past_clicks")
    returning = pc.fill_null(pc.greater(clicks, 0), False).to_numpy(zero_copy_only=False)
    missing = pc.is_null(clicks).to_numpy(zero_copy_only=False)
    return np.where(missing, UNKNOWN, np.where(returning, "returning", "new")).astype(object)


def _check(table_columns, slices) -> None:
    unknown = sorted(set(slices) - set(SLICES) - set(table_columns))
    if unknown:
        raise ValueError(f"unknown slice(s) {unknown}; known: {list(SLICES)} or a raw "
                         f"column of the eval rows {list(table_columns)}")


def raw_values(table: pa.Table, slices) -> dict[str, np.ndarray]:
    """{slice name: each row's value before grouping} (a batch at a time, mergeable)."""
    _check(table.column_names, slices)
    out = {}
    for name in slices:
        if name == "user_type":
            out[name] = _user_type(table)
        else:
            out[name] = _strings(table, "category_id" if name == "category" else name)
    return out


def top_values(counts: dict[str, int], top_categories: int) -> set[str]:
    """The `top_categories` values with the most rows (ties by name)."""
    ranked = sorted(counts, key=lambda v: (-counts[v], v))
    return set(ranked[:max(int(top_categories), 0)])


def grouped(name: str, values: np.ndarray, top: set[str] | None) -> np.ndarray:
    """A slice's values with those outside `top` as OTHER (FIXED slices: unchanged)."""
    if name in FIXED or top is None:
        return values
    return np.array([v if v in top else OTHER for v in values], dtype=object)


def assign(table: pa.Table, slices: tuple[str, ...] | list[str] = SLICES,
           top_categories: int = 10) -> dict[str, np.ndarray]:
    """{slice name: one value per row}, the input `components.metrics.slice_metrics` takes."""
    out = {}
    for name, values in raw_values(table, slices).items():
        top = None
        if name not in FIXED:
            uniq, counts = np.unique(values.astype(str), return_counts=True)
            top = top_values(dict(zip(uniq.tolist(), counts.tolist())), top_categories)
        out[name] = grouped(name, values, top)
    return out
