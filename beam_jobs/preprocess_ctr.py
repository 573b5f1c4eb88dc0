"""Preprocess CTR click logs with Beam + tf.Transform.

Reads the daily partitions of a window of spans (`part-*.parquet` and/or
`part-*.jsonl[.gz]`, format chosen by file extension), analyses the training rows
(vocabularies, NaN-aware means/variances), transforms a train split and an eval split,
and writes gzip TFRecord shards (with each split's per-file row counts, so trainer
workers split the rows, not the files), the transform graph and a run summary.

Every day's held-out rows (a stable hash of the example id, `--eval-percent` of them)
are never training rows: the newest span's are the eval split, the older days' are
left out (counted as `rows_held_out`). So a model is never scored on rows it or the
published model trained on, whichever day a backfill evaluates.

Nothing is lost silently: a malformed record (bad JSON, wrong type, null in a required
field, non-UTF-8 bytes, truncated or oversize line) goes to `rejected/` as one JSON line
with its reason, source file, line and byte offset, and is counted in the summary and in
Beam counters; the job checks rows in = train + eval + rejected. A truncated or corrupt
gzip file fails the job with its name: a partial read is never taken for the whole file.
A non-finite number (inf) is a `bad_value` record; a Parquet column whose type is not the
feature config's (text where a number belongs) fails the job: values are never parsed or
truncated into another type. Parts are checked first (`retrain.common.rawfiles`: no
symlink out of the raw root, no empty file) and after the read (a part that changed while
it was read fails the job). One widening: an integer example id is read as its decimal
text (`ID_KIND`), so 42 and "42" are one id everywhere.

Rows travel as Arrow RecordBatches end to end (tf.Transform's TFXIO input), which is
what makes the DirectRunner usable; the same code runs on Flink/Spark/Dataflow by
pipeline options alone:

    python -m beam_jobs.preprocess_ctr --raw-root var/raw/ctr --span 2026-11-07 \
        --window-days 3 --output-dir /tmp/out --runner=DirectRunner
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import time
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import SetupOptions

from beam_jobs import runner
from beam_jobs.metrics import counters as beam_counters
from beam_jobs import arrow_coder  # noqa: F401  (registers the RecordBatch coder)
from components import output_commit
from beam_jobs.tfrecord_shards import WRITERS, WriteTransformedShards
from beam_jobs.tfrecord_writer import DEFAULT_GZIP_LEVEL, ISAL_MAX_LEVEL
from retrain.common import rawfiles, tf_keras_env
from retrain.common.read_ahead import read_ahead
from retrain.common.spans import span_list
from retrain.common.step import drop_known_lines
from retrain.common import paths
from components.ctr import features as F
# The raw format (suffixes, layout, record check, bounds) and its readers are the family's,
# shared with validation and evaluation; this job only splits and transforms their rows.
from components.ctr.rawformat import (DEFAULT_MAX_LINE_BYTES, REJECT_REASONS,
                                      RawLayout, default_layout)
from components.ctr.rawread import held_out_mask, read_batches
from components.ctr import id_coverage
from components.ctr.formats import (EVAL_DIR, ID_COVERAGE_FILE, REJECTED_DIR, SHARD_ROWS_FILE,
                                    SPLIT_STATS_FILE, SUMMARY_FILE, TRAIN_DIR, TRANSFORM_DIR,
                                    VALIDATION_DIR)
# The job's parts that are not Beam jobs (importable from here, as before): the window's
# input parts, the model's batches, the analysis cache's keys, what each split writes.
from components.ctr.analysis_cache import (PARSER_VERSION, REST,  # noqa: F401
                                           AnalysisSet, analysis_sets, commit_analysis_cache,
                                           transform_code_salt)
from components.ctr.model_batch import (_select, arrow_schema,  # noqa: F401
                                        tensor_adapter_config, to_model_batch)
from components.ctr.raw_window import window_files
from components.ctr.transformed_splits import SplitStatsFn, deal, write_split_stats

log = logging.getLogger(__name__)

NAMESPACE = "retrain.preprocess_ctr"
OUT_OF_RANGE = "identity_out_of_range_"      # + field: a counter per identity feature
# Measured (bench/preprocess_window.py): each tf.Transform dataset costs about 50 MB of
# peak memory on the local runner; a 7-day window cached per day part (13 datasets) peaked
# at 1.65 GB where the same rows as one dataset took 1.02 GB, 21 days at 2.4 GB, and past
# about 28 datasets Beam's metrics code hits RecursionError. Beyond this many (a 6-day
# window: one dataset per day), one dataset: memory flat in the window, the cache's
# saving given up.
MAX_CACHED_DATASETS = 6
# Rows per RecordBatch: tf.Transform and the encoder pay a fixed cost per batch; 65,536
# ran 2M rows 1.4x faster than 4,096 (bench/preprocess_ctr.py) for ~0.2 GB more peak.
DEFAULT_BATCH_SIZE = 65536
# The eval split is a small share of the newest day, and the validation slice a small share
# of the window: one shard writer process is enough for each (each holds about 100 MB).
EVAL_WRITERS = 1
SPLITS = (TRAIN_DIR, EVAL_DIR, VALIDATION_DIR)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--raw-root", required=True, help="folder holding dt=YYYY-MM-DD partitions")
    p.add_argument("--span", required=True, type=dt.date.fromisoformat,
                   help="newest day of the window (YYYY-MM-DD); its eval rows form the eval split")
    p.add_argument("--window-days", type=int, default=3, help="days analysed and trained on")
    p.add_argument("--exclude-spans", type=span_list, default=[],
                   help="days of the window to leave out, comma-separated (the DAG passes the "
                        "days whose validation did not let them through)")
    p.add_argument("--eval-percent", type=int, default=20,
                   help="share of the newest span held out for evaluation (stable hash of example_id)")
    p.add_argument("--validation-percent", type=int, default=F.VALIDATION_PERCENT,
                   help="share of the window's training rows set aside as the validation "
                        "slice for early stopping (a second stable hash of example_id; its "
                        "own shards); 0: none")
    p.add_argument("--output-dir", required=True,
                   help="where shards, transform graph and summary go: a folder, or gs:// / "
                        "s3:// (Beam's FileSystems)")
    p.add_argument("--output-commit", choices=output_commit.MODES, default="auto",
                   help="how the output becomes visible: rename (a hidden sibling renamed into "
                        "place; filesystems), marker (an attempt folder named by "
                        "<output-dir>/_SUCCESS, no rename; object stores), auto (default: "
                        "rename for a folder, marker for gs:// / s3://)")
    p.add_argument("--num-shards", type=int, default=0,
                   help="TFRecord shards per split; 0 (default): a file per writer thread "
                        "per bundle, written batch-wise (fastest); N: exactly N files via "
                        "Beam's per-record sink")
    p.add_argument("--gzip-level", type=int, default=DEFAULT_GZIP_LEVEL,
                   help="gzip level of the TFRecord shards: 1 fastest .. 9 smallest "
                        f"(default {DEFAULT_GZIP_LEVEL}; 1-{ISAL_MAX_LEVEL} with ISA-L's "
                        "deflate, above with zlib's); readers need no change")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                   help="rows per Arrow RecordBatch handed to tf.Transform")
    p.add_argument("--feature-config", default="",
                   help="YAML/JSON feature config (columns, types, transforms, label); "
                        "default: the generated demo logs' config")
    p.add_argument("--analysis-cache-dir", default="",
                   help="reuse tf.Transform analysis of days whose input and code did not "
                        "change (fingerprint-keyed); empty: analyse the whole window every run")
    p.add_argument("--max-cached-datasets", type=int, default=MAX_CACHED_DATASETS,
                   help="the cache analyses one tf.Transform dataset per day, and memory "
                        "and pipeline size grow with each; a window needing more than this "
                        f"many is analysed as one dataset instead (default {MAX_CACHED_DATASETS})")
    p.add_argument("--max-line-bytes", type=int, default=DEFAULT_MAX_LINE_BYTES,
                   help="a JSONL line longer than this is rejected as oversize (never held whole)")
    return p.parse_known_args(argv)


def _vocabulary_sizes(cfg, transform_dir: str) -> dict[str, int]:
    """Lines of each id field's vocabulary file (tf.Transform writes one value a line)."""
    out = {}
    for name, (transform, _) in id_coverage.id_fields(cfg).items():
        if transform == "vocabulary":
            with FileSystems.open(FileSystems.join(transform_dir, "transform_fn", "assets",
                                                   name)) as f:
                out[name] = sum(1 for _ in f)
    return out


