"""Score the window's held-out rows with the candidate and the published model, as a Beam job.

Evaluation used to read every held-out row of the window into one process; at the
seed's scale that is ~4e10 rows. Here each element is one raw part file of one day:
a worker loads each SavedModel once (`DoFn.setup`), reads its part a batch at a time,
keeps the held-out rows (the split's stable hash), scores them through each model's
serving signature and folds them into a `components.binned_metrics.EvalAccumulator`
(score histograms, sums, Poisson-bootstrap replicates, slices). Accumulators add up, so
the combine is exact whatever the number of workers, and memory is bounded by bins x
replicates x slices, never by rows. A first, cheap pass counts each slice's values, so
the `top_categories` rule ("the K values with the most held-out rows, the rest OTHER")
is the same as in one process.

Writes one file, `--output` (`.npz`, no pickles; written to a temp name, then renamed),
read back by `components.ctr.evaluate`.

    python -m beam_jobs.evaluate_ctr --day-dirs '["raw/dt=2026-12-04"]' --eval-percent 20 \
        --model candidate=MODEL --output /tmp/eval_state.npz \
        --direct_running_mode=multi_processing --direct_num_workers=2
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import SetupOptions

from beam_jobs import runner
from beam_jobs.metrics import counters as beam_counters

log = logging.getLogger(__name__)

NAMESPACE = "retrain.evaluate_ctr"
BAYES = "bayes_optimal"          # the generator's true click probabilities, when present


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--day-dirs", required=True,
                   help="JSON list of the window's day folders, the evaluated span first")
    p.add_argument("--eval-percent", type=int, required=True,
                   help="rows whose id hash bucket (0-99) is below this are held out")
    p.add_argument("--model", action="append", required=True, metavar="NAME=DIR",
                   help="a SavedModel to score (repeat: candidate=..., baseline=...); its "
                        "raw inputs come from the feature config saved with it")
    p.add_argument("--truth", action="store_true",
                   help=f"also score each day's _truth.parquet probabilities as {BAYES!r}")
    p.add_argument("--slices", default="[]", help="JSON list of slice names")
    p.add_argument("--top-categories", type=int, default=10)
    p.add_argument("--bootstrap-resamples", type=int, default=200)
    p.add_argument("--bootstrap-seed", type=int, default=0)
    p.add_argument("--batch-rows", type=int, default=65536, help="rows read at a time")
    p.add_argument("--tf-threads", type=int, default=0,
                   help="TensorFlow threads per worker (0: TensorFlow's default)")
    p.add_argument("--output", required=True, help="the accumulator file (.npz) to write")
    return p.parse_known_args(argv)


def _models(args) -> dict[str, str]:
    out = {}
    for item in args.model:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--model takes NAME=DIR, got {item!r}")
        if name in out or name == BAYES:
            raise ValueError(f"--model {name!r} given twice or reserved")
        out[name] = path
    return out


def _candidate_config(models: dict[str, str]):
    """The rows are read with the first model's feature config (the candidate's)."""
    from components.ctr import feature_config
    return feature_config.for_model_dir(next(iter(models.values())))


def _batches(shard, args, cfg):
    from components.ctr import rawdata
    _, part = shard
    yield from rawdata.part_batches(part, cfg, args["eval_percent"], args["batch_rows"])


class SliceValueCounts(beam.DoFn):
    """A part's held-out rows -> ((slice, raw value), rows) for slices grouped by top-K."""

    def __init__(self, args: dict, slices: list[str]):
        self._args, self._slices = args, slices

    def setup(self):
        self._cfg = _candidate_config(_models(argparse.Namespace(**self._args)))

    def process(self, shard):
        import numpy as np
        from components.ctr import slices as S
        for batch in _batches(shard, self._args, self._cfg):
            table = beam_table(batch)
            for name, values in S.raw_values(table, self._slices).items():
                uniq, counts = np.unique(values.astype(str), return_counts=True)
                for value, n in zip(uniq.tolist(), counts.tolist()):
                    yield (name, value), n


def beam_table(batch):
    import pyarrow as pa
    return pa.Table.from_batches([batch])


class _Descending:
    """Orders strings backwards, so `Top` breaks count ties by the smaller name (as
    `components.ctr.slices.top_values` does)."""

    def __init__(self, text: str):
        self.text = text

    def __lt__(self, other: "_Descending") -> bool:
        return self.text > other.text

    def __eq__(self, other) -> bool:
        return isinstance(other, _Descending) and self.text == other.text


def _rank(value_count: tuple[str, int]):
    return value_count[1], _Descending(value_count[0])


