"""Statistics of raw spans in a single Beam pass, in bounded memory, for validation.

A day of logs can be far larger than a worker's memory, so validation never loads the
span: this job streams every Parquet row group as Arrow record batches, turns each batch
into a small partial aggregate with pyarrow/numpy, and merges the partials in a
CombineFn (the partials and their merge: `components.ctr.span_partials`). What it
keeps is bounded by configuration, not by the span's size:

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
import json
import logging
import shutil
import sys
import time
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import SetupOptions

from beam_jobs import runner
from retrain.common import rawfiles
from retrain.common.atomic import check_replaceable
from retrain.common.record_limits import RecordLimits, parquet_bytes
from components.ctr import features as F
from components.ctr.rawformat import JSONL_SUFFIXES, PART_SUFFIXES, RawLayout, default_layout
from components.ctr.rawread import id_as_text, read_jsonl_batches, with_derived_id
# The mergeable statistics this job combines (importable from here, as before).
from components.ctr.span_partials import (DISTINCT_COLUMNS, PRIO, REJECT_EXAMPLES,  # noqa: F401
                                          STATS_VERSION, TOPK_COLUMNS, Partial, StatsConfig,
                                          batch_partial, column_roles, finalize)

log = logging.getLogger("retrain.span_stats")

STATS_FILE = "stats.json"
SAMPLE_FILE = "sample.parquet"


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
        check_replaceable(out)      # a failed read removes it: only what retrain wrote
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
