"""Batch inference: score a span of raw texts with the published text model (Beam).

For users who label their backlog: reads the Parquet parts of one or more text spans
(`raw/text/dt=YYYY-MM-DD/part-*.parquet`; only `example_id` and `text` are needed, labels
are ignored), sends the raw strings in batches through the exported SavedModel's
`serving_default` signature (each worker loads the model once, in `DoFn.setup`) and
writes JSON lines {example_id, text, <task>: predicted label, <task>_probs: {label: p}}
plus a summary. The model is the registry's published version unless --model-dir is given.

    python -m beam_jobs.score_text --raw-root var/raw/text --span 2026-11-07 \
        --registry-root var/registry --output-dir /tmp/scores --runner=DirectRunner
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import time
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import SetupOptions

from beam_jobs import runner
from beam_jobs.metrics import counters as beam_counters
from components.text import rawdata
from components.text.rawdata import normalize, window_files
from components.text import task_config as T
from retrain.common.errors import BadData

log = logging.getLogger(__name__)

NAMESPACE = "retrain.score_text"
SUMMARY_FILE = "summary.json"


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--raw-root", required=True, help="folder holding dt=YYYY-MM-DD partitions")
    p.add_argument("--span", required=True, type=dt.date.fromisoformat, help="newest day scored")
    p.add_argument("--window-days", type=int, default=1, help="days scored, ending at --span")
    p.add_argument("--model-dir", default=None, help="exported text model (default: the "
                   "published version in --registry-root)")
    p.add_argument("--registry-root", default=None, help="model registry root")
    p.add_argument("--model-name", default="text")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--batch-size", type=int, default=64, help="texts per model call")
    p.add_argument("--num-shards", type=int, default=0)
    return p.parse_known_args(argv)


def resolve_model(args) -> tuple[str, int | None]:
    from retrain.common.registry import require_saved_model, verify_model_dir

    if args.model_dir:
        require_saved_model(args.model_dir)   # refused before any worker tries to load it
        verify_model_dir(args.model_dir)   # a registry version by path: checked too
        return args.model_dir, None
    if not args.registry_root:
        raise ValueError("give --model-dir or --registry-root")
    from retrain.common.registry import Registry
    reg = Registry(args.registry_root)
    current = reg.current(args.model_name)
    if current is None:
        raise FileNotFoundError(f"model {args.model_name!r} has no published version in "
                                f"{args.registry_root}")
    # The published files, checked against their digests at publish (ModelTampered).
    return str(reg.verified_path(args.model_name, current["version"])), current["version"]


class ReadTexts(beam.DoFn):
    """Raw rows -> {example_id, text}, read as the model's own config describes them."""

    def __init__(self, cfg_dict: dict):
        self._cfg_dict = cfg_dict

    def setup(self):
        self._cfg = T.from_resolved(self._cfg_dict)

    def process(self, item):
        _, path = item
        for row in rawdata.read_rows(path, self._cfg.validation.record_limits()):
            yield {"example_id": str(self._cfg.id_of(row)),
                   "text": self._cfg.text_of(row)}


def model_config(model_dir: str) -> dict:
    """The text config a model was trained with (labels.json); the bundled one for older
    exports. A model without labels.json (another family's) is refused by name."""
    path = Path(model_dir) / "assets.extra" / "labels.json"
    if not path.is_file():
        raise BadData(f"--model-dir {model_dir} is not a text model exported by retrain "
                      f"(no assets.extra/labels.json)")
    labels = json.loads(path.read_text())
    return labels.get("text_config") or T.resolved(T.default())


class ScoreBatch(beam.DoFn):
    """A batch of {example_id, text} -> scored rows; the model loads once per worker."""

    def __init__(self, model_dir: str):
        self._model_dir = model_dir
        self._scored = Metrics.counter(NAMESPACE, "rows_scored")
        self._empty = Metrics.counter(NAMESPACE, "rows_empty_text")

    def setup(self):
        from components.text import model as M
        self._labels = M.read_labels(self._model_dir)["tasks"]
        self._loaded, self._sig = M.load_serving(self._model_dir)

    def process(self, batch):
        import tensorflow as tf
        rows = [dict(r, text=normalize(r["text"])) for r in batch]
        kept = [r for r in rows if r["text"]]
        self._empty.inc(len(rows) - len(kept))
        if not kept:
            return
        probs = {k: v.numpy() for k, v in
                 self._sig(text=tf.constant([r["text"] for r in kept])).items()}
        for i, r in enumerate(kept):
            out = {"example_id": r["example_id"], "text": r["text"]}
            for task, labels in self._labels.items():
                p = probs[task][i]
                out[task] = labels[int(p.argmax())]
                out[f"{task}_probs"] = {lab: round(float(x), 6) for lab, x in zip(labels, p)}
            self._scored.inc()
            yield out


def run(argv: list[str] | None = None, save_main_session: bool = False) -> dict:
    """Score the span window; write JSON-lines shards and a summary; return the summary."""
    from retrain.common.atomic import atomic_dir, write_json

    args, beam_args = parse_args(argv)
    model_dir, version = resolve_model(args)
    limits = T.from_resolved(model_config(model_dir)).validation.record_limits()
    files = window_files(Path(args.raw_root), args.span, args.window_days, (), limits)
    options = runner.JobOptions(beam_args)
    options.view_as(SetupOptions).save_main_session = save_main_session
    started = time.time()
    output = Path(args.output_dir)
    with atomic_dir(output) as tmp:
        with runner.pipeline(options) as pipeline:
            _ = (pipeline
                 | "ListFiles" >> beam.Create(files)
                 | "Reshuffle" >> beam.Reshuffle()
                 | "Read" >> beam.ParDo(ReadTexts(model_config(model_dir)))
                 | "Batch" >> beam.BatchElements(min_batch_size=1,
                                                 max_batch_size=args.batch_size)
                 | "Score" >> beam.ParDo(ScoreBatch(model_dir))
                 | "ToJson" >> beam.Map(json.dumps)
                 | "Write" >> beam.io.WriteToText(str(tmp / "scores"), file_name_suffix=".jsonl",
                                                  num_shards=args.num_shards))
        counters = beam_counters(pipeline.result, NAMESPACE)
        summary = {"span": args.span.isoformat(), "window": sorted({s for s, _ in files}),
                   "model_dir": model_dir, "model_version": version,
                   "rows_scored": counters.get("rows_scored", 0),
                   "rows_empty_text": counters.get("rows_empty_text", 0),
                   "seconds": round(time.time() - started, 1),
                   "runner": runner.name(options)}
        write_json(tmp / SUMMARY_FILE, summary)
    summary["output_dir"] = str(output)
    log.info("score summary: %s", json.dumps(summary))
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(json.dumps(run(), indent=2))
