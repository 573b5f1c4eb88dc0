"""Preprocess labelled text spans with Beam: normalize, deduplicate, split, write shards.

Reads the Parquet partitions of a window of text spans and:

- normalizes each text (Unicode NFC, control characters removed, whitespace collapsed);
- drops duplicates across the whole window, counting them: *exact* duplicates (same
  normalized text) and *near* duplicates (same text once case, punctuation and spacing
  are ignored). One record per group is kept: the newest (latest span, then smallest id);
- splits train/eval by a hash of the near-duplicate key, so a text (and every copy of it)
  falls in the same split on every day and can never leak from train into eval;
- writes gzip TFRecord shards of tf.train.Example {example_id, text (raw, not tokenized:
  the model tokenizes in-graph), span, and one int64 per task of the config (class index,
  -1 = unlabelled)}, the resolved config (`text_config.json`) and a summary with the counts
  and the per-class training counts (the fine-tuning step's class weights).

The columns, the text template and the tasks come from the family config file
(`--text-config`, default: the bundled reviews); parts may be Parquet, JSONL or JSONL.gz.

    python -m beam_jobs.preprocess_text --raw-root var/raw/text --span 2026-11-07 \
        --window-days 3 --output-dir /tmp/pre --text-config my_texts.yaml --runner=DirectRunner
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import re
import time
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import SetupOptions

from beam_jobs import runner
from beam_jobs.metrics import counters as beam_counters
from retrain.common.spans import span_list
from retrain.common.errors import refuse_one_class
from components.text import rawdata
# What a text is compared and trained on, and the window's parts: the family's, shared
# with batch scoring (beam_jobs.score_text) and validation.
from components.text.rawdata import normalize, window_files
from components.text import task_config as T
from components.text.formats import EVAL_DIR, SUMMARY_FILE, TRAIN_DIR

log = logging.getLogger(__name__)

NAMESPACE = "retrain.preprocess_text"
_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--raw-root", required=True, help="folder holding dt=YYYY-MM-DD partitions")
    p.add_argument("--span", required=True, type=dt.date.fromisoformat,
                   help="newest day of the window (YYYY-MM-DD)")
    p.add_argument("--window-days", type=int, default=3, help="days read, ending at --span")
    p.add_argument("--exclude-spans", type=span_list, default=[],
                   help="days of the window to leave out, comma-separated (the DAG passes the "
                        "days whose validation did not let them through)")
    p.add_argument("--eval-percent", type=int, default=20,
                   help="share of distinct texts held out for evaluation (stable text hash)")
    p.add_argument("--output-dir", required=True, help="where shards and summary go")
    p.add_argument("--num-shards", type=int, default=0, help="TFRecord shards per split (0: runner decides)")
    p.add_argument("--text-config", default="",
                   help="the family config file (columns, tasks, labels); default: bundled reviews")
    return p.parse_known_args(argv)


def near_key(normalized: str) -> str:
    """Case, punctuation and spacing ignored: 'Love it!!' and 'love it' collide."""
    return _NON_WORD.sub(" ", normalized.casefold()).strip()


def text_hash_percent(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % 100


def split_of(key: str, eval_percent: int) -> str:
    return EVAL_DIR if text_hash_percent(key) < eval_percent else TRAIN_DIR


class ReadRecords(beam.DoFn):
    """One part file -> dict records with normalized text and label indices."""

    def __init__(self, cfg_dict: dict):
        self._cfg_dict = cfg_dict
        self._cfg = None
        self._rows_in = Metrics.counter(NAMESPACE, "rows_in")
        self._empty = Metrics.counter(NAMESPACE, "rows_empty_text")
        self._invalid = Metrics.counter(NAMESPACE, "rows_invalid_text")

    def setup(self):
        self._cfg = T.from_resolved(self._cfg_dict)

    def process(self, item):
        span, path = item
        for line, row in enumerate(rawdata.read_rows(
                path, self._cfg.validation.record_limits()), 1):
            self._rows_in.inc()
            try:
                if rawdata.badly_encoded(self._cfg.text_of(row)):   # validation counts them
                    self._invalid.inc()
                    continue
                rec = to_record(row, span, self._cfg)
            except ValueError as e:   # e.g. a label the config does not declare
                raise ValueError(f"{path} row {line}: {e}") from e
            if rec is None:
                self._empty.inc()
                continue
            yield rec


def to_record(row: dict, span: str, cfg: T.TextConfig) -> dict | None:
    """A raw row as the record the pipeline carries; None for an empty text. A label the
    config does not declare raises (validation reports such a span before this runs)."""
    text = normalize(cfg.text_of(row))
    if not text:
        return None
    rec = {"example_id": cfg.id_of(row), "text": text, "span": span}
    for task in cfg.tasks:
        rec[task.name] = task.index_of(row.get(task.label_column))
    return rec


def pick_group(item, eval_percent: int):
    """One near-duplicate group -> the kept record (tagged with its split) + dup counts."""
    key, records = item
    records = sorted(records, key=lambda r: (r["span"], _neg(r["example_id"])), reverse=True)
    kept = records[0]
    seen = {kept["text"]}
    exact = near = 0
    for r in records[1:]:
        if r["text"] in seen:
            exact += 1
        else:
            near += 1
            seen.add(r["text"])
    if exact:
        yield beam.pvalue.TaggedOutput("dups", ("exact", exact))
    if near:
        yield beam.pvalue.TaggedOutput("dups", ("near", near))
    yield {**kept, "split": split_of(key, eval_percent)}


def _neg(s: str) -> tuple:
    # Sort helper: with reverse=True, prefer the newest span and then the *smallest* id.
    return tuple(-ord(c) for c in s)


class DedupAndSplit(beam.PTransform):
    """records -> {"records": kept records with "split", "dups": (kind, count) pairs}."""

    def __init__(self, eval_percent: int):
        super().__init__()
        self._eval_percent = eval_percent

    def expand(self, records):
        out = (records
               | "KeyByNearText" >> beam.Map(lambda r: (near_key(r["text"]), r))
               | "GroupByNearText" >> beam.GroupByKey()
               | "PickOne" >> beam.FlatMap(pick_group, self._eval_percent)
               .with_outputs("dups", main="records"))
        return {"records": out.records, "dups": out.dups}


def to_examples(records: list[dict], tasks: tuple[str, ...]) -> list[bytes]:
    """A batch of records as serialized tf.Examples (example_id, text, span: bytes; one int64
    per task), by tfx_bsl's batch encoder. Not tf.train.Example: importing TensorFlow for it
    cost every job and Beam worker process about 7 s of CPU."""
    import pyarrow as pa
    from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder

    def strings(key: str) -> pa.Array:
        return pa.array([[r[key].encode("utf-8")] for r in records], pa.list_(pa.binary()))

    def ints(key: str) -> pa.Array:
        return pa.array([[int(r[key])] for r in records], pa.list_(pa.int64()))

    batch = pa.RecordBatch.from_pydict({**{k: strings(k) for k in ("example_id", "text", "span")},
                                        **{t: ints(t) for t in tasks}})
    return RecordBatchToExamplesEncoder().encode(batch)


class ClassCounts(beam.CombineFn):
    """A split's rows, class counts and unlabelled rows per task, merged from each worker's
    partial counts: no process holds the split's records."""

    def __init__(self, task_labels: dict[str, list[str]]):
        self._sizes = {t: len(labels) for t, labels in task_labels.items()}

    def create_accumulator(self) -> dict:
        return {"rows": 0, "class_counts": {t: [0] * n for t, n in self._sizes.items()},
                "unlabelled": {t: 0 for t in self._sizes}}

    def add_input(self, acc: dict, r: dict) -> dict:
        acc["rows"] += 1
        for t in self._sizes:
            if r[t] >= 0:
                acc["class_counts"][t][r[t]] += 1
            else:
                acc["unlabelled"][t] += 1
        return acc

    def merge_accumulators(self, accs) -> dict:
        out = self.create_accumulator()
        for acc in accs:
            out["rows"] += acc["rows"]
            for t in self._sizes:
                out["unlabelled"][t] += acc["unlabelled"][t]
                out["class_counts"][t] = [a + b for a, b in zip(out["class_counts"][t],
                                                                acc["class_counts"][t])]
        return out

    def extract_output(self, acc: dict) -> dict:
        return acc


