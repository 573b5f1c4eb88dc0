"""KMV (k minimum values) sketches of a span's example ids: how many distinct ids a span
holds, and what share of them another span holds too. Preprocessing sketches the id
fields the same way (`components.ctr.id_coverage`).

The span statistics job (`beam_jobs.span_stats`) builds the sketch (the k smallest 64-bit
id hashes, written as hex in its stats document); validation compares two days' sketches
(the overlap rule). Both read them here, so the job stays a leaf that validation launches
but never reaches into.
"""
from __future__ import annotations

import numpy as np

TWO64 = float(2 ** 64)


def hash_values(arr) -> np.ndarray:
    """Stable 64-bit hashes of an Arrow array's non-null values (strings and ints hash
    the same way whatever the Arrow string flavour)."""
    import pandas as pd
    import pyarrow as pa

    arr = arr.drop_null()
    if pa.types.is_integer(arr.type):
        values = arr.cast(pa.int64()).to_numpy()
    else:
        values = arr.cast(pa.string()).to_numpy(zero_copy_only=False).astype(object)
    return pd.util.hash_array(values, categorize=False).astype(np.uint64)


def kmv_merge(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """The k smallest of two sketches' values: the sketch of the union."""
    return np.union1d(a, b)[:k]  # sorted unique


def kmv_estimate(kmv: np.ndarray, k: int) -> tuple[float, bool]:
    """(distinct-count estimate, exact): exact below k distinct values."""
    if len(kmv) < k:
        return float(len(kmv)), True
    return (k - 1) / (float(kmv[k - 1]) / TWO64), False


def kmv_overlap(a_hex: list[str], b_hex: list[str], k: int) -> float | None:
    """Estimated share of span A's distinct ids also in span B (KMV Jaccard, then
    |A∩B| / |A|). None if either sketch is empty."""
    if not a_hex or not b_hex:
        return None
    a = np.array([int(h, 16) for h in a_hex], dtype=np.uint64)
    b = np.array([int(h, 16) for h in b_hex], dtype=np.uint64)
    union_k = np.union1d(a, b)[:k]
    inter = np.intersect1d(np.intersect1d(a, b), union_k)
    jaccard = len(inter) / len(union_k)
    na, _ = kmv_estimate(a, k)
    nb, _ = kmv_estimate(b, k)
    both = jaccard * (na + nb) / (1 + jaccard)
    return float(both / na) if na else None
