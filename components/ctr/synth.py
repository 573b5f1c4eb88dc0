"""Synthetic logs shaped by any feature config: try the pipeline on your schema before
your real logs are wired in (`retrain generate --feature-config my.yaml --raw-root DIR`).

Writes DIR/dt=YYYY-MM-DD/part-00000.jsonl.gz plus a `_SUCCESS` marker per day, one atomic
partition at a time, with every column the config reads: Zipf-distributed categorical
values, heavy-tailed numerics with some nulls, tag lists and short texts of varying
length. The label is drawn from a logistic model with a hidden effect per categorical
value, tag and word and a slope per numeric column, so a model trained on these logs has
something to learn. Deterministic per seed and day.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from retrain.common.step import main
from retrain.common import paths

WORDS = ("red", "blue", "cheap", "best", "running", "shoes", "phone", "case", "trail",
         "winter", "jacket", "kids", "sale", "new", "pro", "mini", "fast", "light", "gift",
         "home", "garden", "coffee", "camera", "bag", "watch", "sport", "travel", "men",
         "women", "classic")


@dataclasses.dataclass
class SynthSpec:
    feature_config: str          # YAML/JSON feature config the logs must satisfy
    raw_root: str                # partitions go to <raw_root>/dt=YYYY-MM-DD/
    start: str                   # first day, YYYY-MM-DD
    days: int = 3
    rows_per_day: int = 5000
    base_rate: float = 0.1       # click rate when every effect is zero
    null_rate: float = 0.05      # share of nulls in numeric columns
    seed: int = 7


def _effect(seed: int, name: str, value) -> float:
    """Hidden logit effect of one value of one column, stable across days."""
    h = hashlib.blake2b(f"{seed}:{name}:{value}".encode(), digest_size=8).digest()
    return (int.from_bytes(h, "little") / 2**64 - 0.5) * 2.0


def _zipf(rng, n: int, size: int) -> np.ndarray:
    return (rng.zipf(1.3, size=n) - 1) % size


def _column(rng, f, n: int, spec: SynthSpec, cfg) -> tuple[list, np.ndarray]:
    """(values, logit contribution) of one feature over n rows; values respect the
    config's validation ranges and allowed values, so the logs pass validation."""
    logit = np.zeros(n)
    ranges = {c: (lo, hi) for c, lo, hi in cfg.validation.ranges}
    allowed = dict(cfg.validation.allowed_values)
    if f.kind == "numeric":
        x = rng.lognormal(mean=2.0, sigma=1.0, size=n)
        lo, hi = ranges.get(f.name, (None, None))
        x = np.clip(x, lo, hi) if lo is not None or hi is not None else x
        slope = _effect(spec.seed, f.name, "slope")
        logit += slope * (np.log1p(x) - 2.0) / 2
        values = [None if rng.random() < spec.null_rate else round(float(v), 3) for v in x]
        return values, logit
    if f.kind == "categorical":
        size = (f.size if f.transform == "identity"
                else min(int(f.top_k * 1.2), 600) if f.transform == "vocabulary" else 600)
        ids = _zipf(rng, n, size)
        if f.name in allowed:
            choices = list(allowed[f.name])
            values = [choices[i % len(choices)] for i in ids]
        elif f.raw_type == "int":
            lo, hi = ranges.get(f.name, (0, None))
            values = [int(np.clip(i, lo, hi)) for i in ids]
        else:
            values = [f"{f.name}-{i}" for i in ids]
        effects = {v: _effect(spec.seed, f.name, v) for v in set(values)}
        return values, np.array([effects[v] for v in values])
    vocab = [f"{f.name}-{i}" for i in range(200)] if f.kind == "multi_categorical" else WORDS
    lengths = rng.integers(0, 7 if f.kind == "multi_categorical" else 12, size=n)
    values = []
    for i, k in enumerate(lengths):
        picks = [vocab[j] for j in _zipf(rng, int(k), len(vocab))]
        if picks:
            logit[i] = np.mean([_effect(spec.seed, f.name, p) for p in picks])
        values.append(picks if f.kind == "multi_categorical" else " ".join(picks).capitalize())
    return values, logit


def run(spec: SynthSpec) -> dict:
    """Write the days; return rows and click rate per day."""
    from retrain.common.atomic import atomic_dir, write_json
    from components.ctr import feature_config

    cfg = feature_config.load(spec.feature_config)
    if spec.days < 1 or spec.rows_per_day < 1:
        raise ValueError(f"days and rows_per_day must be >= 1, got {spec.days}, "
                         f"{spec.rows_per_day}")
    start = dt.date.fromisoformat(spec.start)
    out = []
    for k in range(spec.days):
        day = start + dt.timedelta(days=k)
        rng = np.random.default_rng([spec.seed, day.toordinal()])
        n = spec.rows_per_day
        columns, logit = {}, np.full(n, np.log(spec.base_rate / (1 - spec.base_rate)))
        for f in cfg.features:
            columns[f.name], contribution = _column(rng, f, n, spec, cfg)
            logit += contribution
        clicks = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
        with atomic_dir(Path(paths.partition(spec.raw_root, day))) as tmp:
            with gzip.open(tmp / "part-00000.jsonl.gz", "wt", encoding="utf-8") as fh:
                for i in range(n):
                    row = {cfg.label: int(clicks[i])}
                    if not cfg.derived_id:   # logs without an id column have none
                        row[cfg.example_id] = f"{day.isoformat()}-{i}"
                    row.update({name: values[i] for name, values in columns.items()})
                    fh.write(json.dumps(row) + "\n")
            write_json(tmp / "_SUCCESS", {"rows": n, "click_rate": float(clicks.mean()),
                                          "feature_config": cfg.name})
        out.append({"day": day.isoformat(), "rows": n, "click_rate": float(clicks.mean())})
    return {"raw_root": spec.raw_root, "feature_config": cfg.name, "days": out}


if __name__ == "__main__":
    sys.exit(main(SynthSpec, run))
