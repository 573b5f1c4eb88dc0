"""Daily recommendations: the top K items of every recently active user, scored by the
published CTR model, written as one dated partition.

    python -m components.ctr.recommend --spec '{"raw_root": "var/raw/ctr",
        "span": "2026-11-07", "registry_root": "var/registry",
        "output_dir": "var/recommendations/ctr/dt=2026-11-08"}'

Steps: resolve the model (the registry's published version, or a given one); list the
last `active_days` delivered days; settle the column roles (user, item, item side,
context: the spec's, or derived from the feature config and a bounded sample of the
newest rows by `recommend_roles`, with a `RecommendSettingError` naming a setting that
cannot be); build the users (latest user-side columns; the `max_users` most active when
capped; with `exclude_seen` the items they met in the window or the longer `seen_days`,
at most `seen_max`, the newest) and the items' table with the Beam job
`beam_jobs.recommend_profiles` (no process holds the window), users sharded by a stable
hash into the partition's `inputs/`; pick the candidate pool (`recommend_inputs.pool`;
its first `max_items` when capped); say on stderr what will be scored and about how long
it takes; run the Beam job (`beam_jobs.recommend_ctr`) over the shards, a progress line
(done/total, rate, time left) on stderr every `progress_seconds`; check the output's
contract (`recommend_quality.check_output`) and commit the partition atomically with a
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

from components.ctr.recommend_layout import INPUTS_DIR, ITEMS_FILE, USERS_DIR
from retrain.common import tf_keras_env
from retrain.common.step import main

log = logging.getLogger("retrain.recommend")

SUMMARY_FILE = "summary.json"
PROGRESS_DIR = "_progress"     # the workers' counts while the job runs; removed after


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
    # Column roles; None: derived from the model's feature config and the window
    # (components.ctr.recommend_roles), and the plan line says what was derived.
    user_column: str | None = None
    item_column: str | None = None
    item_columns: list[str] | None = None   # item-side inputs besides the item id
    category_column: str | None = None      # top_per_category only
    context: dict | None = None             # inputs every pair gets, e.g. {"position": 1}
    exclude_seen: bool = False     # never recommend an item the user was shown before
    seen_days: int = 0             # exclude_seen: the days whose items count as seen
                                   # (0: the active days; more: a longer memory)
    seen_max: int = 1000           # exclude_seen: at most this many per user, the newest
    max_users: int = 0             # the most active users only (0: every active user)
    max_items: int = 0             # the first items of the pool only (0: the whole pool)
    num_shards: int = 8            # user shards: the job's unit of parallel work
    batch_pairs: int = 16384
    beam_workers: int = 1          # local DirectRunner worker processes
    beam_args: list[str] = dataclasses.field(default_factory=list)  # e.g. another runner
    progress_seconds: float = 30.0  # a progress line on stderr (the task log) this often; 0: none


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


def _check_numbers(spec: RecommendSpec) -> None:
    import datetime as dt

    from components.ctr.recommend_roles import RecommendSettingError

    try:
        dt.date.fromisoformat(spec.span)
    except (TypeError, ValueError):
        raise RecommendSettingError("span", "not a date (YYYY-MM-DD)") from None
    for name in ("k", "num_shards", "active_days", "batch_pairs"):
        if getattr(spec, name) < 1:
            raise RecommendSettingError(name, "must be >= 1")
    if spec.exclude_seen and spec.seen_max < 1:
        raise RecommendSettingError("seen_max", "must be >= 1 with exclude_seen")
    if 0 < spec.seen_days < spec.active_days:
        raise RecommendSettingError("seen_days", f"must be 0 (the active days) or at least "
                                    f"active_days ({spec.active_days})")
    for name in ("max_users", "max_items", "pool_size", "seen_days"):
        if getattr(spec, name) < 0:
            raise RecommendSettingError(name, "must be >= 0 (0: no cap)")


def _require_ctr_model(model_dir: str) -> None:
    """A model exported by another family (the text family's carries assets.extra/
    labels.json) has extra assets but no CTR feature config; a CTR model exported before
    feature configs existed has no assets.extra at all and is scored with the default."""
    from components.ctr import feature_config as F
    from components.ctr.recommend_roles import RecommendSettingError

    d = Path(model_dir)
    if (d / "assets.extra").is_dir() and not (d / F.MODEL_CONFIG_PATH).is_file():
        raise RecommendSettingError("model_dir", f"{d} is not a CTR model exported by retrain "
                                    f"(no {F.MODEL_CONFIG_PATH} beside its other assets)")


def _local_workers(n: int) -> list[str]:
    """DirectRunner options for n worker processes (none for one: in-process)."""
    return ([] if n <= 1 else ["--direct_running_mode=multi_processing",
                               f"--direct_num_workers={n}"])


def run(spec: RecommendSpec) -> dict:
    """Score, check and commit one partition; return its summary."""
    import shutil

    import pyarrow.parquet as pq

    from beam_jobs import recommend_ctr, recommend_profiles
    from components.output_commit import output_commit
    from components.ctr import feature_config
    from components.ctr import recommend_inputs as I
    from components.ctr import recommend_roles as R
    from components.ctr.recommend_progress import (PAIRS_PER_SECOND, Progress, duration,
                                                   plan_line, say)
    from components.ctr.recommend_quality import check_output
    from components.ctr.recommend_scoring import PairLayout
    from retrain.common.atomic import write_json

    from retrain.common.registry import require_saved_model, verify_model_dir

    started = time.time()
    _check_numbers(spec)
    model_dir, version = resolve_model(spec)
    if spec.model_dir:   # a path from the user: a model in it, or refused before any worker
        require_saved_model(model_dir)
        _require_ctr_model(model_dir)
    verify_model_dir(model_dir)   # a registry version handed over by path: checked too
    cfg = feature_config.for_model_dir(model_dir)
    source = R.config_file(model_dir)
    user_col, item_col, derived = R.ids(cfg, source, spec.user_column, spec.item_column)
    days = I.delivered_days(spec.raw_root, spec.span, spec.active_days)
    if not days:
        raise FileNotFoundError(f"no delivered day in {spec.raw_root} for the "
                                f"{spec.active_days} days ending {spec.span}: nothing to "
                                f"recommend from")
    roles = R.sides(I.sample_rows(spec.raw_root, days, cfg), cfg, source, user_col, item_col,
                    item_columns=spec.item_columns, context=spec.context,
                    category_column=spec.category_column, pool=spec.pool, derived=derived)
    layout = PairLayout(user_col, item_col, roles.item_columns, roles.context)
    inputs = R.inputs_of(cfg)
    user_side = [c for c in layout.user_columns(inputs) if c != user_col]
    say(f"columns of feature config {cfg.name or '(unnamed)'!r}: {roles.describe(user_side)}")
    seen_days = (I.delivered_days(spec.raw_root, spec.span, spec.seen_days)
                 if spec.exclude_seen and spec.seen_days > spec.active_days else [])
    with output_commit(spec.output_dir) as tmp:
        inputs_dir = Path(tmp) / INPUTS_DIR
        profiles = recommend_profiles.run([
            "--raw-root", spec.raw_root, "--days", json.dumps(days),
            "--seen-days", json.dumps(seen_days), "--model-dir", model_dir,
            "--output-dir", str(inputs_dir), "--user-column", user_col,
            "--item-column", item_col, "--user-side", json.dumps(user_side),
            "--item-side", json.dumps(list(roles.item_columns)),
            "--seen-max", str(spec.seen_max if spec.exclude_seen else 0),
            "--max-users", str(spec.max_users), "--num-shards", str(spec.num_shards),
            *_local_workers(spec.beam_workers), *spec.beam_args])
        window_items = inputs_dir / recommend_profiles.WINDOW_ITEMS
        whole_pool = I.pool(pq.read_table(window_items), item_col, spec.pool, spec.pool_size,
                            roles.category_column)
        window_items.unlink()
        pool = (whole_pool.slice(0, spec.max_items)
                if 0 < spec.max_items < whole_pool.num_rows else whole_pool)
        pq.write_table(pool, inputs_dir / ITEMS_FILE)
        n_users, n_active = profiles["users_written"], profiles["active_users"]
        total = n_users * pool.num_rows
        everything, capped = n_active * whole_pool.num_rows, []
        if n_users < n_active:
            capped.append(f"the {n_users:,} most active of {n_active:,} users")
        if pool.num_rows < whole_pool.num_rows:
            capped.append(f"the first {pool.num_rows:,} of {whole_pool.num_rows:,} pool items")
        say(plan_line(n_users, pool.num_rows)
            + (f" (capped: {', '.join(capped)}; all of them, {everything:,} pairs, about "
               f"{duration(everything / PAIRS_PER_SECOND)}, with max_users and max_items 0: "
               f"retrain recommend --all)" if capped else ""))
        log.info("scoring %d users active in %s..%s against %d candidate items (pool %s)",
                 n_users, days[0], days[-1], pool.num_rows, spec.pool)
        progress_dir = Path(tmp) / PROGRESS_DIR
        progress_dir.mkdir()
        with Progress(total, lambda: recommend_ctr.pairs_done(progress_dir),
                      spec.progress_seconds):
            job = recommend_ctr.run([
                "--inputs-dir", str(Path(tmp) / INPUTS_DIR), "--model-dir", model_dir,
                "--output-dir", tmp, "--k", str(spec.k), "--batch-pairs", str(spec.batch_pairs),
                "--layout", json.dumps(dataclasses.asdict(layout)),
                "--progress-dir", str(progress_dir),
                *(["--model-version", str(version)] if version is not None else []),
                *_local_workers(spec.beam_workers), *spec.beam_args])
        shutil.rmtree(progress_dir, ignore_errors=True)
        recs = pq.read_table(sorted(str(p) for p in Path(tmp).glob("part-*.parquet")))
        users = pq.read_table(sorted(str(p) for p in (inputs_dir / USERS_DIR)
                                     .glob("part-*.parquet")),
                              columns=[user_col, *([I.SEEN] if spec.exclude_seen else [])])
        ids = [str(u) for u in users.column(user_col).to_pylist()]
        seen = (dict(zip(ids, users.column(I.SEEN).to_pylist())) if spec.exclude_seen
                else None)
        checked = check_output(recs, ids, [str(i) for i in pool.column(item_col)
                                           .to_pylist()], spec.k, seen)
        seconds = time.time() - started
        summary = {"span": spec.span, "days_read": days, "model_name": spec.model_name,
                   "model_version": version, "model_dir": model_dir, "pool": spec.pool,
                   "pool_items": pool.num_rows, "k": spec.k,
                   "active_users": n_active, "pool_items_uncapped": whole_pool.num_rows,
                   "max_users": spec.max_users, "max_items": spec.max_items,
                   "exclude_seen": spec.exclude_seen,
                   "seen_days_read": (seen_days or days) if spec.exclude_seen else [],
                   "seen_max": spec.seen_max if spec.exclude_seen else 0,
                   "profiles_seconds": profiles["beam_seconds"], **checked, **job,
                   "pairs_per_second": round(job["pairs_scored"] / max(job["beam_seconds"],
                                                                      1e-9), 1),
                   "seconds": round(seconds, 2), "layout": dataclasses.asdict(layout),
                   "derived_settings": list(roles.derived),
                   "category_column": roles.category_column}
        write_json(Path(tmp) / SUMMARY_FILE, summary)
    log.info("recommendations: %d users x %d items, %d pairs in %.1f s (%.0f pairs/s in the "
             "job) -> %s", checked["users"], pool.num_rows, job["pairs_scored"], seconds,
             summary["pairs_per_second"], spec.output_dir)
    return {**summary, "output_dir": spec.output_dir}


if __name__ == "__main__":
    tf_keras_env.use_keras2()   # loads a SavedModel only: TensorFlow skips Keras 3
    sys.exit(main(RecommendSpec, run))   # a failed step exits 1: the launcher reads its error
