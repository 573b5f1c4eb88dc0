"""Preprocess CTR click logs with Beam + tf.Transform.

Reads the daily Parquet partitions of a window of spans, analyses the training rows
(vocabularies, NaN-aware means/variances), transforms a train split (window minus the
newest span's eval rows) and an eval split (the newest span's hash-selected eval rows),
and writes gzip TFRecord shards, the transform graph and a run summary.

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
import shutil
import time
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

from components.common.spans import window
from components.ctr import features as F
from components.ctr.preprocess import EVAL_DIR, SUMMARY_FILE, TRAIN_DIR, TRANSFORM_DIR

log = logging.getLogger(__name__)

NAMESPACE = "retrain.preprocess_ctr"


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--raw-root", required=True, help="folder holding dt=YYYY-MM-DD partitions")
    p.add_argument("--span", required=True, type=dt.date.fromisoformat,
                   help="newest day of the window (YYYY-MM-DD); its eval rows form the eval split")
    p.add_argument("--window-days", type=int, default=3, help="days analysed and trained on")
    p.add_argument("--eval-percent", type=int, default=20,
                   help="share of the newest span held out for evaluation (stable hash of example_id)")
    p.add_argument("--output-dir", required=True, help="where shards, transform graph and summary go")
    p.add_argument("--num-shards", type=int, default=0, help="TFRecord shards per split (0: runner decides)")
    p.add_argument("--batch-size", type=int, default=4096,
                   help="rows per Arrow RecordBatch handed to tf.Transform")
    return p.parse_known_args(argv)


def window_files(raw_root: Path, span: dt.date, days: int) -> dict[dt.date, list[str]]:
    """Parquet parts per day of the window; a missing or unfinished day is an error."""
    files: dict[dt.date, list[str]] = {}
    for day in window(span, days):
        day_dir = Path(raw_root) / f"dt={day.isoformat()}"
        if not (day_dir / "_SUCCESS").exists():
            raise FileNotFoundError(f"span {day} is not complete: no {day_dir / '_SUCCESS'}")
        parts = sorted(str(p) for p in day_dir.glob("part-*.parquet"))
        if not parts:
            raise FileNotFoundError(f"span {day} has no part-*.parquet files in {day_dir}")
        files[day] = parts
    return files


def arrow_schema() -> pa.Schema:
    """Each raw column as a one-element list, the shape TFXIO's dense adapter expects."""
    types = {k: pa.large_binary() for k in [*F.HASHED_ID_FEATURES, *F.VOCAB_FEATURES]}
    types.update({k: pa.int64() for k in [*F.IDENTITY_FEATURES, F.LABEL_KEY]})
    types.update({k: pa.float32() for k in F.NUMERIC_FEATURES})
    return pa.schema([(k, pa.large_list(t)) for k, t in types.items()])


class ReadSplitBatches(beam.DoFn):
    """Read one Parquet file in batches, split rows into train/eval, emit RecordBatches."""

    def __init__(self, eval_span: str, eval_percent: int, batch_size: int):
        self._eval_span = eval_span
        self._eval_percent = eval_percent
        self._batch_size = batch_size
        self._rows_in = Metrics.counter(NAMESPACE, "rows_in")
        self._rows = {s: Metrics.counter(NAMESPACE, f"rows_{s}") for s in (TRAIN_DIR, EVAL_DIR)}

    def setup(self):
        self._schema = arrow_schema()

    def process(self, path: str):
        is_span = f"dt={self._eval_span}" in path
        columns = [f.name for f in self._schema] + [F.EXAMPLE_ID_KEY]
        for batch in pq.ParquetFile(path).iter_batches(batch_size=self._batch_size,
                                                       columns=columns):
            self._rows_in.inc(batch.num_rows)
            eval_mask = np.zeros(batch.num_rows, dtype=bool)
            if is_span:
                ids = batch.column(F.EXAMPLE_ID_KEY).to_pylist()
                eval_mask = np.fromiter((F.is_eval(i, self._eval_percent) for i in ids),
                                        dtype=bool, count=len(ids))
            model_batch = self._to_model_batch(batch)
            for split, mask in ((TRAIN_DIR, ~eval_mask), (EVAL_DIR, eval_mask)):
                n = int(mask.sum())
                if n:
                    self._rows[split].inc(n)
                    part = model_batch if n == batch.num_rows else model_batch.filter(pa.array(mask))
                    yield beam.pvalue.TaggedOutput(split, part)

    def _to_model_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        n = batch.num_rows
        offsets = pa.array(np.arange(n + 1, dtype=np.int64))
        arrays = []
        for field in self._schema:
            col = batch.column(field.name)
            value_type = field.type.value_type
            if pa.types.is_floating(value_type):
                col = col.cast(value_type).fill_null(float("nan"))
            else:
                col = col.cast(value_type)
            if col.null_count:
                raise ValueError(f"null in required column {field.name!r}")
            arrays.append(pa.LargeListArray.from_arrays(offsets, col))
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)


