"""The recommendation job's inputs from the raw logs, as a Beam job: one profile per user
active in the window, sharded by a stable hash of the user id, and one row per item.

Each element is one raw part file; a worker reads it a batch at a time with the family's
readers (the rows preprocessing accepted) and turns each batch into per-user and
per-item tallies (`components.ctr.recommend_profiles`), which combine per key. So no
process holds the window (DESIGN rule 24): a worker holds one batch, and a key's
accumulator is bounded (one row of values, counts, at most `--seen-max` seen items).

- users (`<output>/users/part-<shard>.parquet`): the user id and their latest user-side
  values; with `--seen-max` > 0 also `_seen`, the distinct items of their rows in the
  seen days (`--seen-days`, the active days included), at most `--seen-max`, the newest
  kept. Only users with a row in the active days; with `--max-users` > 0 the ones with
  the most rows there (ties: the smallest id as text). Shard = `recommend_inputs.shard_of`.
- items (`<output>/window_items.parquet`): every item of the active days with its latest
  item-side values, clicks and impressions; the caller picks the candidate pool from it.

    python -m beam_jobs.recommend_profiles --raw-root var/raw/ctr \\
        --days '["2026-11-06", "2026-11-07"]' --model-dir MODEL --output-dir /tmp/inputs \\
        --user-column user_id --item-column item_id --user-side '["device"]' \\
        --item-side '["category_id"]'
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import time
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import SetupOptions

from beam_jobs import runner
from beam_jobs.metrics import counters as beam_counters
from components.ctr import recommend_profiles as P
from components.ctr.recommend_layout import USERS_DIR

log = logging.getLogger(__name__)

NAMESPACE = "retrain.recommend_profiles"
WINDOW_ITEMS = "window_items.parquet"
FLUSH_KEYS = 200_000    # users + items a reader holds before it emits their tallies


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--raw-root", required=True, help="the click logs: <raw-root>/dt=DAY/")
    p.add_argument("--days", required=True,
                   help="JSON list of the active days, oldest first (delivered ones only)")
    p.add_argument("--seen-days", default="[]",
                   help="JSON list of older days whose items count as seen, oldest first")
    p.add_argument("--model-dir", required=True,
                   help="the model whose feature config says how to read the logs")
    p.add_argument("--output-dir", required=True, help=f"{USERS_DIR}/ and {WINDOW_ITEMS} go here")
    p.add_argument("--user-column", required=True)
    p.add_argument("--item-column", required=True)
    p.add_argument("--user-side", default="[]", help="JSON list of user-side columns")
    p.add_argument("--item-side", default="[]", help="JSON list of item-side columns")
    p.add_argument("--seen-max", type=int, default=0,
                   help="seen items kept per user, the newest (0: no seen lists)")
    p.add_argument("--max-users", type=int, default=0,
                   help="only the users with the most active rows (0: all)")
    p.add_argument("--num-shards", type=int, default=8, help="user shards written")
    return p.parse_known_args(argv)


class ReadPart(beam.DoFn):
    """(day index, part index, path, active) -> user and item tallies. A part's batches
    are merged per key before they are emitted (a user met in every batch of a part is
    one element, not one per batch: most of the job's cost is per element), flushed
    whenever `FLUSH_KEYS` users are held, so a worker's memory stays bounded by that,
    not by the part."""

    def __init__(self, a: dict):
        self._a = a
        self._rows = Metrics.counter(NAMESPACE, "rows_read")

    def setup(self):
        from components.ctr import feature_config
        self._cfg = feature_config.for_model_dir(self._a["model_dir"])

    def process(self, element):
        from components.ctr import rawdata
        import pyarrow as pa

        day, part, path, active = element
        a, first, seen_max = self._a, 0, self._a["seen_max"]
        users: dict = {}
        items: dict = {}
        for batch in rawdata.part_batches(path, self._cfg):
            table = pa.Table.from_batches([batch])
            for user, tally in P.part_users(table, day, part, first, a["user_column"],
                                            a["user_side"], a["item_column"], seen_max,
                                            active):
                users[user] = P.merge_users(users.get(user), tally, seen_max)
            if active:
                for item, tally in P.part_items(table, day, part, first, a["item_column"],
                                                a["item_side"], self._cfg.label):
                    items[item] = P.merge_items(items.get(item), tally)
            first += batch.num_rows
            self._rows.inc(batch.num_rows)
            if len(users) + len(items) >= FLUSH_KEYS:
                yield from _flush(users, items)
        yield from _flush(users, items)


def _flush(users: dict, items: dict):
    for user, tally in users.items():
        yield beam.pvalue.TaggedOutput("users", (user, tally))
    for item, tally in items.items():
        yield beam.pvalue.TaggedOutput("items", (item, tally))
    users.clear()
    items.clear()


class MergeUsers(beam.CombineFn):
    def __init__(self, seen_max: int):
        self._seen_max = seen_max

    def create_accumulator(self):
        return None

    def add_input(self, acc, tally):
        return P.merge_users(acc, tally, self._seen_max)

    def merge_accumulators(self, accs):
        return functools.reduce(lambda a, b: P.merge_users(a, b, self._seen_max), accs, None)

    def extract_output(self, acc):
        return acc


class MergeItems(beam.CombineFn):
    def create_accumulator(self):
        return None

    def add_input(self, acc, tally):
        return P.merge_items(acc, tally)

    def merge_accumulators(self, accs):
        return functools.reduce(P.merge_items, accs, None)

    def extract_output(self, acc):
        return acc


def _rank(kv) -> tuple:
    """Most active first, ties by the id as text (smallest = best under reverse Top)."""
    return (-kv[1].rows, str(kv[0]))


class WriteShard(beam.DoFn):
    """(shard, [(user, tally)]) -> one Parquet file of that shard's users, sorted by id."""

    def __init__(self, a: dict):
        self._a = a
        self._users = Metrics.counter(NAMESPACE, "users_written")

    def setup(self):
        from components.ctr import feature_config
        self._cfg = feature_config.for_model_dir(self._a["model_dir"])

    def process(self, element):
        import pyarrow as pa
        import pyarrow.parquet as pq

        from components.ctr.recommend_inputs import SEEN

        shard, users = element
        a = self._a
        users = sorted(users, key=lambda kv: kv[0])
        extra = ({SEEN: (pa.list_(pa.string()), [sorted(t.seen) for _, t in users])}
                 if a["seen_max"] > 0 else {})
        table = _table(self._cfg, a["user_column"], a["user_side"], users, extra)
        folder = Path(a["output_dir"]) / USERS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / f"part-{shard:05d}.parquet")
        self._users.inc(table.num_rows)


