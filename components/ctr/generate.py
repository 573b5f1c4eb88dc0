"""Synthetic click logs: the raw input of the CTR pipeline, with the truth kept beside it.

There is no real click stream on these machines, so this step writes one day-partition
per span, shaped like a feed's impression log: Zipf-distributed users and items, items
fixed to Zipf-sized categories, a daily traffic curve, devices, a strongly decreasing
position effect, heavy-tailed numeric features with nulls, and popularity that drifts
from day to day. Every label is a Bernoulli draw from a known probability, stored in
`_truth.parquet`, so each day also reports the Bayes-optimal AUC / log loss: the ceiling
a trained model is measured against.

Writes `<out_root>/raw/ctr/dt=YYYY-MM-DD/{part-00000.parquet,_truth.parquet,_SUCCESS}`,
each day atomically. The "world" (latent factors, biases, item->category) depends only on
the seed, sizes and `WorldConfig`; a day's rows only on those and the day's date, so day
k is the same whichever range was asked for around it.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import functools
import hashlib
import json
import logging
import math
import sys
import time
from pathlib import Path

import numpy as np

from retrain.common.atomic import atomic_dir, read_json
from retrain.common.paths import artifact_root, raw_span_dir
from retrain.common.step import main, spec_to_dict
from components.ctr import features as F

log = logging.getLogger("retrain.generate")

FAMILY = "ctr"
GENERATOR_VERSION = "1"
DATA_FILE = "part-00000.parquet"
TRUTH_FILE = "_truth.parquet"
SUCCESS_FILE = "_SUCCESS"
N_POSITIONS = 31  # feed slots 1..31 (identity feature of size 32 in features.py)

# Column order of the data file; types come from features.py's RAW_*_COLUMNS lists.
COLUMNS = [F.EXAMPLE_ID_KEY, F.TIMESTAMP_KEY, "user_id", "item_id", "category_id", "device",
           "hour", "position", "price", "user_past_clicks", "item_age_days", F.LABEL_KEY]
assert sorted(COLUMNS) == sorted(F.RAW_STRING_COLUMNS + F.RAW_INT_COLUMNS
                                 + F.RAW_FLOAT_COLUMNS), "COLUMNS out of step with features.py"


@dataclasses.dataclass(frozen=True)
class WorldConfig:
    """Effect scales of the simulated world (logit units unless said otherwise).

    Kept so that most of the signal is learnable from ~100-200k rows: position, context,
    category, numeric features, user x category through the user factors (for frequent
    users) and the bias of popular items. The pure user x item-factor term is small.
    With the defaults (seed 7, 50k rows/day) the Bayes AUC is about 0.80, and a plain
    one-hot logistic regression (no interactions) trained on 3 days scores about 0.03
    below it on the 4th: a reference point for tuning.
    """

    factor_dim: int = 6
    # Popularity: P(rank r) ~ (r + offset) ** -exponent; ids are a random permutation of ranks.
    user_zipf_exponent: float = 1.1
    user_zipf_offset: float = 20.0
    item_zipf_exponent: float = 1.1
    item_zipf_offset: float = 10.0
    category_zipf_exponent: float = 1.0  # how items spread over categories
    target_ctr: float = 0.04  # b0 is solved so the average click rate lands here
    # Latent terms.
    user_bias_sd: float = 0.20
    item_bias_sd: float = 0.15
    item_bias_popularity: float = 0.15  # per log-unit of base popularity: hits click more
    category_bias_sd: float = 0.60
    user_factor_sd: float = 0.30
    category_factor_sd: float = 0.45
    item_factor_sd: float = 0.12
    # Context.
    position_slope: float = -0.70  # per log(position): strong, decreasing
    position_exponent: float = 0.8  # P(position p) ~ p ** -exponent: top slots most common
    hour_amplitude: float = 0.20
    hour_device_sd: float = 0.08
    devices: tuple = ("ios", "android", "web", "tablet", "other")
    device_shares: tuple = (0.38, 0.42, 0.12, 0.05, 0.03)
    device_effects: tuple = (0.15, 0.0, -0.25, 0.10, -0.35)
    primary_device_prob: float = 0.85  # a user mostly uses one device
    # Numeric features: value model, null rate, effect per log unit, effect when missing.
    price_log_mu: float = 3.0
    price_log_sd: float = 1.0
    category_price_sd: float = 0.6
    price_null_rate: float = 0.05
    price_slope: float = -0.30
    price_missing_effect: float = -0.15
    clicks_log_mu: float = 0.8
    clicks_log_sd: float = 1.1
    clicks_bias_loading: float = 0.8  # users with a high bias have more past clicks
    clicks_null_rate: float = 0.03
    clicks_slope: float = 0.35
    clicks_missing_effect: float = -0.20
    age_max_days: int = 720
    age_null_rate: float = 0.02
    age_slope: float = -0.25
    age_missing_effect: float = 0.05
    # Day-to-day drift: sinusoids with per-item period and phase (stateless in the day).
    popularity_drift: float = 0.7  # amplitude, in log-popularity (shifts item ranks)
    bias_drift: float = 0.15  # amplitude of the item-bias drift
    drift_period_days: tuple = (14.0, 120.0)
    calibration_rows: int = 100_000

    def fingerprint(self) -> str:
        text = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclasses.dataclass
class GenerateSpec:
    out_root: str  # artifact root; days go to <out_root>/raw/ctr/dt=YYYY-MM-DD/
    start: str  # first day, YYYY-MM-DD
    days: int = 7
    rows_per_day: int = 50_000
    seed: int = 7
    n_users: int = 300_000
    n_items: int = 200_000
    n_categories: int = 1_000
    overwrite: bool = False  # existing complete days are kept (reported skipped) unless True

    def validate(self) -> dt.date:
        """Check the spec; return the start date."""
        try:
            start = dt.date.fromisoformat(str(self.start))
        except ValueError:
            raise ValueError(f"start must be a date YYYY-MM-DD, got {self.start!r}") from None
        for name in ("days", "rows_per_day", "n_users", "n_items", "n_categories"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        if not self.out_root:
            raise ValueError("out_root must be set")
        return start


# --------------------------------------------------------------------------- the world


@dataclasses.dataclass
class _World:
    cfg: WorldConfig
    user_cdf: np.ndarray  # over popularity ranks
    user_of_rank: np.ndarray
    user_bias: np.ndarray
    user_factor: np.ndarray
    user_device: np.ndarray  # primary device index
    user_clicks_log_mean: np.ndarray
    item_logpop: np.ndarray  # base log-popularity, indexed by item id
    item_pop_period: np.ndarray
    item_pop_phase: np.ndarray
    item_bias: np.ndarray
    item_bias_period: np.ndarray
    item_bias_phase: np.ndarray
    item_factor: np.ndarray
    item_category: np.ndarray
    item_price_log: np.ndarray
    item_age_offset: np.ndarray
    item_lifetime: np.ndarray
    category_bias: np.ndarray
    category_factor: np.ndarray
    hour_probs: np.ndarray
    hour_effect: np.ndarray
    device_probs: np.ndarray
    device_effect: np.ndarray
    hour_device: np.ndarray
    position_probs: np.ndarray
    b0: float = 0.0


def _zipf_probs(n: int, exponent: float, offset: float = 0.0) -> np.ndarray:
    p = (np.arange(1, n + 1, dtype=np.float64) + offset) ** -exponent
    return p / p.sum()


def _cdf(p: np.ndarray) -> np.ndarray:
    c = np.cumsum(p)
    c /= c[-1]
    return c


def _hour_curve() -> np.ndarray:
    """Share of traffic per hour: trough around 04:00, lunch bump, evening peak ~21:00."""
    h = np.arange(24) + 0.5
    curve = (1.0 + 0.9 * np.exp(-((h - 21.0) ** 2) / 8.0) + 0.5 * np.exp(-((h - 12.5) ** 2) / 4.0)
             + 0.35 * np.exp(-((h - 8.5) ** 2) / 3.0) - 0.8 * np.exp(-((h - 4.0) ** 2) / 6.0))
    return curve / curve.sum()


@functools.lru_cache(maxsize=4)
def _build_world(seed: int, n_users: int, n_items: int, n_categories: int,
                 cfg: WorldConfig) -> _World:
    rng = np.random.default_rng([seed, 0x574F524C])  # "WORL": the world's own stream
    d = cfg.factor_dim
    n_dev = len(cfg.devices)

    user_of_rank = rng.permutation(n_users)
    user_bias = rng.normal(0.0, cfg.user_bias_sd, n_users)
    user_factor = rng.normal(0.0, cfg.user_factor_sd, (n_users, d))
    user_device = rng.choice(n_dev, size=n_users, p=np.asarray(cfg.device_shares))
    bias_z = user_bias / cfg.user_bias_sd if cfg.user_bias_sd > 0 else np.zeros(n_users)
    user_clicks_log_mean = (cfg.clicks_log_mu + cfg.clicks_bias_loading * bias_z
                            + math.sqrt(max(cfg.clicks_log_sd ** 2
                                            - cfg.clicks_bias_loading ** 2, 0.0))
                            * rng.standard_normal(n_users))

    item_rank = rng.permutation(n_items)  # rank of item id i
    item_logpop = -cfg.item_zipf_exponent * np.log(item_rank + 1.0 + cfg.item_zipf_offset)
    lo, hi = cfg.drift_period_days
    item_pop_period = rng.uniform(lo, hi, n_items)
    item_pop_phase = rng.uniform(0.0, 2 * np.pi, n_items)
    pop_z = (item_logpop - item_logpop.mean()) / (item_logpop.std() or 1.0)
    item_bias = cfg.item_bias_popularity * pop_z + rng.normal(0.0, cfg.item_bias_sd, n_items)
    item_bias_period = rng.uniform(lo, hi, n_items)
    item_bias_phase = rng.uniform(0.0, 2 * np.pi, n_items)
    item_factor = rng.normal(0.0, cfg.item_factor_sd, (n_items, d))
    cat_probs = _zipf_probs(n_categories, cfg.category_zipf_exponent)
    item_category = rng.permutation(n_categories)[
        np.searchsorted(_cdf(cat_probs), rng.random(n_items), side="right")]
    category_bias = rng.normal(0.0, cfg.category_bias_sd, n_categories)
    category_factor = rng.normal(0.0, cfg.category_factor_sd, (n_categories, d))
    category_price = rng.normal(cfg.price_log_mu, cfg.category_price_sd, n_categories)
    within_sd = math.sqrt(max(cfg.price_log_sd ** 2 - cfg.category_price_sd ** 2, 0.01))
    item_price_log = category_price[item_category] + rng.normal(0.0, within_sd, n_items)
    item_lifetime = rng.integers(30, cfg.age_max_days + 1, n_items)
    item_age_offset = rng.integers(0, cfg.age_max_days, n_items)

    hours = np.arange(24)
    hour_effect = cfg.hour_amplitude * np.cos(2 * np.pi * (hours - 21) / 24.0)
    hour_device = rng.normal(0.0, cfg.hour_device_sd, (24, n_dev))
    position_probs = _zipf_probs(N_POSITIONS, cfg.position_exponent)

    world = _World(
        cfg=cfg, user_cdf=_cdf(_zipf_probs(n_users, cfg.user_zipf_exponent,
                                           cfg.user_zipf_offset)),
        user_of_rank=user_of_rank, user_bias=user_bias, user_factor=user_factor,
        user_device=user_device, user_clicks_log_mean=user_clicks_log_mean,
        item_logpop=item_logpop, item_pop_period=item_pop_period,
        item_pop_phase=item_pop_phase, item_bias=item_bias, item_bias_period=item_bias_period,
        item_bias_phase=item_bias_phase, item_factor=item_factor, item_category=item_category,
        item_price_log=item_price_log, item_age_offset=item_age_offset,
        item_lifetime=item_lifetime, category_bias=category_bias,
        category_factor=category_factor, hour_probs=_hour_curve(), hour_effect=hour_effect,
        device_probs=np.asarray(cfg.device_shares, dtype=np.float64)
        / sum(cfg.device_shares),
        device_effect=np.asarray(cfg.device_effects, dtype=np.float64),
        hour_device=hour_device, position_probs=position_probs)
    # Solve the intercept so the average click rate is the target, on a pilot day drawn
    # from the world's own stream (so b0 depends on the world only, never on the request).
    pilot = _draw_day(world, dt.date(2026, 1, 1).toordinal(), cfg.calibration_rows,
                      np.random.default_rng([seed, 0x43414C42]))
    world.b0 = _solve_intercept(pilot["logit"], cfg.target_ctr)
    return world


def _solve_intercept(logit: np.ndarray, target: float) -> float:
    lo, hi = -20.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _sigmoid(logit + mid).mean() < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _world_for(spec: GenerateSpec, cfg: WorldConfig) -> _World:
    return _build_world(int(spec.seed), spec.n_users, spec.n_items, spec.n_categories, cfg)


# --------------------------------------------------------------------------- one day


def _draw_day(world: _World, ordinal: int, n: int, rng: np.random.Generator) -> dict:
    """Draw one day's impressions: feature arrays plus the logit without the intercept."""
    cfg = world.cfg
    t = float(ordinal)

    # Time of day, then everything in time order (logs are written as events happen).
    hour = rng.choice(24, size=n, p=world.hour_probs)
    second = rng.integers(0, 3600, n)
    order = np.lexsort((second, hour))
    hour, second = hour[order], second[order]

    user = world.user_of_rank[np.searchsorted(world.user_cdf, rng.random(n), side="right")]

    logpop = world.item_logpop + cfg.popularity_drift * np.sin(
        2 * np.pi * t / world.item_pop_period + world.item_pop_phase)
    item_p = np.exp(logpop - logpop.max())
    item = np.searchsorted(_cdf(item_p), rng.random(n), side="right")
    category = world.item_category[item]

    device = np.where(rng.random(n) < cfg.primary_device_prob, world.user_device[user],
                      rng.choice(len(world.device_probs), size=n, p=world.device_probs))
    position = rng.choice(N_POSITIONS, size=n, p=world.position_probs) + 1

    price = np.round(np.exp(world.item_price_log[item] + rng.normal(0.0, 0.08, n)), 2)
    price = np.maximum(price, 0.01)
    price_null = rng.random(n) < cfg.price_null_rate
    clicks = rng.poisson(np.exp(world.user_clicks_log_mean[user])).astype(np.float64)
    clicks_null = rng.random(n) < cfg.clicks_null_rate
    age = ((ordinal + world.item_age_offset[item]) % world.item_lifetime[item]
           + (hour * 3600 + second) / 86400.0)
    age_null = rng.random(n) < cfg.age_null_rate

    item_bias = world.item_bias[item] + cfg.bias_drift * np.sin(
        2 * np.pi * t / world.item_bias_period[item] + world.item_bias_phase[item])
    taste = np.einsum("nd,nd->n", world.user_factor[user],
                      world.category_factor[category] + world.item_factor[item])
    logit = (world.user_bias[user] + item_bias + world.category_bias[category] + taste
             + world.hour_effect[hour] + world.device_effect[device]
             + world.hour_device[hour, device]
             + cfg.position_slope * np.log(position)
             + np.where(price_null, cfg.price_missing_effect,
                        cfg.price_slope * (np.log(price) - cfg.price_log_mu))
             + np.where(clicks_null, cfg.clicks_missing_effect,
                        cfg.clicks_slope * (np.log1p(clicks) - cfg.clicks_log_mu))
             + np.where(age_null, cfg.age_missing_effect,
                        cfg.age_slope * (np.log1p(age) - math.log1p(cfg.age_max_days / 4))))
    return {"hour": hour, "second": second, "user": user, "item": item,
            "category": category, "device": device, "position": position,
            "price": price, "price_null": price_null, "clicks": clicks,
            "clicks_null": clicks_null, "age": age, "age_null": age_null, "logit": logit,
            "u_click": rng.random(n)}


