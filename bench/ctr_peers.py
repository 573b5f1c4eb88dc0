"""The CTR model against two peers on the same rows: gradient boosting with target-encoded
ids and a hashed-cross logistic regression, with paired bootstrap intervals.

For each dataset: the window is preprocessed by the project's job, the project's model is
`components.ctr.ps_train` with its defaults (in one process: the model the cluster
trains), and the peers read the same raw rows: training rows are the window's rows that
are not held out (the job's stable-hash split), eval rows every day's held-out rows of
the window (no model of any day trains on them; the gate scores the span's). Peers (scikit-learn):
- `hgb_target_enc`: HistGradientBoostingClassifier on numerics + every categorical column
  target-encoded (`TargetEncoder`, cross-fitted on the training rows);
- `lr_hashed_cross`: L2 logistic regression (lbfgs, C=1) on hashed one-hot categoricals,
  every pairwise categorical cross, and log1p-standardised numerics with missing flags.
Multi-valued and text features are left out of the peers (they see less than the project
model when a config has them; none of the datasets below has). Bayes-optimal figures
where the generator's true click probabilities exist. Intervals: 95 % percentile
bootstrap, paired (peer - project on the same resamples). Prints a table and writes
bench/results/ctr_peers.json (or --results). On generated data it also prints two reference
points: the Bayes-optimal AUC without the generator's user x (category + item) taste term,
and with that term only for users with >= 20 clicks in the training rows (what a model
that learned those users' tastes perfectly could reach).

    .venv/bin/python bench/ctr_peers.py --generator 50000,500000 \\
        --outside fair:/tmp/fair/raw:bench/outside_data/fair.yaml:2025-04-29:60 \\
        --outside movielens:/tmp/ml/raw:bench/outside_data/movielens.yaml:1998-04-22:60
(raw roots: bench/outside_data/README.md)
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
EVAL_PERCENT = 20
TASTE_CLICKS = 20
GEN_START = dt.date(2026, 11, 1)


def _window_rows(raw_root: Path, span: dt.date, days: int, cfg):
    """(train table, eval table, true probabilities or None) of raw rows, split as the
    preprocessing job splits: every day's held-out rows are eval rows here, since no
    model of any day trains on them (more rows, tighter intervals than the span's alone)."""
    import numpy as np
    import pyarrow as pa
    from components.ctr import features as F, rawdata
    train, evals, truth = [], [], []
    known = True   # the generator keeps the true click probabilities; real logs do not
    for i in range(days):
        day_dir = raw_root / f"dt={(span - dt.timedelta(days=days - 1 - i)).isoformat()}"
        table = rawdata.read_span(day_dir, cfg)
        held_out = F.eval_mask(table.column(cfg.example_id), EVAL_PERCENT)
        train.append(table.filter(pa.array(~held_out)))
        evals.append(table.filter(pa.array(held_out)))
        try:
            truth.append(rawdata.true_probabilities(day_dir, evals[-1].column(cfg.example_id)))
        except FileNotFoundError:
            known = False
    return (pa.concat_tables(train), pa.concat_tables(evals),
            np.concatenate(truth) if known else None)


def _columns(cfg):
    numeric = [f.name for f in cfg.features if f.kind == "numeric"]
    categorical = [f.name for f in cfg.features if f.kind == "categorical"]
    return numeric, categorical


def _frame(table, cfg):
    numeric, categorical = _columns(cfg)
    df = table.select(numeric + categorical).to_pandas()
    for c in categorical:
        df[c] = df[c].astype(str)
    return df, table.column(cfg.label).to_numpy().astype(int)


def _hgb(train, y, evals, cfg, seed: int):
    import numpy as np
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.model_selection import KFold
    from sklearn.preprocessing import TargetEncoder
    numeric, categorical = _columns(cfg)
    enc = TargetEncoder(target_type="binary", cv=KFold(5, shuffle=True, random_state=seed))
    x_train = np.hstack([train[numeric].to_numpy(float),
                         enc.fit_transform(train[categorical], y)])
    x_eval = np.hstack([evals[numeric].to_numpy(float), enc.transform(evals[categorical])])
    model = HistGradientBoostingClassifier(max_iter=500, learning_rate=0.1,
                                           early_stopping=True, validation_fraction=0.1,
                                           n_iter_no_change=20, random_state=seed)
    return model.fit(x_train, y).predict_proba(x_eval)[:, 1]


def _hashed(df, cfg, stats=None):
    import numpy as np
    import scipy.sparse as sp
    from sklearn.feature_extraction import FeatureHasher
    numeric, categorical = _columns(cfg)
    values = {c: (c + "=" + df[c]).to_numpy() for c in categorical}
    pairs = [(a, b) for j, a in enumerate(categorical) for b in categorical[j + 1:]]
    hasher = FeatureHasher(n_features=2**20, input_type="string", alternate_sign=False)
    chunks = []
    for start in range(0, len(df), 50_000):   # bounded memory: tokens of 50k rows at a time
        rows = range(start, min(start + 50_000, len(df)))
        chunks.append(hasher.transform(
            [[values[c][i] for c in categorical]
             + [values[a][i] + "|" + values[b][i] for a, b in pairs] for i in rows]))
    hashed = sp.vstack(chunks)
    x = np.log1p(np.clip(df[numeric].to_numpy(float), 0, None))
    missing = np.isnan(x)
    if stats is None:
        stats = (np.nanmean(x, 0), np.nanstd(x, 0) + 1e-9)
    x = np.nan_to_num((x - stats[0]) / stats[1])
    return sp.hstack([hashed, sp.csr_matrix(x), sp.csr_matrix(missing.astype(float))]).tocsr(), \
        stats


def _lr(train, y, evals, cfg, seed: int):
    from sklearn.linear_model import LogisticRegression
    x_train, stats = _hashed(train, cfg)
    x_eval, _ = _hashed(evals, cfg, stats)
    model = LogisticRegression(C=1.0, solver="lbfgs", max_iter=500)
    return model.fit(x_train, y).predict_proba(x_eval)[:, 1]


def _project(raw_root: Path, span: dt.date, days: int, config: str, work: Path,
             evals_table, cfg, options: dict):
    from components.ctr import rawdata
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    from components.ctr.ps_train import PsTrainSpec, run as train
    pre = preprocess(PreprocessSpec(raw_root=str(raw_root), span=span.isoformat(),
                                    output_dir=str(work / "pre"), window_days=days,
                                    eval_percent=EVAL_PERCENT, feature_config=config))
    os.environ.pop("TF_CONFIG", None)
    trained = train(PsTrainSpec(preprocess_dir=pre["output_dir"], out_dir=str(work / "model"),
                                **options))
    return rawdata.predict(trained["model_dir"], rawdata.to_raw_features(evals_table, cfg))


def _taste_references(gen_spec, train_t, eval_t, truth, labels) -> dict:
    """Bayes-optimal AUC without the generator's user x (category + item) taste term, and
    with it only for users with >= TASTE_CLICKS clicks in the training rows: how much of
    the gap any model can close by learning tastes from this much data."""
    import numpy as np
    from components import metrics
    from components.ctr.generate import taste_logits
    logit = np.log(truth / (1 - truth))
    taste = taste_logits(gen_spec, eval_t)
    clicks: dict[str, float] = {}
    for user, click in zip(train_t.column("user_id").to_pylist(),
                           train_t.column("click").to_pylist()):
        clicks[user] = clicks.get(user, 0) + click
    head = np.array([clicks.get(u, 0) >= TASTE_CLICKS
                     for u in eval_t.column("user_id").to_pylist()])
    return {"bayes_without_taste_auc": round(metrics.auc(labels, logit - taste), 4),
            f"bayes_taste_only_for_users_with_{TASTE_CLICKS}_clicks_auc":
                round(metrics.auc(labels, logit - taste * ~head), 4),
            "eval_rows_of_those_users": round(float(head.mean()), 3)}


def evaluate_dataset(name: str, raw_root: Path, config: str, span: dt.date, days: int,
                     work: Path, seed: int = 0, options: dict | None = None,
                     gen_spec=None) -> dict:
    from components import metrics
    from components.ctr import feature_config
    cfg = feature_config.load_for(config)
    t0 = time.time()
    train_t, eval_t, truth = _window_rows(raw_root, span, days, cfg)
    labels = eval_t.column(cfg.label).to_numpy().astype(int)
    scores = {"project": _project(raw_root, span, days, config, work, eval_t, cfg,
                                  options or {})}
    train_df, y = _frame(train_t, cfg)
    eval_df, _ = _frame(eval_t, cfg)
    scores["hgb_target_enc"] = _hgb(train_df, y, eval_df, cfg, seed)
    scores["lr_hashed_cross"] = _lr(train_df, y, eval_df, cfg, seed)
    if truth is not None:
        scores["bayes_optimal"] = truth
    out = {"dataset": name, "project_options": options or "defaults",
           "train_rows": train_t.num_rows, "eval_rows": int(len(labels)),
           "eval_positives": int(labels.sum()), "models": {}}
    for model, s in scores.items():
        m = metrics.binary_metrics(labels, s)
        ci = metrics.bootstrap_ci(labels, s, n_resamples=200, seed=seed,
                                  baseline_probs=None if model == "project" else
                                  scores["project"])
        out["models"][model] = {"auc": m["auc"], "log_loss": m["log_loss"],
                                "auc_ci": [ci["auc"]["low"], ci["auc"]["high"]],
                                "log_loss_ci": [ci["log_loss"]["low"], ci["log_loss"]["high"]],
                                **({"auc_minus_project_ci": [ci["auc_delta"]["low"],
                                                             ci["auc_delta"]["high"]]}
                                   if "auc_delta" in ci else {})}
    if "bayes_optimal" in scores:
        out["project_gap_to_bayes_auc"] = round(
            out["models"]["bayes_optimal"]["auc"] - out["models"]["project"]["auc"], 4)
    if gen_spec is not None and truth is not None:
        out["references"] = _taste_references(gen_spec, train_t, eval_t, truth, labels)
    out["seconds"] = round(time.time() - t0)
    return out


def _print(result: dict) -> None:
    print(f"\n{result['dataset']}: {result['train_rows']:,} training rows, "
          f"{result['eval_rows']:,} eval rows ({result['eval_positives']:,} positive)")
    print(f"  {'model':<16} {'AUC [95% CI]':<26} {'log loss [95% CI]':<28} AUC - project [CI]")
    for model, m in result["models"].items():
        delta = m.get("auc_minus_project_ci")
        print(f"  {model:<16} {m['auc']:.4f} [{m['auc_ci'][0]:.4f}, {m['auc_ci'][1]:.4f}]   "
              f"{m['log_loss']:.4f} [{m['log_loss_ci'][0]:.4f}, {m['log_loss_ci'][1]:.4f}]   "
              + (f"{m['auc'] - result['models']['project']['auc']:+.4f} "
                 f"[{delta[0]:+.4f}, {delta[1]:+.4f}]" if delta else ""))
    if "project_gap_to_bayes_auc" in result:
        print(f"  project's gap to Bayes-optimal AUC: {result['project_gap_to_bayes_auc']:.4f}")
    for key, value in result.get("references", {}).items():
        print(f"  {key}: {value}")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--generator", default="50000,500000",
                   help="generated datasets: rows per day, comma-separated (3-day windows)")
    p.add_argument("--outside", action="append", default=[],
                   help="NAME:RAW_ROOT:FEATURE_CONFIG:SPAN:WINDOW_DAYS (repeatable)")
    p.add_argument("--project-options", default="{}",
                   help="JSON of PsTrainSpec fields for the project model on every dataset, "
                        "e.g. '{\"fm_fields\": [\"user_id\", \"category_id\"]}' (default: "
                        "its defaults and each feature config's model section)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", default=str(RESULTS / "ctr_peers.json"),
                   help="JSON file the figures are written to")
    args = p.parse_args(argv)
    options = json.loads(args.project_options)
    tag = f" (project {json.dumps(options)})" if options else ""
    from components.ctr.generate import GenerateSpec, run as generate
    work = Path(tempfile.mkdtemp(prefix="bench-ctr-peers-"))
    results = []
    try:
        for rows in [int(x) for x in args.generator.split(",") if x]:
            home = work / f"gen-{rows}"
            gen_spec = GenerateSpec(out_root=str(home), start=GEN_START.isoformat(), days=3,
                                    rows_per_day=rows)
            generate(gen_spec)
            results.append(evaluate_dataset(f"generator 3 x {rows:,} rows/day{tag}",
                                            home / "raw" / "ctr", "",
                                            GEN_START + dt.timedelta(days=2), 3, home,
                                            options=options, gen_spec=gen_spec))
            _print(results[-1])
        for spec in args.outside:
            name, raw_root, config, span, days = spec.split(":")
            home = work / name
            home.mkdir()
            results.append(evaluate_dataset(
                name + tag, Path(raw_root), config, dt.date.fromisoformat(span), int(days),
                home, options=options))
            _print(results[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"benchmark": "ctr_peers", "command": "bench/ctr_peers.py " + " ".join(
        sys.argv[1:] if argv is None else argv), "eval_percent": EVAL_PERCENT,
        "datasets": results, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