class ReadSplitBatches(beam.DoFn):
    """Read one input file (format by extension) in batches: good rows split into
    train/eval RecordBatches, malformed records to the `rejected` output as JSON lines."""

    def __init__(self, eval_span: str, eval_percent: int, batch_size: int,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, layout: RawLayout | None = None,
                 validation_percent: int = 0, identity_sizes: dict[str, int] | None = None):
        self._eval_span = eval_span
        # Identity fields' sizes: a value outside [0, size) is clipped by the transform
        # (an id the table cannot hold), so it is counted here, per field.
        self._identity_sizes = dict(identity_sizes or {})
        self._out_of_range = {k: Metrics.counter(NAMESPACE, f"{OUT_OF_RANGE}{k}")
                              for k in self._identity_sizes}
        self._eval_percent = eval_percent
        self._validation_percent = validation_percent
        self._batch_size = batch_size
        self._max_line_bytes = max_line_bytes
        self._layout = layout or default_layout()
        self._rows_in = Metrics.counter(NAMESPACE, "rows_in")
        self._rows = {s: Metrics.counter(NAMESPACE, f"rows_{s}") for s in SPLITS}
        self._rows_rejected = Metrics.counter(NAMESPACE, "rows_rejected")
        self._rows_held_out = Metrics.counter(NAMESPACE, "rows_held_out")
        self._by_reason = {r: Metrics.counter(NAMESPACE, f"rejected_{r}") for r in REJECT_REASONS}
        self._read_us = Metrics.counter(NAMESPACE, "read_us")

    def setup(self):
        self._schema = arrow_schema(self._layout)

    def process(self, path: str):
        is_span = paths.partition_name(self._eval_span) in path
        for rows, rejects, held_out, splits, out_of_range in _timed(
                read_ahead(self._split(path, is_span)), self._read_us):
            self._rows_in.inc(rows)
            for k, n in out_of_range.items():
                self._out_of_range[k].inc(n)
            if rejects:
                self._rows_rejected.inc(len(rejects))
                for r in rejects:
                    self._by_reason[r["reason"]].inc()
                    yield beam.pvalue.TaggedOutput(REJECTED_DIR, json.dumps(r, sort_keys=True))
            self._rows_held_out.inc(held_out)
            for split, model_batch in splits.items():
                self._rows[split].inc(model_batch.num_rows)
                yield beam.pvalue.TaggedOutput(split, model_batch)

    def _split(self, path: str, is_span: bool):
        """Per batch of the file: (records read, rejected records, older-day held-out
        rows, {split: model batch}, {identity field: values out of range}). Runs read
        ahead, in a thread: Beam's counters and outputs stay in `process`."""
        for batch, rejects in read_batches(path, self._batch_size, self._max_line_bytes,
                                           self._layout):
            splits, held_out_rows, out_of_range = {}, 0, {}
            if batch.num_rows:
                for k, size in self._identity_sizes.items():
                    x = batch.column(k).to_numpy(zero_copy_only=False)
                    out_of_range[k] = int(np.count_nonzero((x < 0) | (x >= size)))
                h = F.id_hash64(batch.column(self._layout.example_id))
                held_out = F.held_out_of_hash(h, self._eval_percent)
                if not is_span:   # an older day's eval rows: no model of any day trains on them
                    held_out_rows = int(held_out.sum())
                eval_mask = held_out if is_span else np.zeros(batch.num_rows, dtype=bool)
                validation = ~held_out & F.validation_of_hash(h, self._validation_percent)
                for split, mask in ((TRAIN_DIR, ~held_out & ~validation), (EVAL_DIR, eval_mask),
                                    (VALIDATION_DIR, validation)):
                    n = int(mask.sum())
                    if n:
                        splits[split] = to_model_batch(_select(batch, mask, n, self._schema),
                                                     self._schema)
            yield batch.num_rows + len(rejects), rejects, held_out_rows, splits, out_of_range