def taste_logits(spec: GenerateSpec, table, cfg: WorldConfig = WorldConfig()) -> np.ndarray:
    """The user x (category + item) factor term of each row's true logit, for raw rows
    of this spec's world (benchmarks: how much of the Bayes-optimal AUC is that term)."""
    world = _world_for(spec, cfg)

    def ids(column: str) -> np.ndarray:
        return np.array([int(v[1:]) for v in table.column(column).to_pylist()])
    return np.einsum("nd,nd->n", world.user_factor[ids("user_id")],
                     world.category_factor[ids("category_id")]
                     + world.item_factor[ids("item_id")])


def _prefixed(prefix: str, ids: np.ndarray):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(prefix, pa.array(ids, pa.int64()).cast(pa.string()), "")


def generate_day(spec: GenerateSpec, day: dt.date, cfg: WorldConfig = WorldConfig()):
    """One day's (data table, truth table) in memory; the same for a given day and spec."""
    import pyarrow as pa

    world = _world_for(spec, cfg)
    n = spec.rows_per_day
    rng = np.random.default_rng([int(spec.seed), 0x44415953, day.toordinal()])  # "DAYS"
    d = _draw_day(world, day.toordinal(), n, rng)
    p_click = _sigmoid(d["logit"] + world.b0)
    click = (d["u_click"] < p_click).astype(np.int64)

    day_start = int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc)
                    .timestamp())
    stamp = day.isoformat()
    example_id = pa.array([f"{stamp}-{i:08d}" for i in range(n)], pa.string())
    devices = pa.array(list(cfg.devices), pa.string())
    data = pa.table({
        F.EXAMPLE_ID_KEY: example_id,
        F.TIMESTAMP_KEY: pa.array(day_start + d["hour"] * 3600 + d["second"], pa.int64()),
        "user_id": _prefixed("u", d["user"]),
        "item_id": _prefixed("i", d["item"]),
        "category_id": _prefixed("c", d["category"]),
        "device": devices.take(pa.array(d["device"], pa.int64())),
        "hour": pa.array(d["hour"], pa.int64()),
        "position": pa.array(d["position"], pa.int64()),
        "price": pa.array(d["price"], pa.float64(), mask=d["price_null"]),
        "user_past_clicks": pa.array(d["clicks"], pa.float64(), mask=d["clicks_null"]),
        "item_age_days": pa.array(d["age"], pa.float64(), mask=d["age_null"]),
        F.LABEL_KEY: pa.array(click, pa.int64()),
    }, schema=raw_schema())
    truth = pa.table({F.EXAMPLE_ID_KEY: example_id,
                      F.TRUE_PROB_KEY: pa.array(p_click, pa.float64())})
    return data, truth


