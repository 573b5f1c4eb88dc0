"""Daily recommendations: the top K items of every recently active user, scored by the
published CTR model, written as one dated partition.

    python -m components.ctr.recommend --spec '{"raw_root": "var/raw/ctr",
        "span": "2026-11-07", "registry_root": "var/registry",
        "output_dir": "var/recommendations/ctr/dt=2026-11-08"}'

Steps: resolve the model (the registry's published version, or a given one); read the
last `active_days` delivered days with the model's feature config; build the users
(latest user-side columns) and the candidate pool (`recommend_inputs`); write them,
users sharded by a stable hash, into the partition's `inputs/`; run the Beam job
(`beam_jobs.recommend_ctr`) over the shards; check the output's contract
(`recommend_quality.check_output`) and commit the partition atomically with a
`summary.json` naming the model version and every raw day read. A partition that breaks
the contract is never committed. `components.ctr.recommend_eval` measures it once the
next day's clicks have arrived.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

from retrain.common.step import main

log = logging.getLogger("retrain.recommend")

SUMMARY_FILE, INPUTS_DIR = "summary.json", "inputs"


@dataclasses.dataclass
class RecommendSpec:
    raw_root: str                  # the click logs: <raw_root>/dt=YYYY-MM-DD/
    span: str                      # newest day of activity read (the model's span)
    output_dir: str                # the partition, written whole or not at all
    registry_root: str | None = None
    model_name: str = "ctr"
    model_version: int | None = None   # default: the published version
    model_dir: str | None = None       # an exported model instead of the registry
    active_days: int = 7           # users seen in these days are scored
    pool: str = "window"           # "window" or "top_per_category"
    pool_size: int = 0             # window: the most shown M items (0: all seen);
                                   # top_per_category: the M most clicked of each
    k: int = 10
    user_column: str = "user_id"
    item_column: str = "item_id"
    item_columns: list[str] = dataclasses.field(
        default_factory=lambda: ["category_id", "price", "item_age_days"])
    category_column: str = "category_id"
    context: dict = dataclasses.field(default_factory=lambda: {"position": 1})
    exclude_seen: bool = False     # never recommend an item the user was shown in the window
    num_shards: int = 8            # user shards: the job's unit of parallel work
    batch_pairs: int = 16384
    beam_workers: int = 1          # local DirectRunner worker processes
    beam_args: list[str] = dataclasses.field(default_factory=list)  # e.g. another runner


def resolve_model(spec: RecommendSpec) -> tuple[str, int | None]:
    if spec.model_dir:
        return spec.model_dir, spec.model_version
    if not spec.registry_root:
        raise ValueError("give model_dir or registry_root")
    from retrain.common.registry import Registry
    reg = Registry(spec.registry_root)
    version = spec.model_version or reg.current_version(spec.model_name)
    if version is None:
        raise FileNotFoundError(f"model {spec.model_name!r} has no published version in "
                                f"{spec.registry_root}")
    # The published files, checked against their digests at publish (ModelTampered).
    return str(reg.verified_path(spec.model_name, version)), version


def _layout(spec: RecommendSpec, inputs: list[str], config_name: str):
    from components.ctr.recommend_scoring import PairLayout

    named = {"user_column": [spec.user_column], "item_column": [spec.item_column],
             "item_columns": spec.item_columns, "context": list(spec.context)}
    unknown = [f"{key} {c!r}" for key, cols in named.items() for c in cols if c not in inputs]
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not an input of the model (feature config "
                         f"{config_name!r}, inputs {inputs})")
    if spec.k < 1 or spec.num_shards < 1 or spec.active_days < 1:
        raise ValueError("k, num_shards and active_days must be >= 1")
    return PairLayout(spec.user_column, spec.item_column, tuple(spec.item_columns),
                      dict(spec.context))


def _local_workers(n: int) -> list[str]:
    """DirectRunner options for n worker processes (none for one: in-process)."""
    return ([] if n <= 1 else ["--direct_running_mode=multi_processing",
                               f"--direct_num_workers={n}"])


def run(spec: RecommendSpec) -> dict:
    """Score, check and commit one partition; return its summary."""
    import pyarrow.parquet as pq

    from beam_jobs import recommend_ctr
    from beam_jobs.output_commit import output_commit
    from components.ctr import feature_config
    from components.ctr import recommend_inputs as I
    from components.ctr.recommend_quality import check_output
    from retrain.common.atomic import write_json

    from retrain.common.registry import verify_model_dir

    started = time.time()
    model_dir, version = resolve_model(spec)
    verify_model_dir(model_dir)   # a registry version handed over by path: checked too
    cfg = feature_config.for_model_dir(model_dir)
    inputs = [c for c in cfg.raw_columns() if c not in (cfg.label, cfg.example_id)]
    layout = _layout(spec, inputs, cfg.name)
    rows, days = I.read_window(spec.raw_root, spec.span, spec.active_days, cfg)
    user_side = [c for c in layout.user_columns(inputs) if c != spec.user_column]
    users = I.users(rows, spec.user_column, user_side,
                    spec.item_column if spec.exclude_seen else None)
    pool = I.items(rows, cfg.label, spec.item_column, list(spec.item_columns), spec.pool,
                   spec.pool_size, spec.category_column)
    log.info("scoring %d users active in %s..%s against %d candidate items (pool %s)",
             users.num_rows, days[0], days[-1], pool.num_rows, spec.pool)
    with output_commit(spec.output_dir) as tmp:
        shard_dir = Path(tmp) / INPUTS_DIR / recommend_ctr.USERS_DIR
        shard_dir.mkdir(parents=True)
        for i, shard in enumerate(I.shards(users, spec.user_column, spec.num_shards)):
            pq.write_table(shard, shard_dir / f"part-{i:05d}.parquet")
        pq.write_table(pool, Path(tmp) / INPUTS_DIR / recommend_ctr.ITEMS_FILE)
        job = recommend_ctr.run([
            "--inputs-dir", str(Path(tmp) / INPUTS_DIR), "--model-dir", model_dir,
            "--output-dir", tmp, "--k", str(spec.k), "--batch-pairs", str(spec.batch_pairs),
            "--layout", json.dumps(dataclasses.asdict(layout)),
            *(["--model-version", str(version)] if version is not None else []),
            *_local_workers(spec.beam_workers), *spec.beam_args])
        recs = pq.read_table(sorted(str(p) for p in Path(tmp).glob("part-*.parquet")))
        ids = [str(u) for u in users.column(spec.user_column).to_pylist()]
        seen = (dict(zip(ids, users.column(I.SEEN).to_pylist())) if spec.exclude_seen
                else None)
        checked = check_output(recs, ids, [str(i) for i in pool.column(spec.item_column)
                                           .to_pylist()], spec.k, seen)
        seconds = time.time() - started
        summary = {"span": spec.span, "days_read": days, "model_name": spec.model_name,
                   "model_version": version, "model_dir": model_dir, "pool": spec.pool,
                   "pool_items": pool.num_rows, "k": spec.k,
                   "exclude_seen": spec.exclude_seen, **checked, **job,
                   "pairs_per_second": round(job["pairs_scored"] / max(job["beam_seconds"],
                                                                      1e-9), 1),
                   "seconds": round(seconds, 2), "layout": dataclasses.asdict(layout)}
        write_json(Path(tmp) / SUMMARY_FILE, summary)
    log.info("recommendations: %d users x %d items, %d pairs in %.1f s (%.0f pairs/s in the "
             "job) -> %s", checked["users"], pool.num_rows, job["pairs_scored"], seconds,
             summary["pairs_per_second"], spec.output_dir)
    return {**summary, "output_dir": spec.output_dir}


if __name__ == "__main__":
    sys.exit(main(RecommendSpec, run))   # a failed step exits 1: the launcher reads its error