def _timed(items, counter_us):
    """Yield from `items`, adding to `counter_us` the microseconds spent waiting for them
    (not what the consumers of each yielded item spend: fused stages run inside yield;
    with `items` read ahead, only what the reader thread did not hide)."""
    it = iter(items)
    while True:
        t = time.perf_counter()
        try:
            item = next(it)
        except StopIteration:
            return
        finally:
            counter_us.inc(round((time.perf_counter() - t) * 1e6))
        yield item


class ReadTrainingRows(beam.DoFn):
    """Read one input file for analysis: its good rows that are not held out (the rows
    every model trains on). Malformed records are skipped here; the transform read
    reports and counts them."""

    def __init__(self, eval_percent: int, batch_size: int,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, layout: RawLayout | None = None):
        self._eval_percent = eval_percent
        self._batch_size = batch_size
        self._max_line_bytes = max_line_bytes
        self._layout = layout or default_layout()
        self._rows = Metrics.counter(NAMESPACE, "rows_analysed")
        self._read_us = Metrics.counter(NAMESPACE, "analysis_read_us")

    def setup(self):
        self._schema = arrow_schema(self._layout)

    def process(self, path: str):
        for model_batch in _timed(read_ahead(self._training_rows(path)), self._read_us):
            self._rows.inc(model_batch.num_rows)
            yield model_batch

    def _training_rows(self, path: str):
        """The file's training rows as model batches (runs read ahead, in a thread)."""
        for batch, _ in read_batches(path, self._batch_size, self._max_line_bytes,
                                     self._layout):
            if not batch.num_rows:
                continue
            train = ~held_out_mask(batch, self._eval_percent, self._layout)
            n = int(train.sum())
            if n:
                yield to_model_batch(_select(batch, train, n, self._schema), self._schema)