def raw_schema():
    """Arrow schema of the data file, derived from features.py's raw column lists."""
    import pyarrow as pa

    def typ(col):
        if col in F.RAW_STRING_COLUMNS:
            return pa.string()
        if col in F.RAW_INT_COLUMNS:
            return pa.int64()
        return pa.float64()

    return pa.schema([pa.field(c, typ(c), nullable=c in F.RAW_FLOAT_COLUMNS)
                      for c in COLUMNS])


# --------------------------------------------------------------------------- the step


def _params(spec: GenerateSpec, cfg: WorldConfig) -> dict:
    """What determines a day's content (compared when an existing day is kept)."""
    return {"seed": int(spec.seed), "rows_per_day": spec.rows_per_day,
            "n_users": spec.n_users, "n_items": spec.n_items,
            "n_categories": spec.n_categories, "generator_version": GENERATOR_VERSION,
            "world_fingerprint": cfg.fingerprint()}


def run(spec: GenerateSpec, cfg: WorldConfig = WorldConfig()) -> dict:
    """Write synthetic CTR click logs, one atomic day partition per span."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from components import metrics

    start = spec.validate()
    t_start = time.perf_counter()
    root = Path(spec.out_root)
    params = _params(spec, cfg)
    days, users, items = [], [], []
    world_seconds = None
    for k in range(spec.days):
        day = start + dt.timedelta(days=k)
        target = raw_span_dir(root, FAMILY, day)
        t0 = time.perf_counter()
        success = target / SUCCESS_FILE
        if success.exists() and not spec.overwrite:
            info = read_json(success)
            differs = sorted(key for key, value in params.items() if info.get(key) != value)
            if differs:
                log.warning("%s: kept existing day generated with different %s "
                            "(pass overwrite to regenerate)", day, ", ".join(differs))
            cols = pq.read_table(target / DATA_FILE, columns=["user_id", "item_id"])
            users.append(cols["user_id"])
            items.append(cols["item_id"])
            row = {"day": day.isoformat(), "status": "skipped", "path": str(target),
                   **{key: info.get(key) for key in ("rows", "click_rate", "bayes_auc",
                                                     "bayes_log_loss", "distinct_users",
                                                     "distinct_items")}}
            if differs:
                row["differs"] = differs
            days.append(row)
            log.info("%s: exists, skipped (%s rows)", day, info.get("rows"))
            continue

        if world_seconds is None:  # build (or fetch) the world once, timed on its own
            t_world = time.perf_counter()
            _world_for(spec, cfg)
            world_seconds = time.perf_counter() - t_world
            log.info("world ready (seed %s, %d users, %d items, %d categories) in %.2fs",
                     spec.seed, spec.n_users, spec.n_items, spec.n_categories, world_seconds)
            t0 = time.perf_counter()
        data, truth = generate_day(spec, day, cfg)
        labels = data[F.LABEL_KEY].to_numpy()
        bayes = metrics.binary_metrics(labels, truth[F.TRUE_PROB_KEY].to_numpy())
        info = {"day": day.isoformat(), "rows": data.num_rows, "clicks": bayes["positives"],
                "click_rate": bayes["ctr"], "mean_p_click": bayes["mean_prob"],
                "bayes_auc": bayes["auc"], "bayes_log_loss": bayes["log_loss"],
                "bayes_normalized_entropy": bayes["normalized_entropy"],
                "distinct_users": len(data["user_id"].unique()),
                "distinct_items": len(data["item_id"].unique()),
                "columns": COLUMNS, **params}
        with atomic_dir(target, overwrite=True) as tmp:
            pq.write_table(data, tmp / DATA_FILE)
            pq.write_table(truth, tmp / TRUTH_FILE)
            (tmp / SUCCESS_FILE).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        users.append(data["user_id"])
        items.append(data["item_id"])
        seconds = time.perf_counter() - t0
        days.append({"day": info["day"], "status": "written", "path": str(target),
                     **{key: info[key] for key in ("rows", "click_rate", "bayes_auc",
                                                   "bayes_log_loss", "distinct_users",
                                                   "distinct_items")},
                     "seconds": round(seconds, 3)})
        log.info("%s: wrote %d rows, click rate %.4f, Bayes AUC %.4f, log loss %.4f (%.2fs)",
                 day, info["rows"], info["click_rate"], info["bayes_auc"] or float("nan"),
                 info["bayes_log_loss"], seconds)

    return {
        "raw_dir": str(root / "raw" / FAMILY),
        "start": start.isoformat(),
        "days": days,
        "written": sum(d["status"] == "written" for d in days),
        "skipped": sum(d["status"] == "skipped" for d in days),
        "rows": sum(d["rows"] or 0 for d in days),
        "distinct_users": len(pa.chunked_array(users).unique()),
        "distinct_items": len(pa.chunked_array(items).unique()),
        "spec": spec_to_dict(spec),
        "world_seconds": round(world_seconds or 0.0, 3),
        "seconds": round(time.perf_counter() - t_start, 3),
    }


# --------------------------------------------------------------------------- CLI


def add_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "generate", help="write synthetic CTR click logs (one day partition per span)",
        description="Write synthetic CTR click logs under OUT_ROOT/raw/ctr/dt=YYYY-MM-DD/ "
                    "(part-00000.parquet, _truth.parquet with the true click probability, "
                    "_SUCCESS), one atomic partition per day, and print per-day click rates "
                    "and Bayes-optimal AUC / log loss.")
    p.add_argument("--out-root", default=None,
                   help="artifact root (default: $RETRAIN_HOME, else ./var)")
    p.add_argument("--start", required=True, help="first day to generate, YYYY-MM-DD")
    p.add_argument("--days", type=int, default=7, help="number of consecutive days (default 7)")
    p.add_argument("--rows-per-day", type=int, default=50_000,
                   help="impressions per day (default 50000)")
    p.add_argument("--seed", type=int, default=7,
                   help="seed of the simulated world and of every day's rows (default 7)")
    p.add_argument("--n-users", type=int, default=300_000,
                   help="size of the user population (default 300000)")
    p.add_argument("--n-items", type=int, default=200_000,
                   help="size of the item catalogue (default 200000)")
    p.add_argument("--n-categories", type=int, default=1_000,
                   help="number of item categories (default 1000)")
    p.add_argument("--overwrite", action="store_true",
                   help="regenerate days that already exist (default: keep and skip them)")
    p.add_argument("--feature-config", default=None,
                   help="instead: logs shaped by this YAML/JSON feature config (JSONL.gz, "
                        "every column it reads, a learnable label), to try your schema")
    p.add_argument("--raw-root", default=None,
                   help="with --feature-config: where the dt=YYYY-MM-DD partitions go "
                        "(default: OUT_ROOT/raw/ctr)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead")
    p.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if args.feature_config:
        from components.ctr import synth
        raw_root = args.raw_root or str(artifact_root(args.out_root) / "raw" / "ctr")
        result = synth.run(synth.SynthSpec(
            feature_config=args.feature_config, raw_root=raw_root, start=args.start,
            days=args.days, rows_per_day=args.rows_per_day, seed=args.seed))
        print(json.dumps(result, indent=2))
        return 0
    spec = GenerateSpec(out_root=str(artifact_root(args.out_root)), start=args.start,
                        days=args.days, rows_per_day=args.rows_per_day, seed=args.seed,
                        n_users=args.n_users, n_items=args.n_items,
                        n_categories=args.n_categories, overwrite=args.overwrite)
    result = run(spec)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0
    print(format_table(result))
    return 0


def format_table(result: dict) -> str:
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    lines = [f"{'day':<10}  {'status':<7}  {'rows':>8}  {'ctr':>6}  {'bayes_auc':>9}  "
             f"{'bayes_ll':>8}  {'users':>7}  {'items':>7}"]
    for d in result["days"]:
        lines.append(f"{d['day']:<10}  {d['status']:<7}  {num(d['rows'], 'd'):>8}  "
                     f"{num(d['click_rate'], '.4f'):>6}  {num(d['bayes_auc'], '.4f'):>9}  "
                     f"{num(d['bayes_log_loss'], '.4f'):>8}  {num(d['distinct_users'], 'd'):>7}  "
                     f"{num(d['distinct_items'], 'd'):>7}")
    lines.append(f"{result['rows']} rows over {len(result['days'])} day(s) "
                 f"({result['written']} written, {result['skipped']} skipped); "
                 f"{result['distinct_users']} distinct users, {result['distinct_items']} "
                 f"distinct items; {result['seconds']:.1f}s")
    lines.append(f"output: {result['raw_dir']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(GenerateSpec, run))
