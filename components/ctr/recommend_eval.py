"""How good was a day's recommendations partition? Measured against a later day's clicks.

    python -m components.ctr.recommend_eval --spec '{"recommendations_dir":
        "var/recommendations/ctr/dt=2026-11-08", "raw_root": "var/raw/ctr",
        "day": "2026-11-08", "out_file": "/tmp/quality.json"}'

Why a step of its own: the truth (the clicks of the day the lists were for) arrives a day
after the lists, so the DAG measures when that day is delivered. The figures
(`recommend_quality`: precision/recall@K beside popularity and item-kNN built by the
lists' own rules, paired intervals over users, a verdict per baseline that needs
`min_users` users, and a one-line `headline`) go to `out_file`, never into the committed
partition. The baselines read the window the partition was made from (its `days_read`:
the clicks for item-kNN) and, with exclude_seen, the seen items its users carried.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from components.ctr.recommend import SUMMARY_FILE
from components.ctr.recommend_layout import INPUTS_DIR, ITEMS_FILE, USERS_DIR
from retrain.common import tf_keras_env
from retrain.common.step import main

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("retrain.recommend")


@dataclasses.dataclass
class EvaluateSpec:
    recommendations_dir: str       # a committed partition of `run`
    raw_root: str
    day: str                       # the day whose clicks are the truth (after the span)
    out_file: str                  # where quality.json goes (the run's folder)
    min_users: int = 100           # fewer users with clicks: "not enough evidence"
    knn_items: int = 2000          # item-kNN's candidates: the most clicked pool items
    n_resamples: int = 1000        # bootstrap resamples of the paired intervals
    seed: int = 0


def _scores_of(folder: Path, summary: dict, users: set[str]) -> dict[str, dict[str, float]]:
    """Model score of every pool item for these users (from the partition's own inputs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from components.ctr.recommend_scoring import PairLayout, PairScorer

    layout = PairLayout.from_dict(summary["layout"])
    profiles = pq.read_table(sorted(str(p) for p in (folder / INPUTS_DIR / USERS_DIR)
                                    .glob("part-*.parquet")))
    wanted = pa.array([str(u) in users for u in profiles.column(layout.user_column)
                       .to_pylist()])
    scorer = PairScorer(summary["model_dir"], pq.read_table(folder / INPUTS_DIR / ITEMS_FILE),
                        layout, summary["k"])
    items = scorer.item_ids
    return {str(u): dict(zip(items, row.tolist()))
            for ids, block in scorer.score_blocks(profiles.filter(wanted))
            for u, row in zip(ids, block)}


def measure(spec: EvaluateSpec) -> tuple["pd.DataFrame", "pd.DataFrame", dict]:
    """Per-user rows of a partition against `day`'s clicks (`recommend_quality`'s
    `user_metrics` and `held_out_metrics`) and the partition's summary; a bench pools
    the rows of several days before `summarise`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from components.ctr import feature_config, rawdata
    from components.ctr import recommend_inputs as I
    from components.ctr.recommend_quality import held_out_metrics, user_metrics
    from retrain.common.atomic import read_json
    from retrain.common.paths import partition

    folder = Path(spec.recommendations_dir)
    summary = read_json(folder / SUMMARY_FILE)
    if spec.day <= summary["span"]:
        raise ValueError(f"day {spec.day} is not after the recommendations' span "
                         f"{summary['span']}: its clicks may have trained the model")
    cfg = feature_config.for_model_dir(summary["model_dir"])
    lay = summary["layout"]
    user_col, item_col = lay["user_column"], lay["item_column"]
    next_day = rawdata.read_span(partition(spec.raw_root, spec.day), cfg)
    clickers = {str(u) for u, y in zip(next_day.column(user_col).to_pylist(),
                                       next_day.column(cfg.label).to_pylist()) if y}
    recs = pq.read_table(sorted(str(p) for p in folder.glob("part-*.parquet")))
    pool = pq.read_table(folder / INPUTS_DIR / ITEMS_FILE)
    window = pa.concat_tables([
        rawdata.read_span(partition(spec.raw_root, d), cfg).select([user_col, item_col,
                                                                    cfg.label])
        for d in summary["days_read"]])
    seen = None
    if summary.get("exclude_seen"):
        users = pq.read_table(sorted(str(p) for p in (folder / INPUTS_DIR / USERS_DIR)
                                     .glob("part-*.parquet")), columns=[user_col, I.SEEN])
        seen = dict(zip(map(str, users.column(user_col).to_pylist()),
                        users.column(I.SEEN).to_pylist()))
    args = dict(user_column=user_col, item_column=item_col, label=cfg.label,
                k=summary["k"], clicks_column=I.CLICKS)
    frame = user_metrics(recs, pool, next_day, window=window, seen=seen,
                         knn_items=spec.knn_items, **args)
    scored = {str(u) for u in recs.column("user").to_pylist()}
    held = held_out_metrics(scored, pool, next_day,
                            _scores_of(folder, summary, clickers & scored), **args)
    return frame, held, summary


def evaluate(spec: EvaluateSpec) -> dict:
    """Precision/recall@K of a partition against `day`'s clicks, beside popularity and
    item-kNN, with paired intervals and a verdict per baseline."""
    from components.ctr.recommend_quality import summarise
    from retrain.common.atomic import write_json

    frame, held, summary = measure(spec)
    result = summarise(frame, held, k=summary["k"], min_users=spec.min_users,
                       n_resamples=spec.n_resamples, seed=spec.seed,
                       exclude_seen=bool(summary.get("exclude_seen")))
    result.update(day=spec.day, span=summary["span"], model_version=summary["model_version"],
                  quality_file=spec.out_file)
    write_json(spec.out_file, result)
    log.info("quality of %s's lists on %s's clicks: %s", summary["span"], spec.day,
             result["headline"])
    held_out = result["held_out_impressions"]
    if held_out["users_evaluated"]:
        log.info("held-out impressions: precision@%d %.4f (popularity %.4f), %s, over %d "
                 "users", result["k"], held_out["model"]["precision_at_k"],
                 held_out["popularity"]["precision_at_k"],
                 held_out["vs_popularity"]["verdict"], held_out["users_evaluated"])
    return result


if __name__ == "__main__":
    tf_keras_env.use_keras2()   # loads a SavedModel only: TensorFlow skips Keras 3
    sys.exit(main(EvaluateSpec, evaluate))   # a failed step exits 1: the launcher reads its error