_NEW_CACHE = "analysis_cache.new"


def _read_for_analysis(pipeline, name, paths: list[str], args, layout: RawLayout):
    """The files' training rows, for analysis."""
    return (pipeline
            | f"AnalysisFiles[{name}]" >> beam.Create(paths)
            | f"AnalysisReshuffle[{name}]" >> beam.Reshuffle()
            | f"AnalysisRead[{name}]" >> beam.ParDo(ReadTrainingRows(
                args.eval_percent, args.batch_size, args.max_line_bytes, layout)
            ).with_output_types(pa.RecordBatch))


def _analyze_whole(pipeline, args, files, preprocessing_fn, analysis: dict,
                   layout: RawLayout):
    """tf.Transform analysis of the window as one dataset (no cache): the pipeline and its
    memory stay the same size however many days the window has."""
    import tensorflow_transform.beam as tft_beam

    # One read of every day's training rows, on purpose: on the local runner a Flatten of
    # separate reads is a stage boundary whose buffer held every row of the window
    # (4.7 GB at 5M rows).
    data = _read_for_analysis(pipeline, "window", [p for ps in files.values() for p in ps],
                              args, layout)
    analysis.update({"cache_dir": None, "datasets": {"window": "computed"}})
    log.info("analysis: the %d-day window as one dataset", len(files))
    return ((data, tensor_adapter_config(layout))
            | "Analyze" >> tft_beam.AnalyzeDataset(preprocessing_fn)), None


def _analyze(pipeline, args, files, sets: list[AnalysisSet], preprocessing_fn, tmp: str,
             analysis: dict, layout: RawLayout):
    """tf.Transform analysis of the window as one dataset per day, reading only the
    days the cache does not already hold; fills `analysis` with what came from where.
    Without a cache, or past `--max-cached-datasets`, the window is one dataset."""
    if not args.analysis_cache_dir or len(sets) > args.max_cached_datasets:
        if args.analysis_cache_dir:
            log.warning("analysis: the window needs %d cached datasets (> "
                        "--max-cached-datasets %d): analysing it as one, without the cache",
                        len(sets), args.max_cached_datasets)
        return _analyze_whole(pipeline, args, files, preprocessing_fn, analysis, layout)
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.beam import analysis_graph_builder, analyzer_cache
    from tfx_bsl.tfxio.tensor_adapter import TensorAdapter

    config = tensor_adapter_config(layout)
    keys = {s.key: analyzer_cache.DatasetKey(s.key) for s in sets}
    input_cache = {}
    needed = set(keys.values())
    if args.analysis_cache_dir and FileSystems.exists(args.analysis_cache_dir):
        specs = TensorAdapter(config).OriginalTypeSpecs()
        entry_keys = analysis_graph_builder.get_analysis_cache_entry_keys(
            preprocessing_fn, specs, list(keys.values()), False)
        input_cache = pipeline | "ReadAnalysisCache" >> analyzer_cache.ReadAnalysisCacheFromFS(
            args.analysis_cache_dir, list(keys.values()), cache_entry_keys=entry_keys)
        needed = set(analysis_graph_builder.get_analysis_dataset_keys(
            preprocessing_fn, specs, list(keys.values()), input_cache, False))
    data = {k: None for k in keys.values()}
    for s in sets:
        if keys[s.key] in needed:
            data[keys[s.key]] = _read_for_analysis(pipeline, s.day, files[s.day], args, layout)
    analysis.update({
        "cache_dir": args.analysis_cache_dir or None,
        "datasets": {s.key: ("computed" if keys[s.key] in needed else "cache") for s in sets}})
    log.info("analysis: %d day(s) computed, %d reused from the cache",
             sum(v == "computed" for v in analysis["datasets"].values()),
             sum(v == "cache" for v in analysis["datasets"].values()))
    transform_fn, output_cache = ((data, input_cache, config)
                                  | "Analyze" >> tft_beam.AnalyzeDatasetWithCache(preprocessing_fn,
                                                                          pipeline=pipeline))
    if args.analysis_cache_dir:
        _ = output_cache | "WriteAnalysisCache" >> analyzer_cache.WriteAnalysisCacheToFS(
            pipeline, FileSystems.join(tmp, _NEW_CACHE), list(keys.values()))
    return transform_fn, output_cache


