"""Statistics of raw spans in a single Beam pass, in bounded memory, for validation.

A day of logs can be far larger than a worker's memory, so validation never loads the
span: this job streams every Parquet row group as Arrow record batches, turns each batch
into a small partial aggregate with pyarrow/numpy, and merges the partials in a
CombineFn. What it keeps is bounded by configuration, not by the span's size:

- per column: row count, nulls, the Arrow types seen (a type clash between parts shows);
- numeric columns: min / max / mean / std (merged exactly) and approximate quantiles
  from a bottom-k uniform sample of the values (rank error about 1/sqrt(k));
- categorical columns: distinct-count estimate (KMV sketch: the k smallest 64-bit value
  hashes; exact below k distinct values) and top values with counts (Misra-Gries
  mergeable summary: counts are underestimated by at most `topk_error_bound`);
- the label rate, a content fingerprint per part (order-free sum of example-id hashes,
  so a duplicated upload shows), the example-id KMV sketch (overlap with another span);
- a bounded uniform reservoir sample of raw rows (bottom-k by random priority);
- non-finite numbers per column, and JSONL records the reader could not use, by reason,
  with a few examples (a record it cannot parse is not a row of the span).

JSONL fields the feature config does not name come along as text, so the schema rule
sees every column, as it does for Parquet. An integer example id is read as its decimal
text, as preprocessing reads it, so duplicates, overlap and the sample see the ids the
eval split hashes (and the type rule takes it). Parts are checked as preprocessing checks
them (`retrain.common.rawfiles`): none outside the raw root, none empty, none changed
while read.

Writes `<output>/stats.json` and `<output>/sample.parquet` atomically. Several spans
(`--span-dir` repeated: the older days of a window no run has validated yet) share one
pipeline, grouped by span, each written to `<output>/<span folder>/`.

    python -m beam_jobs.span_stats --span-dir var/raw/ctr/dt=2026-11-07 \\
        --output-dir /tmp/stats --runner=DirectRunner
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import math
import shutil
import sys
import time
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import SetupOptions

from beam_jobs import runner
from retrain.common import rawfiles
from retrain.common.record_limits import RecordLimits, parquet_bytes
from components.ctr import features as F
from components.ctr.kmv import kmv_estimate
from components.ctr.rawformat import JSONL_SUFFIXES, PART_SUFFIXES, RawLayout, default_layout
from components.ctr.rawread import id_as_text, read_jsonl_batches, with_derived_id

log = logging.getLogger("retrain.span_stats")

STATS_FILE = "stats.json"
SAMPLE_FILE = "sample.parquet"
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


def _hash_values(arr: pa.Array) -> np.ndarray:
    """Stable 64-bit hashes of non-null values (strings and ints hash the same way
    whatever the Arrow string flavour)."""
    import pandas as pd

    arr = arr.drop_null()
    if pa.types.is_integer(arr.type):
        values = arr.cast(pa.int64()).to_numpy()
    else:
        values = arr.cast(pa.string()).to_numpy(zero_copy_only=False).astype(object)
    return pd.util.hash_array(values, categorize=False).astype(np.uint64)


def _kmv_merge(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    return np.union1d(a, b)[:k]  # sorted unique


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


class SpanStatsFn(beam.CombineFn):
    """Merges per-batch partial aggregates; memory is bounded by StatsConfig."""

    def __init__(self, cfg: StatsConfig):
        self.cfg = cfg

    def create_accumulator(self):
        return Partial()

    def add_input(self, acc, element):
        part, key, batch, rejects = element
        partial = batch_partial(batch, part, key, self.cfg)
        for r in rejects:
            partial.rejected[r["reason"]] = partial.rejected.get(r["reason"], 0) + 1
        partial.reject_examples = [{k: r[k] for k in ("reason", "detail", "source", "line")}
                                   for r in rejects[:REJECT_EXAMPLES]]
        return acc.merge(partial, self.cfg)

    def merge_accumulators(self, accumulators):
        it = iter(accumulators)
        acc = next(it)
        for other in it:
            acc = acc.merge(other, self.cfg)
        return acc

    def extract_output(self, acc):
        return acc


class ReadBatches(beam.DoFn):
    """(span, file, row group) -> (span, (file name, batch key, Arrow record batch,
    rejected records)).
    JSONL parts (row group -1) are read whole with the family's reader, the one
    preprocessing uses (`components.ctr.rawread`): the config's columns (and extra
    columns), every other field as JSON text (so the schema rule sees it), records it
    cannot use counted by reason (the rejected-rate rule)."""

    def __init__(self, batch_size: int, columns: tuple = (), label: str = F.LABEL_KEY,
                 example_id: str = F.EXAMPLE_ID_KEY, limits: RecordLimits = RecordLimits(),
                 derived_id: bool = False):
        self.batch_size = batch_size
        self.columns, self.label, self.example_id = columns, label, example_id
        self.limits, self.derived_id = limits, derived_id
        self.rows = beam.metrics.Metrics.counter("span_stats", "rows_read")

    def process(self, item):
        span, path, row_group = item
        for name, key, batch, rejects in self._batches(path, row_group):
            if self.derived_id:   # ids derived as the reader does (compared within stats only)
                batch = with_derived_id(batch, [k for k, _ in self.columns], self.example_id)
            elif self.example_id in batch.schema.names:
                # the id as preprocessing reads it (integers as text): duplicates, overlap
                # and the sample see the ids the eval split hashes
                i = batch.schema.get_field_index(self.example_id)
                batch = batch.set_column(i, self.example_id, id_as_text(batch.column(i)))
            yield span, (name, key, batch, rejects)

    def _batches(self, path: str, row_group: int):
        if row_group < 0:
            layout = (RawLayout(self.columns, self.label, self.example_id, self.limits)
                      if self.columns else default_layout())
            for i, (batch, rejects) in enumerate(read_jsonl_batches(
                    path, self.batch_size, layout=layout, keep_unknown=True)):
                # JSON numbers are doubles; the reader's float32 is the model's choice.
                batch = pa.RecordBatch.from_arrays(
                    [c.cast(pa.float64()) if pa.types.is_floating(c.type) else c
                     for c in batch.columns], names=batch.schema.names)
                self.rows.inc(batch.num_rows)
                yield Path(path).name, f"{Path(path).name}:{i}", batch, rejects
            return
        try:
            pf = pq.ParquetFile(path)
            for i, batch in enumerate(pf.iter_batches(batch_size=self.batch_size,
                                                      row_groups=[row_group])):
                self.rows.inc(batch.num_rows)
                yield Path(path).name, f"{Path(path).name}:{row_group}:{i}", batch, []
        except (pa.ArrowException, OSError) as e:   # Arrow's messages name no file
            raise rawfiles.CorruptPart(f"{path}: corrupt or unreadable Parquet "
                                       f"({type(e).__name__}: {e})") from e


# --------------------------------------------------------------------------- output


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


def work_items(span_dir: Path, limits: RecordLimits = RecordLimits()) -> list[tuple[str, int]]:
    """(part, row group) for Parquet parts; (part, -1) for JSONL parts, read whole. A
    Parquet part whose footer declares more than `max_part_bytes` is refused here."""
    # Refused before reading: a link out of the root, a FIFO, too many parts, none.
    found = rawfiles.list_parts(span_dir, PART_SUFFIXES, span_dir.parent,
                                max_parts=limits.max_parts_per_day)
    jsonl = [p for p in found if p.name.endswith(JSONL_SUFFIXES)]
    parts = [p for p in found if not p.name.endswith(JSONL_SUFFIXES)]
    items = [(str(p), -1) for p in jsonl]
    for p in parts:
        try:
            meta = pq.ParquetFile(p).metadata
        except (OSError, pa.ArrowException) as e:
            raise rawfiles.CorruptPart(f"cannot read parquet part {p}: {e}") from e
        limits.check_part_bytes(p, parquet_bytes(meta))
        n = meta.num_row_groups
        items += [(str(p), rg) for rg in range(n)]
    return items


class _Write(beam.DoFn):
    def __init__(self, cfg: StatsConfig, spans: dict[str, tuple[str, str]]):
        self.cfg, self.spans = cfg, spans

    def process(self, keyed):
        from retrain.common.atomic import atomic_dir, write_json

        span, acc = keyed
        span_dir, output_dir = self.spans[span]
        stats, sample = finalize(acc, self.cfg, span_dir)
        with atomic_dir(output_dir) as tmp:
            pq.write_table(sample, tmp / SAMPLE_FILE)
            write_json(tmp / STATS_FILE, stats)
        yield stats["rows"]


# --------------------------------------------------------------------------- pipeline


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--span-dir", required=True, action="append",
                   help="folder holding part-*.parquet; repeat it to compute several spans "
                        "in one pass (each span's statistics then go to "
                        "<output-dir>/<span folder name>/)")
    p.add_argument("--output-dir", required=True, help="where stats.json + sample.parquet go")
    d = StatsConfig()
    p.add_argument("--sample-rows", type=int, default=d.sample_rows,
                   help=f"rows in the reservoir sample (default {d.sample_rows})")
    p.add_argument("--quantile-sample", type=int, default=d.quantile_sample,
                   help="values kept per numeric column for quantiles")
    p.add_argument("--kmv-k", type=int, default=d.kmv_k, help="distinct-count sketch size")
    p.add_argument("--topk-capacity", type=int, default=d.topk_capacity,
                   help="Misra-Gries counters per categorical column")
    p.add_argument("--top-k", type=int, default=d.top_k, help="top values reported")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="rows per Arrow batch")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the sample priorities")
    p.add_argument("--feature-config", default="",
                   help="YAML/JSON feature config naming the columns (default: generated logs)")
    return p.parse_known_args(argv)


def build(pipeline, spans: dict[str, tuple[str, str]], cfg: StatsConfig, items=None):
    """`spans`: {span name: (span folder, output folder)}; `items`: (span name, part, row
    group) work items. Batches are grouped by span, so one pipeline start serves any
    number of days (a window's first run validates all its older days in one pass)."""
    if items is None:
        items = [(span, *item) for span, (span_dir, _) in spans.items()
                 for item in work_items(Path(span_dir), cfg.limits)]
    return (pipeline
            | "RowGroups" >> beam.Create(items)
            | "ReadBatches" >> beam.ParDo(ReadBatches(cfg.batch_size, cfg.columns, cfg.label,
                                                          cfg.example_id, cfg.limits,
                                                          cfg.derived_id))
            | "Stats" >> beam.CombinePerKey(SpanStatsFn(cfg))
            | "Write" >> beam.ParDo(_Write(cfg, spans)))


def run(argv: list[str] | None = None, save_main_session: bool = False) -> dict:
    """Compute and write the statistics of one span, or of several in one pass (all or
    nothing: any span's refusal fails the job); return a short summary."""
    args, beam_args = parse_args(argv)
    from components.ctr import feature_config
    roles = column_roles(feature_config.load_for(args.feature_config))
    cfg = StatsConfig(sample_rows=args.sample_rows, quantile_sample=args.quantile_sample,
                      kmv_k=args.kmv_k, topk_capacity=args.topk_capacity, top_k=args.top_k,
                      batch_size=args.batch_size, seed=args.seed, **roles)
    for name, value in dataclasses.asdict(cfg).items():
        if isinstance(value, int) and not isinstance(value, bool) and name != "seed" \
                and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    spans = _outputs(args.span_dir, args.output_dir)
    options = runner.JobOptions(beam_args)
    options.view_as(SetupOptions).save_main_session = save_main_session
    items, inputs = [], {}
    for span, (span_dir, _) in spans.items():
        found = work_items(Path(span_dir), cfg.limits)
        items += [(span, *item) for item in found]
        inputs.update(rawfiles.snapshot(sorted({p for p, _ in found}), Path(span_dir).parent))
    t0 = time.perf_counter()
    log.info("span stats: %d span(s), %d part file(s), %.1f MB, %d work item(s)", len(spans),
             len(inputs), sum(size for size, _ in inputs.values()) / 1e6, len(items))
    with runner.pipeline(options) as pipeline:
        build(pipeline, spans, cfg, items)
    try:
        rawfiles.verify_unchanged(inputs)
    except rawfiles.ChangedWhileRead:   # statistics of a part still being written
        for _, output_dir in spans.values():
            shutil.rmtree(output_dir, ignore_errors=True)
        raise
    _write_empty(spans, cfg)
    seconds = time.perf_counter() - t0
    rows = {span: json.loads((Path(out) / STATS_FILE).read_text())["rows"]
            for span, (_, out) in spans.items()}
    total = sum(rows.values())
    summary = {"spans": {span: {"stats": str(Path(out) / STATS_FILE),
                                "sample": str(Path(out) / SAMPLE_FILE), "rows": rows[span]}
                         for span, (_, out) in spans.items()},
               "rows": total, "seconds": round(seconds, 3), "runner": runner.name(options),
               "rows_per_second": round(total / max(seconds, 1e-9))}
    if len(spans) == 1:
        summary.update(next(iter(summary.pop("spans").values())))
    log.info("span stats: %d span(s), %d rows in %.1fs", len(spans), total, seconds)
    return summary


def _write_empty(spans: dict[str, tuple[str, str]], cfg: StatsConfig) -> None:
    """Statistics of 0 rows for each span the pipeline wrote none for: a span whose parts
    hold no row (a Parquet part with a schema and no row group) gives the combiner no
    input, so no output; its validation must then fail its rules (row count, schema) and
    quarantine it, not look for a file that was never written."""
    from retrain.common.atomic import atomic_dir, write_json

    for span_dir, output_dir in spans.values():
        if (Path(output_dir) / STATS_FILE).is_file():
            continue
        stats, sample = finalize(Partial(), cfg, span_dir)
        log.info("span stats: %s holds no row", Path(span_dir).name)
        with atomic_dir(output_dir) as tmp:
            pq.write_table(sample, tmp / SAMPLE_FILE)
            write_json(tmp / STATS_FILE, stats)


def _outputs(span_dirs: list[str], output_dir: str) -> dict[str, tuple[str, str]]:
    """{span name: (span folder, its output folder)}; refuses an output inside a span."""
    spans: dict[str, tuple[str, str]] = {}
    for given in span_dirs:
        span_dir = Path(given)
        if not span_dir.is_dir():
            raise FileNotFoundError(f"span directory does not exist: {span_dir}")
        if span_dir.name in spans:
            raise ValueError(f"--span-dir {span_dir} is given twice (or two spans share "
                             f"the folder name {span_dir.name})")
        out = Path(output_dir) if len(span_dirs) == 1 else Path(output_dir) / span_dir.name
        spans[span_dir.name] = (str(span_dir), str(out))
    for _, out in spans.values():
        for raw in (Path(d).resolve() for d, _ in spans.values()):
            resolved = Path(out).resolve()
            if resolved == raw or resolved in raw.parents:
                raise ValueError(f"--output-dir {output_dir} holds the span {raw}: "
                                 "writing it would replace the raw data")
    return spans


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(json.dumps(run(sys.argv[1:]), indent=2))