class ScoreAndFold(beam.DoFn):
    """A part file -> one EvalAccumulator of its held-out rows; models load once."""

    def __init__(self, args: dict):
        self._args = args
        self._rows = Metrics.counter(NAMESPACE, "rows_scored")
        self._parts = Metrics.counter(NAMESPACE, "parts")

    def setup(self):
        from components.ctr import feature_config, rawdata
        a = self._args
        runner.limit_tf_threads(a["tf_threads"], log)
        models = _models(argparse.Namespace(**a))
        self._cfg = _candidate_config(models)
        self._scorers = {name: (rawdata.Scorer(path), feature_config.for_model_dir(path))
                         for name, path in models.items()}
        self._truth_day, self._truth = None, None

    def _true_probabilities(self, day_dir: str, ids):
        import pyarrow.compute as pc
        from components.ctr import features as F
        from components.ctr import rawdata
        if self._truth_day != day_dir:     # one day's truth at a time (generated logs only)
            self._truth_day, self._truth = day_dir, rawdata.read_truth(day_dir)
        index = pc.index_in(ids, value_set=self._truth.column(F.EXAMPLE_ID_KEY))
        if index.null_count:
            raise ValueError(f"{index.null_count} example ids of {day_dir} have no true "
                             "probability")
        return self._truth.column(F.TRUE_PROB_KEY).to_numpy()[index.to_numpy()]

    def process(self, shard, top: dict):
        import numpy as np
        from components.binned_metrics import EvalAccumulator
        from components.ctr import features as F
        from components.ctr import rawdata
        from components.ctr import slices as S
        a, cfg = self._args, self._cfg
        day_index, part = shard
        day_dir = json.loads(a["day_dirs"])[day_index]
        slices = json.loads(a["slices"])
        acc = EvalAccumulator(a["bootstrap_resamples"], a["bootstrap_seed"])
        for batch in _batches(shard, a, cfg):
            table = beam_table(batch)
            ids = table.column(cfg.example_id)
            scores = {name: scorer(rawdata.to_raw_features(table, model_cfg))
                      for name, (scorer, model_cfg) in self._scorers.items()}
            if a["truth"]:
                scores[BAYES] = self._true_probabilities(day_dir, ids)
            values = {name: S.grouped(name, v, set(top.get(name, ())))
                      for name, v in S.raw_values(table, slices).items()}
            if a["span_slice"]:
                values[S.SPAN_SLICE] = np.full(table.num_rows,
                                               S.THIS_SPAN if day_index == 0 else S.EARLIER_DAYS)
            acc.add(table.column(cfg.label).to_numpy(), scores, F.id_hash64(ids), values,
                    count_as=f"day{day_index}")
            self._rows.inc(table.num_rows)
        self._parts.inc()
        yield acc


class MergeAccumulators(beam.CombineFn):
    def __init__(self, n_resamples: int, seed: int):
        self._settings = (n_resamples, seed)

    def create_accumulator(self):
        from components.binned_metrics import EvalAccumulator
        return EvalAccumulator(*self._settings)

    def add_input(self, acc, element):
        return acc.merge(element)

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        first = next(accumulators)
        for other in accumulators:
            first.merge(other)
        return first

    def extract_output(self, acc):
        return acc


def write_output(acc, path: str) -> str:
    """Temp name in the target's folder, then rename: a reader never sees half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    acc.save(tmp)
    os.replace(tmp, target)
    return str(target)


def run(argv: list[str] | None = None, save_main_session: bool = False) -> dict:
    """Score and fold every held-out row of the window; write --output; return counters."""
    from components.ctr import rawdata
    from components.ctr import slices as S

    args, beam_args = parse_args(argv)
    if args.batch_rows < 1 or args.bootstrap_resamples < 2:
        raise ValueError("--batch-rows must be >= 1 and --bootstrap-resamples >= 2")
    models = _models(args)
    days = json.loads(args.day_dirs)
    if not isinstance(days, list) or not days or not all(isinstance(d, str) for d in days):
        raise ValueError("--day-dirs must be a non-empty JSON list of folders")
    slices = json.loads(args.slices)
    cfg = _candidate_config(models)
    shards = [(i, part) for i, day in enumerate(days) for part in rawdata.span_parts(day, cfg)]
    a = {**vars(args), "span_slice": len(days) > 1}
    topped = [s for s in slices if s not in S.FIXED]
    options = runner.JobOptions(beam_args)
    options.view_as(SetupOptions).save_main_session = save_main_session
    started = time.time()
    with runner.pipeline(options) as pipeline:
        parts = pipeline | "Parts" >> beam.Create(shards) | "Spread" >> beam.Reshuffle()
        if topped and args.top_categories > 0:
            top = (parts
                   | "CountSliceValues" >> beam.ParDo(SliceValueCounts(a, topped))
                   | "SumPerValue" >> beam.CombinePerKey(sum)
                   | "BySlice" >> beam.Map(lambda kv: (kv[0][0], (kv[0][1], kv[1])))
                   | "TopPerSlice" >> beam.combiners.Top.PerKey(args.top_categories, key=_rank)
                   | "AsSets" >> beam.combiners.ToDict()
                   | "Names" >> beam.Map(lambda d: {k: [v for v, _ in vs]
                                                    for k, vs in d.items()}))
        else:
            top = pipeline | "NoTopValues" >> beam.Create([{}])
        _ = (parts
             | "ScoreAndFold" >> beam.ParDo(ScoreAndFold(a), top=beam.pvalue.AsSingleton(top))
             | "Merge" >> beam.CombineGlobally(
                 MergeAccumulators(args.bootstrap_resamples, args.bootstrap_seed))
             | "Write" >> beam.Map(write_output, args.output))
    counters = beam_counters(pipeline.result, NAMESPACE)
    summary = {"parts": len(shards), "rows_scored": counters.get("rows_scored", 0),
               "models": list(models) + ([BAYES] if args.truth else []),
               "output": args.output, "runner": runner.name(options),
               "beam_seconds": round(time.time() - started, 2)}
    log.info("evaluate summary: %s", json.dumps(summary))
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(json.dumps(run()))