def run(argv: list[str] | None = None, save_main_session: bool = False) -> dict:
    """Build and run the pipeline; return (and write) the run summary."""
    from retrain.common import rawfiles
    from retrain.common.atomic import atomic_dir, write_json

    args, beam_args = parse_args(argv)
    if not 0 < args.eval_percent < 100:
        raise ValueError(f"eval_percent (--eval-percent) must be in 1..99, got {args.eval_percent}")
    cfg = T.load_for(args.text_config)
    labels = cfg.task_labels
    files = window_files(Path(args.raw_root), args.span, args.window_days, args.exclude_spans,
                         cfg.validation.record_limits())
    inputs = rawfiles.snapshot([p for _, p in files], args.raw_root)
    options = runner.JobOptions(beam_args)
    options.view_as(SetupOptions).save_main_session = save_main_session
    started = time.time()
    output = Path(args.output_dir)
    with atomic_dir(output) as tmp:
        with runner.pipeline(options) as pipeline:
            records = (pipeline
                       | "ListFiles" >> beam.Create(files)
                       | "Reshuffle" >> beam.Reshuffle()
                       | "Read" >> beam.ParDo(ReadRecords(T.resolved(cfg))))
            dedup = records | "DedupAndSplit" >> DedupAndSplit(args.eval_percent)
            _ = (dedup["dups"]
                 | "SumDups" >> beam.CombinePerKey(sum)
                 | "DupsDict" >> beam.combiners.ToDict()
                 | "WriteDups" >> beam.Map(lambda d: write_json(tmp / "_dups.json", d)))
            for split in (TRAIN_DIR, EVAL_DIR):
                rows = (dedup["records"]
                        | f"Only{split}" >> beam.Filter(lambda r, s=split: r["split"] == s))
                _ = (rows
                     | f"Batch{split}" >> beam.BatchElements(min_batch_size=16,
                                                             max_batch_size=1024)
                     | f"Encode{split}" >> beam.FlatMap(to_examples, tuple(labels))
                     | f"Write{split}" >> beam.io.WriteToTFRecord(
                         str(tmp / split / "part"), file_name_suffix=".tfrecord.gz",
                         num_shards=args.num_shards))
                _ = (rows
                     | f"Stats{split}" >> beam.CombineGlobally(ClassCounts(labels))
                     | f"WriteStats{split}" >> beam.Map(
                         lambda s, name=split: write_json(tmp / f"_stats_{name}.json", s)))
        result = pipeline.result
        rawfiles.verify_unchanged(inputs)   # a part still being written: no output
        counters = beam_counters(result, NAMESPACE)
        dups = _read_and_remove(tmp / "_dups.json") or {}
        stats = {s: _read_and_remove(tmp / f"_stats_{s}.json") for s in (TRAIN_DIR, EVAL_DIR)}
        # A window whose training labels are one class (an override let its days through)
        # trains nothing: a typed refusal (not retried), and no output is left.
        refuse_one_class({t: dict(zip(names, stats[TRAIN_DIR]["class_counts"][t]))
                          for t, names in labels.items()},
                         f"text preprocessing of the window ending {args.span}")
        summary = {
            "span": args.span.isoformat(),
            "window": sorted({s for s, _ in files}),
            "excluded_spans": [d.isoformat() for d in args.exclude_spans],
            "input_files": len(files),
            "rows_in": counters.get("rows_in", 0),
            "rows_empty_text": counters.get("rows_empty_text", 0),
            "rows_invalid_text": counters.get("rows_invalid_text", 0),
            "exact_duplicates": int(dups.get("exact", 0)),
            "near_duplicates": int(dups.get("near", 0)),
            "rows_train": stats[TRAIN_DIR]["rows"],
            "rows_eval": stats[EVAL_DIR]["rows"],
            "class_counts": {s: stats[s]["class_counts"] for s in (TRAIN_DIR, EVAL_DIR)},
            "unlabelled": {s: stats[s]["unlabelled"] for s in (TRAIN_DIR, EVAL_DIR)},
            "labels": labels,
            "text_config": T.resolved(cfg),
            "eval_percent": args.eval_percent,
            "seconds": round(time.time() - started, 1),
            "runner": runner.name(options),
        }
        write_json(tmp / SUMMARY_FILE, summary)
        write_json(tmp / T.CONFIG_FILE, T.resolved(cfg))
    summary["output_dir"] = str(output)
    log.info("text preprocess summary: %s", json.dumps(summary))
    return summary


def _read_and_remove(path: Path):
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    path.unlink()
    return data


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(json.dumps(run(), indent=2))
