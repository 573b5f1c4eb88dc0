"""Top-K recommendations per user from a CTR SavedModel, as a task-parallel Beam job.

Each element is one shard of users (a Parquet file written by
`components.ctr.recommend`, users split by a stable hash of their id); a worker loads the
SavedModel and the candidate items once (`DoFn.setup`), scores every user of the shard
against every candidate in batches and keeps the K best. Shards are independent, so the
job spreads over as many workers as the runner gives it: DirectRunner processes here
(`--direct_running_mode=multi_processing --direct_num_workers=2`), Flink/Spark/Dataflow
workers elsewhere, with the same code.

    python -m beam_jobs.recommend_ctr --inputs-dir RUN/inputs --model-dir MODEL \
        --output-dir /tmp/recs --k 10

Progress while it runs: with `--progress-dir`, every worker (one file per DoFn instance,
`worker-*.json`) rewrites the pairs it has scored so far, atomically, at most once every
PROGRESS_WRITE_SECONDS and at the end of each shard; `pairs_done(dir)` sums them for the
driver's progress line. Beam's metrics are only readable once the job ends, so they
cannot say how far it is; a worker that cannot write there (a remote cluster without that
folder) just stops reporting.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
import uuid
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import SetupOptions

from beam_jobs import runner
from beam_jobs.metrics import counters as beam_counters
from components.ctr.recommend_layout import ITEMS_FILE, USERS_DIR

log = logging.getLogger(__name__)

NAMESPACE = "retrain.recommend_ctr"
PROGRESS_GLOB, PROGRESS_WRITE_SECONDS = "worker-*.json", 1.0


def pairs_done(progress_dir: str | Path) -> int:
    """Pairs scored so far by every worker that reported into `progress_dir`."""
    done = 0
    for path in Path(progress_dir).glob(PROGRESS_GLOB):
        try:
            done += int(json.loads(path.read_text()).get("pairs", 0))
        except (OSError, ValueError, AttributeError):
            continue          # replaced while read, or not ours: the next look counts it
    return done


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--inputs-dir", required=True,
                   help=f"folder with {USERS_DIR}/part-*.parquet and {ITEMS_FILE}")
    p.add_argument("--model-dir", required=True, help="exported CTR SavedModel")
    p.add_argument("--model-version", type=int, default=None,
                   help="registry version of the model, written beside every score")
    p.add_argument("--output-dir", required=True, help="folder the Parquet parts go to")
    p.add_argument("--k", type=int, default=10, help="items kept per user")
    p.add_argument("--batch-pairs", type=int, default=16384,
                   help="user x item pairs per model call")
    p.add_argument("--tf-threads", type=int, default=0,
                   help="TensorFlow threads per worker (0: TensorFlow's default, every "
                        "core); 1 with one worker per core")
    p.add_argument("--layout", required=True,
                   help="JSON: user_column, item_column, item_columns, context")
    p.add_argument("--progress-dir", default=None,
                   help=f"workers write their pairs scored so far here ({PROGRESS_GLOB})")
    return p.parse_known_args(argv)


class ScoreShard(beam.DoFn):
    """A users file -> their top-K rows; model and items load once per worker."""

    def __init__(self, args: argparse.Namespace):
        self._args = vars(args)
        self._pairs = Metrics.counter(NAMESPACE, "pairs_scored")
        self._users = Metrics.counter(NAMESPACE, "users_scored")

    def setup(self):
        import pyarrow.parquet as pq
        from components.ctr.recommend_scoring import PairLayout, PairScorer

        a = self._args
        runner.limit_tf_threads(a["tf_threads"], log)
        layout = PairLayout.from_dict(json.loads(a["layout"]))
        items = pq.read_table(str(Path(a["inputs_dir"]) / ITEMS_FILE))
        self._scorer = PairScorer(a["model_dir"], items, layout, a["k"], a["batch_pairs"],
                                  a["model_version"])
        folder = a.get("progress_dir")
        self._report = (Path(folder) / f"worker-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
                        if folder else None)
        self._reported, self._reported_at = -1, 0.0

    def _write_progress(self, force: bool = False) -> None:
        done, now = self._scorer.pairs_scored, time.monotonic()
        if self._report is None or done == self._reported or \
                (not force and now - self._reported_at < PROGRESS_WRITE_SECONDS):
            return
        tmp = self._report.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps({"pairs": done}))
            os.replace(tmp, self._report)
        except OSError as e:
            log.warning("progress not reported from this worker (%s): %s", self._report, e)
            self._report = None
            return
        self._reported, self._reported_at = done, now

    def process(self, path: str):
        import pyarrow.parquet as pq

        users = pq.read_table(path)
        before = self._scorer.pairs_scored
        for row in self._scorer.top_k(users):
            yield row
            self._write_progress()
        self._write_progress(force=True)
        self._pairs.inc(self._scorer.pairs_scored - before)
        self._users.inc(users.num_rows)


def run(argv: list[str] | None = None, save_main_session: bool = False) -> dict:
    """Score every user shard; write Parquet parts into --output-dir; return counters."""
    from components.ctr.recommend_scoring import OUTPUT_SCHEMA

    args, beam_args = parse_args(argv)
    if args.k < 1 or args.batch_pairs < 1:
        raise ValueError("--k and --batch-pairs must be >= 1")
    files = sorted(str(p) for p in (Path(args.inputs_dir) / USERS_DIR).glob("part-*.parquet"))
    if not files:
        raise FileNotFoundError(f"no {USERS_DIR}/part-*.parquet in {args.inputs_dir}")
    options = runner.JobOptions(beam_args)
    options.view_as(SetupOptions).save_main_session = save_main_session
    started = time.time()
    with runner.pipeline(options) as pipeline:
        _ = (pipeline
             | "UserShards" >> beam.Create(files)
             | "Spread" >> beam.Reshuffle()
             | "Score" >> beam.ParDo(ScoreShard(args))
             | "Write" >> beam.io.WriteToParquet(str(Path(args.output_dir) / "part"),
                                                 OUTPUT_SCHEMA, file_name_suffix=".parquet"))
    counters = beam_counters(pipeline.result, NAMESPACE)
    summary = {"shards": len(files), "users_scored": counters.get("users_scored", 0),
               "pairs_scored": counters.get("pairs_scored", 0),
               "runner": runner.name(options), "beam_seconds": round(time.time() - started, 2)}
    log.info("recommend summary: %s", json.dumps(summary))
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(json.dumps(run(), indent=2))
