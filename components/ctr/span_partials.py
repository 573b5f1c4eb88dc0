"""Mergeable statistics of a raw CTR span, in memory bounded by configuration, never by
the span's size (design rule 24): what `beam_jobs.span_stats` folds every Arrow record
batch into and combines across workers, and the stats document it finalizes.

A batch becomes a `Partial` (`batch_partial`): per column its rows, nulls, non-finite
numbers and Arrow types; numeric moments merged exactly (Chan et al.) and a bottom-k
sample of values for quantiles; categorical top values (Misra-Gries) and a KMV
distinct-count sketch; per part a row count, an order-free fingerprint of example-id
hashes and the schema; a bottom-k reservoir sample of rows. `Partial.merge` is
associative and commutative, so any runner may combine them in any order.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retrain.common.record_limits import RecordLimits
from components.ctr import features as F
from components.ctr.kmv import hash_values as _hash_values, kmv_estimate, kmv_merge as _kmv_merge

PRIO = "__priority"
STATS_VERSION = 1
REJECT_EXAMPLES = 5   # rejected records kept in the stats, to name in a failure

# Columns summarised as categories (top values + distinct count) for the generated logs:
# the string columns and the small-integer identity features. The label gets a top-k too
# (its domain). Other logs: `column_roles(feature config)`.
TOPK_COLUMNS = ("user_id", "item_id", "category_id", "device", *F.IDENTITY_FEATURES,
                F.LABEL_KEY)
DISTINCT_COLUMNS = (*F.RAW_STRING_COLUMNS, *F.IDENTITY_FEATURES, F.LABEL_KEY)


def column_roles(fc) -> dict:
    """StatsConfig fields for a feature config: single-valued categorical and text
    columns and the label get top values and distinct counts; the example id a distinct
    count (duplicates, overlap with the previous span); lists only counts and nulls."""
    kinds = fc.input_columns()
    cats = [f.name for f in fc.features if f.kind in ("categorical", "text")]
    return {"topk_columns": (*cats, fc.label),
            "distinct_columns": (fc.example_id, *cats, fc.label),
            "example_id": fc.example_id, "label": fc.label,
            "columns": (*kinds.items(), *fc.validation.extra_columns),
            "limits": fc.validation.record_limits(), "derived_id": fc.derived_id}


@dataclasses.dataclass(frozen=True)
class StatsConfig:
    topk_columns: tuple = TOPK_COLUMNS
    distinct_columns: tuple = DISTINCT_COLUMNS
    example_id: str = F.EXAMPLE_ID_KEY
    label: str = F.LABEL_KEY
    columns: tuple = ()   # (name, kind) read from JSONL parts; () = generated logs' config
    limits: RecordLimits = RecordLimits()   # what one part and one record may hold
    derived_id: bool = False   # no id column: `example_id` is derived from the row's columns
    sample_rows: int = 10_000  # reservoir sample of raw rows
    quantile_sample: int = 8192  # values kept per numeric column for quantiles
    kmv_k: int = 16_384  # distinct-count sketch size (relative error about 1/sqrt(k))
    topk_capacity: int = 1000  # Misra-Gries counters per categorical column
    top_k: int = 50  # top values reported per categorical column
    batch_size: int = 65_536  # rows per Arrow record batch read
    seed: int = 0


# --------------------------------------------------------------------------- partials


def _mg_reduce(counts: dict, capacity: int) -> tuple[dict, int]:
    """Misra-Gries reduction to `capacity` counters; returns (counters, decrement)."""
    if len(counts) <= capacity:
        return counts, 0
    c = np.fromiter(counts.values(), dtype=np.int64, count=len(counts))
    dec = int(-np.partition(-c, capacity)[capacity])  # the (capacity+1)-th largest count
    return {v: n - dec for v, n in counts.items() if n > dec}, dec


def _bottom(prio: np.ndarray, k: int) -> np.ndarray:
    if len(prio) <= k:
        return np.arange(len(prio))
    return np.argpartition(prio, k - 1)[:k]


def _unify(a: pa.Table, b: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Same columns and types on both sides; a type clash becomes a string column, a
    missing column nulls (the sample must still concatenate when parts disagree)."""
    names = list(dict.fromkeys([*a.column_names, *b.column_names]))
    types = {}
    for n in names:
        ta = a.schema.field(n).type if n in a.column_names else None
        tb = b.schema.field(n).type if n in b.column_names else None
        if ta is not None and tb is not None and ta != tb:
            if _type_name(ta) == _type_name(tb):
                types[n] = pa.string() if _type_name(ta) == "string" else ta
            else:
                types[n] = pa.string()
        else:
            types[n] = ta if ta is not None else tb

    def conform(t: pa.Table) -> pa.Table:
        cols = []
        for n in names:
            if n in t.column_names:
                col = t.column(n)
                cols.append(col if col.type == types[n] else col.cast(types[n]))
            else:
                cols.append(pa.nulls(t.num_rows, types[n]))
        return pa.table(cols, names=names)

    return conform(a), conform(b)


