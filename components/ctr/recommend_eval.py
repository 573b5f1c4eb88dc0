"""How good was a day's recommendations partition? Measured against a later day's clicks.

    python -m components.ctr.recommend_eval --spec '{"recommendations_dir":
        "var/recommendations/ctr/dt=2026-11-08", "raw_root": "var/raw/ctr",
        "day": "2026-11-08", "out_file": "/tmp/quality.json"}'

Why a step of its own: the truth (the clicks of the day the lists were for) arrives a day
after the lists, so the DAG measures when that day is delivered. The figures
(`recommend_quality.quality`: precision/recall@K beside popularity, on the pool and on
the held-out impressions) go to `out_file`, never into the committed partition.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

from components.ctr.recommend import SUMMARY_FILE
from components.ctr.recommend_layout import INPUTS_DIR, ITEMS_FILE, USERS_DIR
from retrain.common.step import main

log = logging.getLogger("retrain.recommend")


@dataclasses.dataclass
class EvaluateSpec:
    recommendations_dir: str       # a committed partition of `run`
    raw_root: str
    day: str                       # the day whose clicks are the truth (after the span)
    out_file: str                  # where quality.json goes (the run's folder)


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


def evaluate(spec: EvaluateSpec) -> dict:
    """Precision/recall@K of a partition against `day`'s clicks, beside popularity."""
    import pyarrow.parquet as pq

    from components.ctr import feature_config, rawdata
    from components.ctr.recommend_inputs import CLICKS
    from components.ctr.recommend_quality import quality
    from retrain.common.atomic import read_json, write_json
    from retrain.common.paths import partition

    folder = Path(spec.recommendations_dir)
    summary = read_json(folder / SUMMARY_FILE)
    if spec.day <= summary["span"]:
        raise ValueError(f"day {spec.day} is not after the recommendations' span "
                         f"{summary['span']}: its clicks may have trained the model")
    cfg = feature_config.for_model_dir(summary["model_dir"])
    lay = summary["layout"]
    next_day = rawdata.read_span(partition(spec.raw_root, spec.day), cfg)
    clickers = {str(u) for u, y in zip(next_day.column(lay["user_column"]).to_pylist(),
                                       next_day.column(cfg.label).to_pylist()) if y}
    recs = pq.read_table(sorted(str(p) for p in folder.glob("part-*.parquet")))
    result = quality(recs, pq.read_table(folder / INPUTS_DIR / ITEMS_FILE), next_day,
                     _scores_of(folder, summary, clickers), user_column=lay["user_column"],
                     item_column=lay["item_column"], label=cfg.label, k=summary["k"],
                     clicks_column=CLICKS)
    result.update(day=spec.day, span=summary["span"], model_version=summary["model_version"],
                  quality_file=spec.out_file)
    write_json(spec.out_file, result)
    for way in ("held_out_impressions", "pool"):
        r = result[way]
        log.info("%s: precision@%d %.4f (popularity %.4f), recall@%d %.4f (popularity %.4f) "
                 "over %d users who clicked on %s", way, result["k"],
                 r["model"]["precision_at_k"] or 0, r["popularity"]["precision_at_k"] or 0,
                 result["k"], r["model"]["recall_at_k"] or 0,
                 r["popularity"]["recall_at_k"] or 0, r["users_evaluated"], spec.day)
    return result


if __name__ == "__main__":
    sys.exit(main(EvaluateSpec, evaluate))   # a failed step exits 1: the launcher reads its error
