"""Which existing training options let the CTR model learn users' tastes (issue 44, item 1):
a sweep of id-field options on the generator, every variant scored on the same eval rows.

Why: the generator's click logit holds user x (category + item) taste terms that the
default model (a bias per user and item id; category, device, hour, position in the MLP)
cannot represent. This bench trains variants of `components.ctr.ps_train` (factorization
crosses, id embeddings in the MLP, a frequency-filtered user vocabulary, hash bucket
counts, prior strengths, budgets) on one generated 3-day window and reports each one's AUC,
log loss and paired 95 % bootstrap interval of (variant - baseline) AUC on the same
held-out rows, with the Bayes-optimal and taste references of `bench/ctr_peers.py` beside
them, and how the eval rows' ids share hash buckets at each bucket count swept. The window, the
eval rows, the scoring and the references are ctr_peers's (imported, not copied).

Generation and preprocessing happen once per feature config; each variant trains in this
process. `--work DIR` keeps the data, the preprocessing outputs and every variant's eval
scores there, so a later run with more variants trains only the new ones (a variant's
cache key is its options).

    .venv/bin/python bench/ctr_id_sweep.py --rows-per-day 500000 --work /tmp/ctr-id-sweep
    .venv/bin/python bench/ctr_id_sweep.py --rows-per-day 100000 --only baseline,fm_uc_l2_1 \\
        --results /tmp/ctr_id_sweep_100k.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TARGET_AUC = 0.8046   # issue 44: halfway from today's 0.8001 to the frequent-user-taste 0.8092

UIC = ["user_id", "item_id", "category_id"]
UC = ["user_id", "category_id"]
DEEP = ["category_id", "device", "hour", "position"]


def user_vocab(threshold: int, oov_buckets: int = 1024) -> dict:
    """user_id as a vocabulary of the ids seen >= `threshold` times in the window, the rest
    hashed into overflow buckets (instead of 2^18 hash buckets any two ids may share)."""
    return {"user_id": {"transform": "vocabulary", "top_k": 300_000,
                        "frequency_threshold": threshold, "oov_buckets": oov_buckets}}


def id_buckets(log2: int) -> dict:
    """user_id and item_id hashed into 2^log2 buckets each (the generated config: 2^18 and
    2^17, where 44 % of the 3 x 500k window's training user ids and 58 % of its item ids
    share a bucket: `bucket_sharing`)."""
    return {k: {"transform": "hash", "hash_buckets": 1 << log2} for k in ("user_id", "item_id")}


FM_BEST = {"fm_fields": UC, "fm_l2": 5.0, "fm_dim": 6}
# The generator's own prior strengths (precision 1/variance, summed-loss units like id_l2):
# a user's bias beside its past-clicks feature sd 0.2 * sqrt(1 - (0.8 / 1.1)^2) -> 53; an
# item's bias with its drift sqrt(0.15^2 + 0.15^2 / 2) -> 30 (the config's: 10 and 5).
ID_L2_TRUE = {"user_id": 50.0, "item_id": 30.0}


# name -> {"train": PsTrainSpec options, "features": per-field feature-config overrides}.
# Kept in full, the ones that did not help included: the JSON records every one.
VARIANTS: dict[str, dict] = {
    "baseline": {"train": {}},
    "fm_uic_l2_10": {"train": {"fm_fields": UIC, "fm_l2": 10.0}},
    "fm_uic_l2_1": {"train": {"fm_fields": UIC, "fm_l2": 1.0}},
    "fm_uic_l2_0.1": {"train": {"fm_fields": UIC, "fm_l2": 0.1}},
    "fm_uic_l2_1_e6_lr0.03": {"train": {"fm_fields": UIC, "fm_l2": 1.0, "epochs": 6,
                                         "learning_rate": 0.03}},
    "fm_uc_l2_1": {"train": {"fm_fields": UC, "fm_l2": 1.0}},
    "deep_ui8_l2_1": {"train": {"deep_fields": DEEP + ["user_id", "item_id"],
                                "embedding_dims": {"user_id": 8, "item_id": 8},
                                "embedding_l2": 1.0}},
    "deep_ui16_l2_1": {"train": {"deep_fields": DEEP + ["user_id", "item_id"],
                                 "embedding_dims": {"user_id": 16, "item_id": 16},
                                 "embedding_l2": 1.0}},
    "fm_uc_l2_3": {"train": {"fm_fields": UC, "fm_l2": 3.0}},
    "fm_uc_l2_10_dim6": {"train": {"fm_fields": UC, "fm_l2": 10.0, "fm_dim": 6}},
    "baseline_e6": {"train": {"epochs": 6}},
    # One pass: the factor models' validation loss rises from the end of the first pass on
    # (fm_uc_l2_1: 0.14187 at step 1040 of 3164, one pass = ~1,054 steps; 0.14366 at the end).
    "baseline_e1": {"train": {"epochs": 1}},
    "fm_uc_l2_10_e1": {"train": {"fm_fields": UC, "fm_l2": 10.0, "epochs": 1}},
    "fm_uc_l2_1_e1": {"train": {"fm_fields": UC, "fm_l2": 1.0, "epochs": 1}},
    "fm_uc_l2_0.1_e1": {"train": {"fm_fields": UC, "fm_l2": 0.1, "epochs": 1}},
    "fm_uic_l2_1_e1": {"train": {"fm_fields": UIC, "fm_l2": 1.0, "epochs": 1}},
    # A strong prior, so no early stop; the rest of the small gain it gave
    "fm_uc_l2_5_dim6": {"train": {"fm_fields": UC, "fm_l2": 5.0, "fm_dim": 6}},
    "fm_uc_l2_30_dim6": {"train": {"fm_fields": UC, "fm_l2": 30.0, "fm_dim": 6}},
    "fm_uc_l2_10_dim6_e6": {"train": {"fm_fields": UC, "fm_l2": 10.0, "fm_dim": 6,
                                      "epochs": 6}},
    "fm_uic_l2_10_dim6": {"train": {"fm_fields": UIC, "fm_l2": 10.0, "fm_dim": 6}},
    "fm_uc_l2_10_dim6_user_vocab20": {"train": {"fm_fields": UC, "fm_l2": 10.0, "fm_dim": 6},
                                      "features": user_vocab(20)},
    # Adagrad (the classic optimizer of sparse factorization models): shrinking steps per row
    "baseline_adagrad_lr0.05": {"train": {"optimizer": "adagrad", "learning_rate": 0.05}},
    "fm_uc_l2_1_adagrad_lr0.05": {"train": {"fm_fields": UC, "fm_l2": 1.0,
                                            "optimizer": "adagrad", "learning_rate": 0.05}},
    "fm_uic_l2_1_user_vocab5": {"train": {"fm_fields": UIC, "fm_l2": 1.0},
                                "features": user_vocab(5)},
    "fm_uc_l2_1_user_vocab100": {"train": {"fm_fields": UC, "fm_l2": 1.0},
                                 "features": user_vocab(100)},
    # Fewer hash collisions: with 2^18 / 2^17 buckets a bucket's bias mixes unrelated ids
    # and an id never seen in training takes a stranger's bias.
    "hash22": {"train": {}, "features": id_buckets(22)},
    "hash22_fm_uc_l2_5_dim6": {"train": FM_BEST, "features": id_buckets(22)},
    "hash22_fm_uc_l2_10_dim6": {"train": {**FM_BEST, "fm_l2": 10.0},
                                "features": id_buckets(22)},
    "hash22_id_l2_50_30": {"train": {"id_l2": ID_L2_TRUE}, "features": id_buckets(22)},
    "hash22_id_l2_3_2": {"train": {"id_l2": {"user_id": 3.0, "item_id": 2.0}},
                         "features": id_buckets(22)},
    "hash22_fm_uc_l2_5_dim6_id_l2_50_30": {"train": {**FM_BEST, "id_l2": ID_L2_TRUE},
                                           "features": id_buckets(22)},
    "hash22_fm_uic_l2_10_dim6": {"train": {**FM_BEST, "fm_fields": UIC, "fm_l2": 10.0},
                                 "features": id_buckets(22)},
    "hash20": {"train": {}, "features": id_buckets(20)},
    "hash20_fm_uc_l2_5_dim6": {"train": FM_BEST, "features": id_buckets(20)},
    "hash21": {"train": {}, "features": id_buckets(21)},
    "hash21_fm_uc_l2_5_dim6": {"train": FM_BEST, "features": id_buckets(21)},
}


def variant_key(variant: dict) -> str:
    """Cache key of a variant: its options, so an edited variant trains again."""
    text = json.dumps(variant, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def feature_config_file(overrides: dict, work: Path) -> str:
    """"" for the generated logs' config, else a copy of it with these fields' transforms
    replaced, written under `work` (preprocessing reads a config file)."""
    if not overrides:
        return ""
    from components.ctr import feature_config
    cfg = feature_config.default().to_dict()
    for f in cfg["features"]:
        change = overrides.get(f["name"])
        if change:
            kept = {k: f[k] for k in ("name", "kind", "dtype") if k in f}
            f.clear()
            f.update(kept, **change)
    path = work / f"features-{variant_key(overrides)}.json"
    path.write_text(json.dumps(cfg, indent=1, sort_keys=True))
    return str(path)


def preprocessed(raw_root: Path, span: dt.date, config: str, work: Path) -> str:
    """The window preprocessed with this feature config, once per config (reused from
    `work` when a previous run made it)."""
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    from bench.ctr_peers import EVAL_PERCENT
    out = work / f"pre-{variant_key({'config': config})}"
    if not (out / "_done").exists():
        shutil.rmtree(out, ignore_errors=True)
        preprocess(PreprocessSpec(raw_root=str(raw_root), span=span.isoformat(),
                                  output_dir=str(out), window_days=3,
                                  eval_percent=EVAL_PERCENT, feature_config=config))
        (out / "_done").write_text("")
    return str(out)


def train_and_score(name: str, variant: dict, raw_root: Path, span: dt.date, work: Path,
                    raw_eval: dict) -> tuple:
    """(eval-row click probabilities, record) of one variant, from `work`'s cache when the
    same options ran before."""
    import numpy as np
    from components.ctr import rawdata
    from components.ctr.ps_train import PsTrainSpec, run as train
    from components.ctr.train_export import SUMMARY_FILE
    cache = work / "scores" / f"{name}-{variant_key(variant)}"
    if (cache / "record.json").exists():
        return np.load(cache / "probs.npy"), json.loads((cache / "record.json").read_text())
    pre = preprocessed(raw_root, span, feature_config_file(variant.get("features", {}), work),
                       work)
    os.environ.pop("TF_CONFIG", None)
    model = work / "models" / name
    shutil.rmtree(model.parent / (model.name + "_checkpoints"), ignore_errors=True)
    shutil.rmtree(model, ignore_errors=True)
    t0 = time.time()
    trained = train(PsTrainSpec(preprocess_dir=pre, out_dir=str(model), **variant["train"]))
    wall = time.time() - t0
    probs = rawdata.predict(trained["model_dir"], raw_eval)
    summary = json.loads((model / SUMMARY_FILE).read_text())
    record = {"options": variant, "train_seconds": trained["train_seconds"],
              "wall_seconds": round(wall, 1), "total_steps": trained["total_steps"],
              "steps_run": trained["steps_run"], "best_step": trained["best_step"],
              "stopped_early": summary["early_stopping"]["stopped_early"],
              "params": summary["params"], "val_log_loss": trained["val_log_loss"]}
    cache.mkdir(parents=True, exist_ok=True)
    np.save(cache / "probs.npy", probs)
    (cache / "record.json").write_text(json.dumps(record, indent=1))
    shutil.rmtree(model.parent / (model.name + "_checkpoints"), ignore_errors=True)
    shutil.rmtree(model, ignore_errors=True)
    return probs, record


def _map_fit(ids, x, y, offset, prior_mean, precision, theta=None):
    """Every id's MAP coefficients of a logistic term `x @ theta[id]` on top of `offset`
    under a Gaussian prior (`prior_mean` per id, `precision`), all ids at once by Newton
    steps."""
    import numpy as np
    n, k = prior_mean.shape
    theta = prior_mean.copy() if theta is None else theta
    for _ in range(8):
        p = 1 / (1 + np.exp(-(offset + np.einsum("nk,nk->n", theta[ids], x))))
        grad = -(theta - prior_mean) @ precision
        hess = np.broadcast_to(-precision, (n, k, k)).copy()
        for a in range(k):
            grad[:, a] += np.bincount(ids, (y - p) * x[:, a], n)
            for b in range(a, k):
                hess[:, a, b] -= np.bincount(ids, p * (1 - p) * x[:, a] * x[:, b], n)
                hess[:, b, a] = hess[:, a, b]
        theta = theta - np.linalg.solve(hess, grad[:, :, None])[:, :, 0]
    return theta


def learnable_references(gen_spec, raw_root: Path, train_t, eval_t, truth, labels) -> dict:
    """Bayes-optimal AUC with some true per-id terms replaced by their MAP estimates from
    the training rows (every other term known exactly): about what learning those ids from
    this much data can reach, by any model. `..._learned_taste`: each user's taste vector
    (prior: the generator's); `..._learned_user_item`: also each user's bias and each
    item's bias (one per item over the window; the generator drifts it a little daily),
    fitted alternately, with generous priors: a user's bias given the true mean of its
    past-clicks feature, an item's given its true base popularity (what a model reads,
    noisily, from user_past_clicks and the item counts); `..._without_taste`: the same
    learner without taste vectors (what learning tastes adds is the difference);
    `..._user_item_category[_without_taste]`: those learning every category's bias too."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from components import metrics
    from components.ctr import features as F, rawdata
    from components.ctr.generate import WorldConfig, _world_for
    world = _world_for(gen_spec, WorldConfig())
    cfg = world.cfg

    def parts(table, probs):
        """(user, item, [1, category + item factors], logit without the user and item
        terms, true taste, true user bias, true item bias of the day)."""
        ids = {c: np.array([int(v[1:]) for v in table.column(c).to_pylist()])
               for c in ("user_id", "item_id", "category_id")}
        user, item = ids["user_id"], ids["item_id"]
        w = world.category_factor[ids["category_id"]] + world.item_factor[item]
        day = np.array([dt.date.fromisoformat(v[:10]).toordinal()
                        for v in table.column(F.EXAMPLE_ID_KEY).to_pylist()], float)
        item_bias = world.item_bias[item] + cfg.bias_drift * np.sin(
            2 * np.pi * day / world.item_bias_period[item] + world.item_bias_phase[item])
        taste = np.einsum("nd,nd->n", world.user_factor[user], w)
        rest = np.log(probs / (1 - probs)) - taste - world.user_bias[user] - item_bias
        return user, item, np.hstack([np.ones((len(user), 1)), w]), rest, taste, \
            world.user_bias[user], item_bias

    truths = pa.concat_tables([rawdata.read_truth(d) for d in sorted(raw_root.glob("dt=*"))])
    index = pc.index_in(train_t.column(F.EXAMPLE_ID_KEY),
                        value_set=truths.column(F.EXAMPLE_ID_KEY))
    user, item, x, rest, _, ubias, ibias = parts(
        train_t, truths.column(F.TRUE_PROB_KEY).to_numpy()[index.to_numpy()])
    e_user, e_item, e_x, e_rest, e_taste, e_ubias, e_ibias = parts(eval_t, truth)
    y = train_t.column(F.LABEL_KEY).to_numpy().astype(float)
    n_users, d = world.user_factor.shape
    taste_precision = np.eye(d) / cfg.user_factor_sd ** 2
    taste = _map_fit(user, x[:, 1:], y, rest + ubias + ibias, np.zeros((n_users, d)),
                     taste_precision)
    out = {"bayes_learned_taste_auc": round(metrics.auc(
        labels, e_rest + e_ubias + e_ibias + np.einsum("nd,nd->n", taste[e_user], e_x[:, 1:])),
        4)}
    # user bias | mean log past clicks: the generator draws both from one normal pair
    share = cfg.clicks_bias_loading / cfg.clicks_log_sd
    user_mean = np.zeros((n_users, d + 1))
    user_mean[:, 0] = cfg.user_bias_sd * share * (
        world.user_clicks_log_mean - cfg.clicks_log_mu) / cfg.clicks_log_sd
    user_precision = np.diag([1 / (cfg.user_bias_sd ** 2 * (1 - share ** 2))]
                             + [1 / cfg.user_factor_sd ** 2] * d)
    pop_z = (world.item_logpop - world.item_logpop.mean()) / world.item_logpop.std()
    item_mean = (cfg.item_bias_popularity * pop_z)[:, None]
    item_precision = np.eye(1) / (cfg.item_bias_sd ** 2 + cfg.bias_drift ** 2 / 2)
    for name, k in (("bayes_learned_user_item_auc", d + 1),
                    ("bayes_learned_user_item_without_taste_auc", 1)):
        users, items = None, item_mean
        for _ in range(3):
            users = _map_fit(user, x[:, :k], y, rest + items[item, 0], user_mean[:, :k],
                             user_precision[:k, :k], users)
            items = _map_fit(item, x[:, :1], y,
                             rest + np.einsum("nk,nk->n", users[user], x[:, :k]),
                             item_mean, item_precision, items)
        out[name] = round(metrics.auc(labels, e_rest + items[e_item, 0] + np.einsum(
            "nk,nk->n", users[e_user], e_x[:, :k])), 4)
    # ... and each category's bias too (prior: the generator's), no taste: the others
    # know the 1,000 category biases exactly, a model learns them from the same rows
    cat, e_cat = world.item_category[item], world.item_category[e_item]
    rest, e_rest = rest - world.category_bias[cat], e_rest - world.category_bias[e_cat]
    for name, k in (("bayes_learned_user_item_category_auc", d + 1),
                    ("bayes_learned_user_item_category_without_taste_auc", 1)):
        users, items = None, item_mean
        cats = np.zeros((len(world.category_bias), 1))
        for _ in range(3):
            users = _map_fit(user, x[:, :k], y, rest + items[item, 0] + cats[cat, 0],
                             user_mean[:, :k], user_precision[:k, :k], users)
            mine = np.einsum("nk,nk->n", users[user], x[:, :k])
            items = _map_fit(item, x[:, :1], y, rest + mine + cats[cat, 0],
                             item_mean, item_precision, items)
            cats = _map_fit(cat, x[:, :1], y, rest + mine + items[item, 0],
                            np.zeros_like(cats), np.eye(1) / cfg.category_bias_sd ** 2, cats)
        out[name] = round(metrics.auc(labels, e_rest + items[e_item, 0] + cats[e_cat, 0]
                                      + np.einsum("nk,nk->n", users[e_user], e_x[:, :k])), 4)
    return out