def _type_name(t: pa.DataType) -> str:
    name = str(t)
    return {"large_string": "string", "string_view": "string", "large_binary": "binary",
            "binary_view": "binary"}.get(name, name)


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


class _Col:
    """Partial statistics of one column."""

    __slots__ = ("types", "rows", "nulls", "nonfinite", "n", "mean", "m2", "min", "max",
                 "q_prio", "q_vals", "top", "top_dec", "kmv")

    def __init__(self):
        self.types: set[str] = set()
        self.rows = self.nulls = self.nonfinite = 0
        self.n, self.mean, self.m2 = 0, 0.0, 0.0
        self.min = self.max = None
        self.q_prio = np.empty(0)
        self.q_vals = np.empty(0)
        self.top: dict | None = None
        self.top_dec = 0
        self.kmv: np.ndarray | None = None

    def merge(self, o: "_Col", cfg: StatsConfig) -> "_Col":
        self.types |= o.types
        self.rows += o.rows
        self.nulls += o.nulls
        self.nonfinite += o.nonfinite
        if o.n:
            if self.n == 0:
                self.n, self.mean, self.m2 = o.n, o.mean, o.m2
            else:  # Chan et al.: parallel mean / M2
                n = self.n + o.n
                delta = o.mean - self.mean
                self.mean += delta * o.n / n
                self.m2 += o.m2 + delta * delta * self.n * o.n / n
                self.n = n
            self.min = o.min if self.min is None else min(self.min, o.min)
            self.max = o.max if self.max is None else max(self.max, o.max)
            prio = np.concatenate([self.q_prio, o.q_prio])
            vals = np.concatenate([self.q_vals, o.q_vals])
            keep = _bottom(prio, cfg.quantile_sample)
            self.q_prio, self.q_vals = prio[keep], vals[keep]
        if o.top is not None:
            merged = dict(self.top or {})
            for v, c in o.top.items():
                merged[v] = merged.get(v, 0) + c
            self.top, dec = _mg_reduce(merged, cfg.topk_capacity)
            self.top_dec += o.top_dec + dec
        if o.kmv is not None:
            self.kmv = o.kmv if self.kmv is None else _kmv_merge(self.kmv, o.kmv, cfg.kmv_k)
        return self


class Partial:
    """Mergeable statistics of any number of record batches (the CombineFn accumulator)."""

    def __init__(self):
        self.rows = 0
        self.rejected: dict[str, int] = {}   # records the reader could not use, by reason
        self.reject_examples: list[dict] = []
        self.cols: dict[str, _Col] = {}
        self.parts: dict[str, dict] = {}  # file -> rows, fingerprint, schema
        self.sample: pa.Table | None = None

    def merge(self, o: "Partial", cfg: StatsConfig) -> "Partial":
        self.rows += o.rows
        for reason, n in o.rejected.items():
            self.rejected[reason] = self.rejected.get(reason, 0) + n
        # The first ones in the files, whatever order the runner merged the batches in.
        self.reject_examples = sorted(self.reject_examples + o.reject_examples,
                                      key=_reject_order)[:REJECT_EXAMPLES]
        for name, col in o.cols.items():
            self.cols.setdefault(name, _Col()).merge(col, cfg)
        for f, p in o.parts.items():
            mine = self.parts.setdefault(f, {"rows": 0, "fingerprint": 0, "schema": {}})
            mine["rows"] += p["rows"]
            mine["fingerprint"] = (mine["fingerprint"] + p["fingerprint"]) % 2 ** 64
            mine["schema"].update(p["schema"])
        if o.sample is not None and o.sample.num_rows:
            if self.sample is None or not self.sample.num_rows:
                self.sample = o.sample
            else:
                a, b = _unify(self.sample, o.sample)
                both = pa.concat_tables([a, b])
                keep = _bottom(both.column(PRIO).to_numpy(), cfg.sample_rows)
                self.sample = both.take(pa.array(np.sort(keep)))
        return self


def _reject_order(example: dict) -> tuple:
    return example["source"], example["line"]


