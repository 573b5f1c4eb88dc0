"""Throughput of the Beam + tf.Transform preprocessing job against a pandas baseline.

Both do the same work on the same generated window (vocabularies of the categorical
features, hashing of the ID features, NaN-aware log1p + z-score of the numeric ones),
measured in the same run so the machine's noise hits both. Prints a table and writes
bench/results/preprocess_ctr.json.

    .venv/bin/python bench/preprocess_ctr.py --days 3 --rows-per-day 50000
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def pandas_baseline(raw_root: Path, days: list[dt.date]) -> tuple[int, float]:
    import numpy as np
    import pandas as pd
    from components.ctr import features as F
    from components.ctr.rawdata import read_span

    t0 = time.perf_counter()
    df = pd.concat([read_span(raw_root / f"dt={d}").to_pandas() for d in days])
    out = {}
    for key, buckets in F.HASHED_ID_FEATURES.items():
        out[key] = pd.util.hash_array(df[key].to_numpy(dtype=object)) % buckets
    for key, cfg in F.VOCAB_FEATURES.items():
        vocab = df[key].value_counts().index[: cfg["top_k"]]
        out[key] = pd.Index(vocab).get_indexer(df[key])
    for key in F.NUMERIC_FEATURES:
        x = np.log1p(df[key].clip(lower=0))
        out[key] = ((x - x.mean()) / x.std()).fillna(0.0).to_numpy()
    return len(df), time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--days", type=int, default=3)
    p.add_argument("--rows-per-day", type=int, default=50_000)
    p.add_argument("--runner-args", default="--runner=DirectRunner")
    args = p.parse_args()

    from components.ctr.generate import GenerateSpec, run as generate
    from components.ctr.preprocess import PreprocessSpec, run as preprocess

    work = Path(tempfile.mkdtemp(prefix="bench-preprocess-"))
    try:
        start = dt.date(2026, 11, 1)
        generate(GenerateSpec(out_root=str(work), start=start.isoformat(), days=args.days,
                              rows_per_day=args.rows_per_day))
        days = [start + dt.timedelta(days=i) for i in range(args.days)]
        raw_root = work / "raw" / "ctr"
        t0 = time.perf_counter()
        summary = preprocess(PreprocessSpec(raw_root=str(raw_root), span=days[-1].isoformat(),
                                            output_dir=str(work / "out"), window_days=args.days,
                                            beam_args=args.runner_args.split()))
        beam_seconds = time.perf_counter() - t0
        rows, pandas_seconds = pandas_baseline(raw_root, days)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "rows": rows, "days": args.days, "runner_args": args.runner_args,
        "beam_tft_seconds": round(beam_seconds, 1),
        "beam_tft_rows_per_second": round(rows / beam_seconds),
        "pandas_seconds": round(pandas_seconds, 2),
        "pandas_rows_per_second": round(rows / pandas_seconds),
        "beam_over_pandas_time": round(beam_seconds / pandas_seconds, 1),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "preprocess_ctr.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'':24}{'seconds':>10}{'rows/s':>12}")
    print(f"{'Beam + tf.Transform':24}{beam_seconds:>10.1f}{result['beam_tft_rows_per_second']:>12,}")
    print(f"{'pandas baseline':24}{pandas_seconds:>10.2f}{result['pandas_rows_per_second']:>12,}")
    print(f"{rows:,} rows; written to {RESULTS / 'preprocess_ctr.json'}")


if __name__ == "__main__":
    main()