def bucket_sharing(train_t, eval_t, cfg, variants: dict) -> dict:
    """How the window's ids sit in their hash buckets, per hashed field and bucket count
    (the config's and every variant's): the share of training ids whose bucket holds
    another training id, and of eval rows whose id was seen in training with a bucket of
    its own / a shared one, or is new to an empty bucket / to one a training id holds (it
    then takes that id's terms); `stranger_row_share`: of an eval row's bucket's training
    rows, the share that other ids brought (mean over eval rows)."""
    import numpy as np
    import tensorflow as tf
    sizes = {f.name: {f.hash_buckets} for f in cfg.features if f.transform == "hash"}
    for v in variants.values():
        for name, change in v.get("features", {}).items():
            if name in sizes and change.get("transform") == "hash":
                sizes[name].add(change["hash_buckets"])
    out = {}
    for field, counts in sizes.items():
        ids, n = np.unique(train_t.column(field).to_numpy(zero_copy_only=False),
                           return_counts=True)
        evals, inverse = np.unique(eval_t.column(field).to_numpy(zero_copy_only=False),
                                   return_inverse=True)
        at = np.clip(np.searchsorted(ids, evals), 0, len(ids) - 1)
        seen = (ids[at] == evals)[inverse]
        own = np.where(seen, n[at][inverse], 0)
        out[field] = {"train_ids": int(len(ids))}
        for buckets in sorted(counts):
            bucket = tf.strings.to_hash_bucket_fast(ids.astype(str), buckets).numpy()
            e_bucket = tf.strings.to_hash_bucket_fast(evals.astype(str),
                                                      buckets).numpy()[inverse]
            ids_in = np.bincount(bucket, minlength=buckets)
            rows_in = np.bincount(bucket, weights=n, minlength=buckets)
            held = ids_in[e_bucket]
            out[field][str(buckets)] = {k: round(float(v), 4) for k, v in {
                "train_ids_sharing_a_bucket": (ids_in[bucket] > 1).mean(),
                "eval_rows_seen_own_bucket": (seen & (held == 1)).mean(),
                "eval_rows_seen_shared_bucket": (seen & (held > 1)).mean(),
                "eval_rows_new_empty_bucket": (~seen & (held == 0)).mean(),
                "eval_rows_new_taken_bucket": (~seen & (held > 0)).mean(),
                "stranger_row_share": ((rows_in[e_bucket] - own)
                                       / np.maximum(rows_in[e_bucket], 1)).mean()}.items()}
    return out