def batch_partial(batch: pa.RecordBatch, part: str, key: str, cfg: StatsConfig) -> Partial:
    """Statistics of one record batch. `key` seeds the sample priorities so a rerun on
    the same data draws the same sample."""
    p = Partial()
    n = batch.num_rows
    p.rows = n
    digest = hashlib.blake2b(f"{cfg.seed}:{key}".encode(), digest_size=8).digest()
    rng = np.random.default_rng(int.from_bytes(digest, "little"))
    prio = rng.random(n)
    fingerprint = 0
    schema = {}
    for name, arr in zip(batch.schema.names, batch.columns):
        c = _Col()
        tname = _type_name(arr.type)
        schema[name] = tname
        c.types.add(tname)
        c.rows = n
        valid = pc.is_valid(arr)
        if pa.types.is_floating(arr.type):
            valid = pc.and_(valid, pc.invert(pc.is_nan(arr)))
            valid = pc.fill_null(valid, False)
            inf = pc.fill_null(pc.is_inf(arr), False)
            c.nonfinite = int(pc.sum(inf).as_py() or 0)
        c.nulls = n - int(pc.sum(valid).as_py() or 0) - c.nonfinite
        if c.nonfinite:   # +-inf is neither a null nor a value the moments can use
            valid = pc.and_(valid, pc.invert(inf))
        if _is_numeric(arr.type) and c.nulls < n:
            mask = valid.to_numpy(zero_copy_only=False)
            vals = arr.to_numpy(zero_copy_only=False)[mask].astype(np.float64)
            c.n = len(vals)
            c.mean = float(vals.mean())
            c.m2 = float(((vals - c.mean) ** 2).sum())
            c.min, c.max = float(vals.min()), float(vals.max())
            vprio = prio[mask]
            keep = _bottom(vprio, cfg.quantile_sample)
            c.q_prio, c.q_vals = vprio[keep], vals[keep]
        if name in cfg.topk_columns and c.nulls < n:
            vc = pc.value_counts(arr.drop_null())
            values = vc.field("values").to_pylist()
            counts = vc.field("counts").to_pylist()
            c.top, c.top_dec = _mg_reduce(dict(zip(values, counts)), cfg.topk_capacity)
        if name in cfg.distinct_columns:
            h = _hash_values(arr)
            c.kmv = np.unique(h)[:cfg.kmv_k]
            if name == cfg.example_id:
                fingerprint = int(h.sum(dtype=np.uint64))
        p.cols[name] = c
    p.parts[part] = {"rows": n, "fingerprint": fingerprint, "schema": schema}
    keep = np.sort(_bottom(prio, cfg.sample_rows))
    sample = pa.Table.from_batches([batch]).take(pa.array(keep))
    p.sample = sample.append_column(PRIO, pa.array(prio[keep]))
    return p


def finalize(acc: Partial, cfg: StatsConfig, span_dir: str) -> tuple[dict, pa.Table]:
    """The stats document (JSON-ready) and the sample table."""
    columns = {}
    for name, c in acc.cols.items():
        d = {"types": sorted(c.types), "count": c.rows - c.nulls - c.nonfinite,
             "nulls": c.nulls, "null_rate": c.nulls / c.rows if c.rows else None,
             "nonfinite": c.nonfinite}
        if c.n:
            q = np.linspace(0, 1, 101)
            d["numeric"] = {
                "count": c.n, "min": c.min, "max": c.max, "mean": c.mean,
                "std": math.sqrt(c.m2 / c.n) if c.n else None,
                "quantiles": np.quantile(np.sort(c.q_vals), q).tolist(),
                "quantile_sample": int(len(c.q_vals)),
            }
        if c.top is not None:
            total = c.rows - c.nulls
            top = sorted(c.top.items(), key=lambda kv: (-kv[1], str(kv[0])))
            d["top"] = [[v, int(n), n / total if total else None] for v, n in top[:cfg.top_k]]
            d["topk_exact"] = c.top_dec == 0
            d["topk_error_bound"] = int(c.top_dec)
            # Low-cardinality domain: every distinct value when the summary is exact.
            d["domain"] = ([v for v, _ in top] if c.top_dec == 0 and len(top) <= 100
                           else None)
        if c.kmv is not None:
            est, exact = kmv_estimate(c.kmv, cfg.kmv_k)
            d["distinct"] = est
            d["distinct_exact"] = exact
        columns[name] = d
    label = columns.get(cfg.label, {}).get("numeric")
    parts = [{"file": f, "rows": p["rows"], "fingerprint": f"{p['fingerprint']:016x}",
              "schema": p["schema"]} for f, p in sorted(acc.parts.items())]
    span_fp = sum(p["fingerprint"] for p in acc.parts.values()) % 2 ** 64
    ex = acc.cols.get(cfg.example_id)
    stats = {
        "stats_version": STATS_VERSION,
        "span_dir": str(span_dir),
        "span": Path(span_dir).name,
        "rows": acc.rows,
        "rejected_rows": sum(acc.rejected.values()),
        "rejected_by_reason": dict(sorted(acc.rejected.items())),
        "rejected_examples": acc.reject_examples,
        "label_rate": label["mean"] if label else None,
        "columns": columns,
        "parts": parts,
        "fingerprint": f"{span_fp:016x}",
        "example_id_kmv": ([f"{int(h):016x}" for h in ex.kmv] if ex is not None
                           and ex.kmv is not None else []),
        "config": dataclasses.asdict(cfg),
    }
    sample = acc.sample if acc.sample is not None else pa.table({})
    if PRIO in sample.column_names:
        sample = sample.drop_columns([PRIO])
    stats["sample_rows"] = sample.num_rows
    return stats, sample
