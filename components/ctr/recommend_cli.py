"""`retrain recommend`: the daily recommendations job from a shell, outside Airflow.

Same step as the DAG's task (`components.ctr.recommend.run`), so a user can try it on
their own logs and model before scheduling it, and `--truth-day` measures the result the
way the DAG's quality task does.

Sized for one machine by default: the MAX_USERS most active users against the first
MAX_ITEMS items of the pool (about 2 million pairs, seconds on 2 cores); `--all` scores
every active user against the whole pool, as the DAG does. The columns default to what
the model's feature config and the window say (components.ctr.recommend_roles), printed
before scoring with the plan; a progress line follows every --progress-seconds.
"""
from __future__ import annotations

import json
import sys

MAX_USERS, MAX_ITEMS = 2000, 1000


def add_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "recommend", help="top-K items per active user from a CTR model (a Beam job)",
        description="Score every user seen in the last --active-days days ending at --span "
                    "against the candidate pool with the published CTR model (or "
                    "--model-dir), keep the K best per user and write the partition "
                    "--out atomically: part-*.parquet (user, rank, item, score, "
                    "model_version), inputs/ (the users and items scored), summary.json.")
    p.add_argument("--raw-root", required=True, help="click logs: dt=YYYY-MM-DD/ partitions")
    p.add_argument("--span", required=True, help="newest day of activity read (YYYY-MM-DD)")
    p.add_argument("--out", required=True,
                   help="the partition folder to write (a new folder, or one retrain wrote: "
                        "it is replaced whole)")
    p.add_argument("--registry-root", default=None,
                   help="model registry (default: <RETRAIN_HOME>/registry)")
    p.add_argument("--model-version", type=int, default=None,
                   help="registry version (default: the published one)")
    p.add_argument("--model-dir", default=None, help="an exported model instead")
    p.add_argument("--active-days", type=int, default=7, help="default 7")
    p.add_argument("--pool", choices=["window", "top_per_category"], default="window",
                   help="items seen in those days (default), or the most clicked per category")
    p.add_argument("--pool-size", type=int, default=0,
                   help="window: the M most shown (0: all); top_per_category: M per category")
    p.add_argument("--k", type=int, default=10, help="items per user (default 10)")
    p.add_argument("--max-users", type=int, default=MAX_USERS,
                   help=f"score the N most active users only (default {MAX_USERS}; 0: all)")
    p.add_argument("--max-items", type=int, default=MAX_ITEMS,
                   help=f"score the first N items of the pool only (default {MAX_ITEMS}; "
                        f"0: all)")
    p.add_argument("--all", action="store_true",
                   help="every active user against the whole pool (--max-users 0 "
                        "--max-items 0); the plan line says how long that takes")
    p.add_argument("--progress-seconds", type=float, default=5.0,
                   help="a progress line on stderr this often (default 5; 0: none)")
    p.add_argument("--num-shards", type=int, default=8, help="user shards (default 8)")
    p.add_argument("--workers", type=int, default=1, help="local Beam worker processes")
    p.add_argument("--user-column", default=None,
                   help="the user id input (default: from the model's feature config)")
    p.add_argument("--item-column", default=None,
                   help="the item id input (default: from the model's feature config)")
    p.add_argument("--item-columns", default=None,
                   help="item-side model inputs besides the item id, comma-separated "
                        "(default: the inputs the item decides in the window)")
    p.add_argument("--category-column", default=None,
                   help="one category per item, for --pool top_per_category (default: "
                        "derived)")
    p.add_argument("--context", default=None,
                   help='inputs every pair gets, JSON, e.g. \'{"position": 1}\' (default: '
                        "the inputs neither the user nor the item decides, at their most "
                        "common value)")
    p.add_argument("--exclude-seen", action="store_true",
                   help="never recommend an item the user was shown in those days (a "
                        "rating log: each item is rated once)")
    p.add_argument("--seen-days", type=int, default=0,
                   help="with --exclude-seen: the days whose items count as seen, ending "
                        "at --span (default 0: the --active-days; e.g. 365 for a year's "
                        "memory, read by the Beam job, item ids only)")
    p.add_argument("--seen-max", type=int, default=1000,
                   help="with --exclude-seen: seen items kept per user, the newest "
                        "(default 1000)")
    p.add_argument("--truth-day", default=None,
                   help="also measure precision/recall@K against this later day's clicks, "
                        "beside popularity and item-kNN with paired intervals over users")
    p.add_argument("--min-users", type=int, default=100,
                   help="users with clicks that day a verdict needs (fewer: 'not enough "
                        "evidence'; default 100)")
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:
    from pathlib import Path

    from retrain.common import tf_keras_env
    tf_keras_env.use_keras2()   # scores a SavedModel only: TensorFlow skips Keras 3
    from components.ctr.recommend import RecommendSpec, run
    from components.ctr.recommend_roles import RecommendSettingError
    from retrain.common.errors import BadData
    from retrain.common.paths import artifact_root

    context = None
    if args.context is not None:
        try:
            context = json.loads(args.context)
        except ValueError:
            context = None
        if not isinstance(context, dict):
            raise RecommendSettingError("context", "must be a JSON object, e.g. "
                                        "'{\"position\": 1}'")
    spec = RecommendSpec(
        raw_root=args.raw_root, span=args.span, output_dir=args.out,
        registry_root=args.registry_root or (None if args.model_dir
                                             else str(artifact_root() / "registry")),
        model_version=args.model_version, model_dir=args.model_dir,
        active_days=args.active_days, pool=args.pool, pool_size=args.pool_size, k=args.k,
        user_column=args.user_column, item_column=args.item_column,
        item_columns=(None if args.item_columns is None
                      else [c for c in args.item_columns.split(",") if c]),
        category_column=args.category_column, context=context,
        exclude_seen=args.exclude_seen, seen_days=args.seen_days, seen_max=args.seen_max,
        num_shards=args.num_shards,
        max_users=0 if args.all else args.max_users,
        max_items=0 if args.all else args.max_items,
        progress_seconds=args.progress_seconds, beam_workers=args.workers)
    try:
        summary = run(spec)
        print(f"{summary['users']} users x {summary['pool_items']} items: "
              f"{summary['pairs_scored']} pairs in {summary['seconds']} s -> {args.out}")
        if args.truth_day:
            from components.ctr.recommend_eval import EvaluateSpec, evaluate
            out_file = str(Path(args.out).with_name(Path(args.out).name + ".quality.json"))
            q = evaluate(EvaluateSpec(recommendations_dir=args.out, raw_root=args.raw_root,
                                      day=args.truth_day, out_file=out_file,
                                      min_users=args.min_users))
            print(f"quality: {q['headline']}")
            print(f"quality: {out_file}")
    except BadData as e:
        print(f"retrain recommend: error: {e}", file=sys.stderr)
        return 2
    return 0