def compare(labels, probs, baseline, seed: int) -> dict:
    """AUC, log loss and the paired interval of (variant - baseline) on the same rows."""
    from components import metrics
    m = metrics.binary_metrics(labels, probs)
    ci = metrics.bootstrap_ci(labels, probs, n_resamples=200, seed=seed,
                              baseline_probs=baseline)
    return {"auc": round(m["auc"], 5), "log_loss": round(m["log_loss"], 5),
            "auc_minus_baseline": round(ci["auc_delta"]["estimate"], 5),
            "auc_minus_baseline_ci": [round(ci["auc_delta"]["low"], 5),
                                      round(ci["auc_delta"]["high"], 5)],
            "log_loss_minus_baseline_ci": [round(ci["log_loss_delta"]["low"], 5),
                                           round(ci["log_loss_delta"]["high"], 5)]}


def _print(out: dict) -> None:
    print(f"\n{out['dataset']}: {out['train_rows']:,} training rows, {out['eval_rows']:,} "
          f"eval rows; Bayes {out['references']['bayes_optimal_auc']:.4f}, "
          + ", ".join(f"{k} {v}" for k, v in out["references"].items()
                      if k != "bayes_optimal_auc"))
    print(f"  {'variant':<30} {'AUC':>7} {'log loss':>8}  {'AUC - baseline [95% CI]':<28} "
          f"{'train s':>7}  steps")
    for name, v in out["variants"].items():
        lo, hi = v["auc_minus_baseline_ci"]
        print(f"  {name:<30} {v['auc']:.4f} {v['log_loss']:8.5f}  "
              f"{v['auc_minus_baseline']:+.4f} [{lo:+.4f}, {hi:+.4f}]     "
              f"{v['train_seconds']:7.0f}  {v['best_step']}/{v['steps_run']}")
    print(f"  best: {out['best']['variant']} (target AUC >= {out['target_auc']} with the "
          f"interval above 0: {'reached' if out['best']['reaches_target'] else 'not reached'})")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows-per-day", type=int, default=500_000,
                   help="generated rows per day of the 3-day window (default 500000)")
    p.add_argument("--only", default="",
                   help="comma-separated variant names (default: every one in VARIANTS)")
    p.add_argument("--variants", default="{}",
                   help="JSON {name: {train: {...}, features: {...}}} of extra variants")
    p.add_argument("--work", default="",
                   help="keep data, preprocessing and scores here and reuse them "
                        "(default: a temporary folder, removed)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--results", default=str(RESULTS / "ctr_id_sweep.json"))
    args = p.parse_args(argv)
    from bench.ctr_peers import GEN_START, _taste_references, _window_rows
    from components import metrics
    from components.ctr import feature_config
    from components.ctr import rawdata
    from components.ctr.generate import GenerateSpec, run as generate

    variants = {**VARIANTS, **json.loads(args.variants)}
    names = [n for n in args.only.split(",") if n] or list(variants)
    names = ["baseline"] + [n for n in names if n != "baseline"]
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-ctr-id-sweep-"))
    home = work / f"gen-{args.rows_per_day}"
    span = GEN_START + dt.timedelta(days=2)
    try:
        gen_spec = GenerateSpec(out_root=str(home), start=GEN_START.isoformat(), days=3,
                                rows_per_day=args.rows_per_day)
        generate(gen_spec)
        raw_root = home / "raw" / "ctr"
        cfg = feature_config.default()
        train_t, eval_t, truth = _window_rows(raw_root, span, 3, cfg)
        labels = eval_t.column(cfg.label).to_numpy().astype(int)
        raw_eval = rawdata.to_raw_features(eval_t, cfg)
        scored = {}
        for name in names:
            scored[name] = train_and_score(name, variants[name], raw_root, span, home,
                                           raw_eval)
            print(f"{name}: AUC {metrics.auc(labels, scored[name][0]):.4f} "
                  f"({scored[name][1]['train_seconds']:.0f} s)", flush=True)
        baseline = scored["baseline"][0]
        out = {"dataset": f"generator 3 x {args.rows_per_day:,} rows/day",
               "train_rows": train_t.num_rows, "eval_rows": int(len(labels)),
               "eval_positives": int(labels.sum()), "target_auc": TARGET_AUC,
               "references": {"bayes_optimal_auc": round(metrics.auc(labels, truth), 4),
                              **_taste_references(gen_spec, train_t, eval_t, truth, labels),
                              **learnable_references(gen_spec, raw_root, train_t, eval_t,
                                                     truth, labels)},
               "id_buckets": bucket_sharing(train_t, eval_t, cfg,
                                            {n: variants[n] for n in names}),
               "variants": {name: {**compare(labels, probs, baseline, args.seed), **record}
                            for name, (probs, record) in scored.items()}}
        best = max(out["variants"], key=lambda n: out["variants"][n]["auc"])
        v = out["variants"][best]
        out["best"] = {"variant": best, "auc": v["auc"],
                       "auc_minus_baseline_ci": v["auc_minus_baseline_ci"],
                       "reaches_target": v["auc"] >= TARGET_AUC
                       and v["auc_minus_baseline_ci"][0] > 0}
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    _print(out)
    result = {"benchmark": "ctr_id_sweep", "command": "bench/ctr_id_sweep.py " + " ".join(
        sys.argv[1:] if argv is None else argv),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_end": [round(x, 2) for x in os.getloadavg()]},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **out}
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
