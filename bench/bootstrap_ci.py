"""Bootstrap intervals' cost at evaluation sizes: `components.metrics.bootstrap_ci`
(paired, candidate against a baseline) on 10k to 1M held-out rows, fastest of `--repeats`.

Why a bench: the evaluation step computes these intervals on every run, and its docstring
promises about 0.1 s for 200 x 10k rows. A wall-clock figure belongs here, printed and kept
in bench/results/bootstrap_ci.json, not in a unit test that fails on a busy machine.

    .venv/bin/python bench/bootstrap_ci.py --sizes 10000,100000,1000000
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from components import metrics  # noqa: E402

RESULTS = REPO / "bench" / "results" / "bootstrap_ci.json"


def scored_rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Labels and a weakly informative score, rounded as a model's probabilities often are."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    s = np.clip(0.5 + 0.25 * (y - 0.5) + rng.normal(0, 0.2, n), 0.01, 0.99)
    return y, np.round(s, 2)


def measure(n: int, resamples: int, repeats: int) -> dict:
    y, s = scored_rows(n)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        metrics.bootstrap_ci(y, s, baseline_probs=s[::-1].copy(), n_resamples=resamples)
        times.append(time.perf_counter() - started)
    return {"rows": n, "resamples": resamples, "seconds_best": round(min(times), 4),
            "seconds_all": [round(t, 4) for t in times]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000",
                    help="held-out row counts, comma separated (default: %(default)s)")
    ap.add_argument("--resamples", type=int, default=200, help="default: %(default)s")
    ap.add_argument("--repeats", type=int, default=3, help="default: %(default)s")
    args = ap.parse_args(argv)
    runs = []
    for n in (int(x) for x in args.sizes.split(",")):
        runs.append(measure(n, args.resamples, args.repeats))
        print(f"bootstrap {args.resamples} x {n:,} rows, paired: "
              f"{runs[-1]['seconds_best']:.3f} s (best of {args.repeats})", flush=True)
    out = {"bench": "bootstrap_ci", "when": dt.datetime.now(dt.timezone.utc).isoformat(),
           "host": platform.node(), "cpus": os.cpu_count(),
           "load_avg": os.getloadavg()[0], "command": " ".join(["bench/bootstrap_ci.py",
                                                                *(argv or sys.argv[1:])]),
           "runs": runs}
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