def run(argv: list[str] | None = None, save_main_session: bool = False) -> dict:
    """Build and run the pipeline; return (and write) the run summary."""
    tf_keras_env.use_keras2()   # before TensorFlow's first import
    import tensorflow_transform.beam as tft_beam
    from components.ctr import feature_config
    from components.ctr.transform import make_preprocessing_fn

    args, beam_args = parse_args(argv)
    # tf.Transform's graph analysis (tensorflow_transform.graph_tools) logs "Tables
    # initialized inside a tf.function will be re-initialized on every invocation" for
    # every table initializer of the traced preprocessing_fn, the ones its own
    # apply_vocabulary creates included: those tables are tf.Transform's to place, not ours.
    drop_known_lines("absl", "Tables initialized inside a tf.function")
    if not 0 < args.eval_percent < 100:   # 0: no eval split; 100: nothing to train on
        raise ValueError(f"eval_percent (--eval-percent) must be in 1..99, got {args.eval_percent}")
    if not 0 <= args.validation_percent < 50:
        raise ValueError(f"validation_percent (--validation-percent) must be in 0..49, got "
                         f"{args.validation_percent}")
    if not 1 <= args.gzip_level <= 9:
        raise ValueError(f"gzip_level (--gzip-level) must be in 1..9, got {args.gzip_level}")
    for name in ("window_days", "batch_size", "max_line_bytes", "max_cached_datasets"):
        if getattr(args, name) < 1:
            raise ValueError(f"{name} (--{name.replace('_', '-')}) must be at least 1, "
                             f"got {getattr(args, name)}")
    cfg = feature_config.load_for(args.feature_config)
    layout = RawLayout.of(cfg)
    preprocessing_fn = make_preprocessing_fn(cfg)
    files = window_files(args.raw_root, args.span, args.window_days, args.exclude_spans,
                         cfg.validation.record_limits().max_parts_per_day)
    # Refuses symlinks out of the root and empty parts; checked again after the read.
    inputs = rawfiles.snapshot([f for parts in files.values() for f in parts], args.raw_root)
    options = runner.JobOptions(beam_args)
    options.view_as(SetupOptions).save_main_session = save_main_session
    started = time.time()
    commit = output_commit.mode_for(args.output_dir, args.output_commit)
    if args.analysis_cache_dir and not output_commit.is_local(args.output_dir):
        raise ValueError("--analysis-cache-dir commits its entries with a local rename: use it "
                         "with a folder --output-dir, not an object store")
    sets = analysis_sets(files, args.span, args.eval_percent,
                         transform_code_salt() + cfg.fingerprint())
    analysis: dict = {}
    join = FileSystems.join
    with output_commit.output_commit(args.output_dir, commit) as tmp:
        with runner.pipeline(options) as pipeline:
            with tft_beam.Context(temp_dir=join(tmp, "tft_tmp"), desired_batch_size=args.batch_size):
                # Analysis reads the window once more instead of keeping the parsed
                # rows until the statistics are known: the DirectRunner holds a PCollection
                # that waits for a side input in memory, so that would make memory grow
                # with the input; re-reading keeps it flat (and a cluster runner needs no
                # shuffle of the whole window).
                transform_fn, output_cache = _analyze(
                    pipeline, args, files, sets, preprocessing_fn, tmp, analysis, layout)
                splits = (
                    pipeline
                    | "ListFiles" >> beam.Create([f for parts in files.values() for f in parts])
                    | "Reshuffle" >> beam.Reshuffle()
                    | "ReadSplit" >> beam.ParDo(
                        ReadSplitBatches(args.span.isoformat(), args.eval_percent,
                                         args.batch_size, args.max_line_bytes, layout,
                                         args.validation_percent, cfg.identity_sizes())
                    ).with_output_types(pa.RecordBatch, **{s: pa.RecordBatch for s in SPLITS},
                                        **{REJECTED_DIR: str}
                    ).with_outputs(*SPLITS, REJECTED_DIR))
                # Dead letters: one JSON object per rejected record (reason, detail,
                # source file, line, byte offset, the record's text up to 2 KiB).
                _ = splits[REJECTED_DIR] | "WriteRejected" >> beam.io.WriteToText(
                    join(tmp, REJECTED_DIR, "part"), file_name_suffix=".jsonl", num_shards=1)
                config = tensor_adapter_config(layout)
                _ = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(
                    join(tmp, TRANSFORM_DIR))
                stats = []
                for split in SPLITS:
                    transformed, metadata = (
                        ((splits[split], config), transform_fn)
                        | f"Transform{split}" >> tft_beam.TransformDataset(output_record_batches=True))
                    if cfg.new_id_rows():   # rows whose id the window never saw
                        _ = transformed | f"NewIds{split}" >> beam.ParDo(
                            id_coverage.CountNewIdRows(NAMESPACE, split, cfg.new_id_rows()))
                    if split != EVAL_DIR:   # what the trainer needs before its first step
                        stats.append(transformed | f"Stats{split}" >> beam.CombineGlobally(
                            SplitStatsFn(cfg)) | f"Name{split}" >> beam.Map(
                                lambda s, name=split: (name, s)))
                    if args.num_shards:   # an exact shard count: Beam's per-record sink
                        _ = ((transformed, metadata)
                             | f"Encode{split}" >> tft_beam.EncodeTransformedDataset()
                             | f"Write{split}" >> beam.io.WriteToTFRecord(
                                 join(tmp, split, "part"), file_name_suffix=".tfrecord.gz",
                                 num_shards=args.num_shards))
                    else:   # default: batch-wise C++ encoding, files per bundle in threads
                        writers = WRITERS if split == TRAIN_DIR else EVAL_WRITERS
                        _ = ((transformed
                              | f"Deal{split}" >> beam.FlatMap(deal, writers).with_output_types(
                                  pa.RecordBatch),
                              metadata)
                             | f"Write{split}" >> WriteTransformedShards(
                                 join(tmp, split), args.gzip_level, NAMESPACE,
                                 writers=writers, rows_file=SHARD_ROWS_FILE))
                _ = (stats | "AllStats" >> beam.Flatten() | "StatsDict" >> beam.combiners.ToDict()
                     | "WriteStats" >> beam.Map(write_split_stats, join(tmp, SPLIT_STATS_FILE)))
                # The id fields' distinct, shared and new ids, sketched from the raw rows.
                ids = id_coverage.id_fields(cfg)
                sketches = [splits[s] | f"Ids{s}" >> beam.CombineGlobally(
                    id_coverage.IdSketchFn(list(ids))) | f"IdsName{s}" >> beam.Map(
                        lambda x, name=s: (name, x)) for s in (TRAIN_DIR, EVAL_DIR)]
                _ = (sketches | "AllIds" >> beam.Flatten() | "IdsDict" >> beam.combiners.ToDict()
                     | "WriteIds" >> beam.Map(id_coverage.write_report,
                                              join(tmp, ID_COVERAGE_FILE), ids))
        result = pipeline.result
        rawfiles.verify_unchanged(inputs)   # analysis and transform read the same bytes
        # Committed values where the runner has them (DirectRunner, Dataflow, Flink).
        counters = beam_counters(result, NAMESPACE)
        summary = {
            "span": args.span.isoformat(),
            "window": [d.isoformat() for d in files],
            "excluded_spans": [d.isoformat() for d in args.exclude_spans],
            "input_files": sum(len(v) for v in files.values()),
            "rows_in": counters.get("rows_in", 0),
            "rows_train": counters.get(f"rows_{TRAIN_DIR}", 0),
            "rows_eval": counters.get(f"rows_{EVAL_DIR}", 0),
            "rows_validation": counters.get(f"rows_{VALIDATION_DIR}", 0),
            "rows_rejected": counters.get("rows_rejected", 0),
            # Older days' held-out rows: in neither split (no model trains on them).
            "rows_held_out": counters.get("rows_held_out", 0),
            # The window's held-out rows: what evaluation scores and the gate counts (the
            # eval split plus the older days'), the one eval row count a person is shown.
            "rows_eval_window": (counters.get(f"rows_{EVAL_DIR}", 0)
                                 + counters.get("rows_held_out", 0)),
            "rejected_by_reason": {r: counters[f"rejected_{r}"] for r in REJECT_REASONS
                                   if counters.get(f"rejected_{r}")},
            "rejected_dir": REJECTED_DIR,
            "id_coverage": id_coverage.add_new_id_rows(
                id_coverage.read_report(join(tmp, ID_COVERAGE_FILE)), cfg, counters, SPLITS,
                _vocabulary_sizes(cfg, join(tmp, TRANSFORM_DIR))),
            # Identity values outside [0, size) in the window's rows: the transform clips
            # each into the table's first or last row, so they are counted, never silent.
            "identity_out_of_range": {k: counters[f"{OUT_OF_RANGE}{k}"]
                                      for k in cfg.identity_sizes()
                                      if counters.get(f"{OUT_OF_RANGE}{k}")},
            "eval_percent": args.eval_percent,
            "validation_percent": args.validation_percent,
            "validation_hash": F.VALIDATION_HASH,
            "feature_config": {"name": cfg.name, "fingerprint": cfg.fingerprint()[:16],
                               "source": args.feature_config or "default"},
            "seconds": round(time.time() - started, 1),
            # Time inside the job's own steps, summed over workers (so it can exceed the
            # wall time with several); the rest is tf.Transform (analysis, transform),
            # the runner and start-up. Reads: seconds the runner waited for the reader
            # thread (it reads ahead); encoding and writing: CPU seconds of the shard
            # writer processes. Not measured with --num-shards (Beam's sink).
            "stage_seconds": {
                "read_for_analysis": round(counters.get("analysis_read_us", 0) / 1e6, 3),
                "read_for_transform": round(counters.get("read_us", 0) / 1e6, 3),
                "encode_and_write": round(counters.get("write_us", 0) / 1e6, 3)},
            "runner": runner.name(options),
        }
        summary["id_coverage_line"] = id_coverage.headline(summary["id_coverage"])
        summary["rows_per_second"] = round(summary["rows_in"] / max(summary["seconds"], 1e-9))
        accounted = (summary["rows_train"] + summary["rows_eval"] + summary["rows_validation"]
                     + summary["rows_held_out"] + summary["rows_rejected"])
        if accounted != summary["rows_in"]:
            raise RuntimeError(f"rows do not add up: {summary['rows_in']} read != "
                               f"{summary['rows_train']} train + {summary['rows_eval']} eval + "
                               f"{summary['rows_validation']} validation + "
                               f"{summary['rows_held_out']} held out + "
                               f"{summary['rows_rejected']} rejected ({counters})")
        if analysis["cache_dir"]:
            analysis["cache_added"] = commit_analysis_cache(Path(tmp) / _NEW_CACHE,
                                                             args.analysis_cache_dir)
            output_commit.delete_tree(join(tmp, _NEW_CACHE))
        summary["analysis"] = {"rows_analysed": counters.get("rows_analysed", 0), **analysis}
        if summary["identity_out_of_range"]:
            log.warning("identity value(s) outside the field's size, clipped into the "
                        "table's first or last row: %s", summary["identity_out_of_range"])
        if summary["rows_rejected"]:
            log.warning("%d malformed record(s) rejected %s; see %s", summary["rows_rejected"],
                        summary["rejected_by_reason"],
                        join(args.output_dir if commit == "rename" else tmp, REJECTED_DIR))
        output_commit.delete_tree(join(tmp, "tft_tmp"))
        # Training and serving read the features from here, never from a config path
        # that may have changed since.
        summary["output_commit"] = commit
        output_commit.write_json(join(tmp, feature_config.FEATURE_CONFIG_FILE), cfg.to_dict())
        output_commit.write_json(join(tmp, SUMMARY_FILE), summary)
    # What readers open: the folder itself, or the attempt the _SUCCESS marker now names.
    summary["output_dir"] = args.output_dir if commit == "rename" else tmp
    log.info("preprocess summary: %s", json.dumps(summary))
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(json.dumps(run(), indent=2))