def tensor_adapter_config():
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx_bsl.public import tfxio
    reps = {}
    for field in arrow_schema():
        rep = schema_pb2.TensorRepresentation()
        rep.dense_tensor.column_name = field.name
        rep.dense_tensor.shape.CopyFrom(schema_pb2.FixedShape())
        reps[field.name] = rep
    return tfxio.TensorAdapterConfig(arrow_schema(), reps)


def run(argv: list[str] | None = None, save_main_session: bool = False) -> dict:
    """Build and run the pipeline; return (and write) the run summary."""
    import tensorflow_transform.beam as tft_beam
    from components.common.atomic import atomic_dir, write_json
    from components.ctr.transform import preprocessing_fn

    args, beam_args = parse_args(argv)
    files = window_files(Path(args.raw_root), args.span, args.window_days)
    options = PipelineOptions(beam_args)
    options.view_as(SetupOptions).save_main_session = save_main_session
    started = time.time()
    output = Path(args.output_dir)
    with atomic_dir(output) as tmp:
        with beam.Pipeline(options=options) as pipeline:
            with tft_beam.Context(temp_dir=str(tmp / "tft_tmp"), desired_batch_size=args.batch_size):
                splits = (
                    pipeline
                    | "ListFiles" >> beam.Create([f for parts in files.values() for f in parts])
                    | "Reshuffle" >> beam.Reshuffle()
                    | "ReadSplit" >> beam.ParDo(
                        ReadSplitBatches(args.span.isoformat(), args.eval_percent, args.batch_size)
                    ).with_outputs(TRAIN_DIR, EVAL_DIR))
                config = tensor_adapter_config()
                transform_fn = ((splits[TRAIN_DIR], config)
                                | "Analyze" >> tft_beam.AnalyzeDataset(preprocessing_fn))
                _ = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(
                    str(tmp / TRANSFORM_DIR))
                for split in (TRAIN_DIR, EVAL_DIR):
                    transformed, metadata = (
                        ((splits[split], config), transform_fn)
                        | f"Transform{split}" >> tft_beam.TransformDataset(output_record_batches=True))
                    _ = ((transformed, metadata)
                         | f"Encode{split}" >> tft_beam.EncodeTransformedDataset()
                         | f"Write{split}" >> beam.io.WriteToTFRecord(
                             str(tmp / split / "part"), file_name_suffix=".tfrecord.gz",
                             num_shards=args.num_shards))
        result = pipeline.result
        counters = {c.key.metric.name: c.committed
                    for c in result.metrics().query()["counters"]
                    if c.key.metric.namespace == NAMESPACE}
        summary = {
            "span": args.span.isoformat(),
            "window": [d.isoformat() for d in files],
            "input_files": sum(len(v) for v in files.values()),
            "rows_in": counters.get("rows_in", 0),
            "rows_train": counters.get(f"rows_{TRAIN_DIR}", 0),
            "rows_eval": counters.get(f"rows_{EVAL_DIR}", 0),
            "eval_percent": args.eval_percent,
            "seconds": round(time.time() - started, 1),
            "runner": options.get_all_options().get("runner") or "DirectRunner",
        }
        summary["rows_per_second"] = round(summary["rows_in"] / max(summary["seconds"], 1e-9))
        shutil.rmtree(tmp / "tft_tmp", ignore_errors=True)
        write_json(tmp / SUMMARY_FILE, summary)
    summary["output_dir"] = str(output)
    log.info("preprocess summary: %s", json.dumps(summary))
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(json.dumps(run(), indent=2))