def _table(cfg, key: str, side: list[str], tallies: list, extra: dict):
    """(key, tally) pairs as a table: the key and side columns typed as the raw readers
    type them, then `extra` columns (name -> (type, values))."""
    import pyarrow as pa

    from components.ctr.rawformat import RawLayout
    from components.ctr.rawread import batch_schema

    raw = batch_schema(RawLayout.of(cfg))
    data = {key: [k for k, _ in tallies]}
    for i, c in enumerate(side):
        data[c] = [t.values[i] for _, t in tallies]
    fields = [raw.field(c) for c in [key, *side]]
    for name, (kind, values) in extra.items():
        data[name] = values
        fields.append(pa.field(name, kind))
    return pa.table(data, schema=pa.schema(fields))


def _write_items(tallies: list, a: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from components.ctr import feature_config
    from components.ctr.recommend_inputs import CLICKS, IMPRESSIONS

    tallies = sorted(tallies, key=lambda kv: str(kv[0]))
    table = _table(feature_config.for_model_dir(a["model_dir"]), a["item_column"],
                   a["item_side"], tallies,
                   {CLICKS: (pa.int64(), [t.clicks for _, t in tallies]),
                    IMPRESSIONS: (pa.int64(), [t.impressions for _, t in tallies])})
    Path(a["output_dir"]).mkdir(parents=True, exist_ok=True)
    pq.write_table(table, Path(a["output_dir"]) / WINDOW_ITEMS)


def _parts(raw_root: str, days: list[str], cfg) -> list[tuple]:
    from components.ctr import rawdata
    from retrain.common.paths import partition

    return [(d, p, path) for d, day in enumerate(days)
            for p, path in enumerate(rawdata.span_parts(partition(raw_root, day), cfg))]


def run(argv: list[str] | None = None, save_main_session: bool = False) -> dict:
    """Build the users' shards and the items' table; return the job's counts."""
    from components.ctr import feature_config
    from components.ctr.recommend_inputs import shard_of

    args, beam_args = parse_args(argv)
    a = vars(args)
    for name in ("days", "seen_days", "user_side", "item_side"):
        a[name] = json.loads(a[name])
    if not a["days"]:
        raise ValueError("--days names no day")
    if a["num_shards"] < 1 or a["seen_max"] < 0 or a["max_users"] < 0:
        raise ValueError("--num-shards must be >= 1, --seen-max and --max-users >= 0")
    cfg = feature_config.for_model_dir(a["model_dir"])
    older = [d for d in a["seen_days"] if d not in a["days"]] if a["seen_max"] else []
    parts = ([(d, p, path, False) for d, p, path in _parts(a["raw_root"], older, cfg)]
             + [(d + len(older), p, path, True)
                for d, p, path in _parts(a["raw_root"], a["days"], cfg)])
    options = runner.JobOptions(beam_args)
    options.view_as(SetupOptions).save_main_session = save_main_session
    started = time.time()
    with runner.pipeline(options) as pipeline:
        tallies = (pipeline
                   | "Parts" >> beam.Create(parts)
                   | "Spread" >> beam.Reshuffle()
                   | "Read" >> beam.ParDo(ReadPart(a)).with_outputs("users", "items"))
        users = (tallies.users
                 | "MergeUsers" >> beam.CombinePerKey(MergeUsers(a["seen_max"]))
                 | "Active" >> beam.Filter(lambda kv: kv[1].rows > 0))
        _ = (users
             | "CountActive" >> beam.combiners.Count.Globally()
             | "Report" >> beam.Map(lambda n: Metrics.counter(NAMESPACE, "active_users")
                                    .inc(n)))
        if a["max_users"]:
            keep = (users
                    | "MostActive" >> beam.combiners.Top.Of(a["max_users"], key=_rank,
                                                            reverse=True)
                    | "Ids" >> beam.Map(lambda top: {u for u, _ in top}))
            users = users | "Cap" >> beam.Filter(lambda kv, ids: kv[0] in ids,
                                                 ids=beam.pvalue.AsSingleton(keep))
        _ = (users
             | "Shard" >> beam.Map(lambda kv, n: (int(shard_of([kv[0]], n)[0]), kv),
                                   n=a["num_shards"])
             | "ByShard" >> beam.GroupByKey()
             | "WriteShards" >> beam.ParDo(WriteShard(a)))
        _ = (tallies.items
             | "MergeItems" >> beam.CombinePerKey(MergeItems())
             | "AllItems" >> beam.combiners.ToList()
             | "WriteItems" >> beam.Map(_write_items, a))
    counters = beam_counters(pipeline.result, NAMESPACE)
    summary = {"parts": len(parts), "rows_read": counters.get("rows_read", 0),
               "active_users": counters.get("active_users", 0),
               "users_written": counters.get("users_written", 0),
               "runner": runner.name(options), "beam_seconds": round(time.time() - started, 2)}
    log.info("recommend profiles: %s", json.dumps(summary))
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print(json.dumps(run(), indent=2))
