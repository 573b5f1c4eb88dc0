"""Evaluation at growing held-out sizes: the Beam job (beam_jobs/evaluate_ctr.py) against
the in-memory evaluation it replaced, in the same run.

Two real CTR SavedModels (trained here by the product's trainer on a small generated
window, two seeds) score generated days in which every row is held out (eval_percent
100: only rows that are scored are generated). The job runs in its own process at each
size with one worker (the in-process runner) and, at the smallest and largest sizes,
with two worker processes (`--direct_running_mode=multi_processing`, one TensorFlow
thread each). The in-memory evaluation (every row read and scored into numpy, then
`components.ctr.evaluate.assess`: what shipped before) runs at the smallest size as the
baseline. Peak memory is the largest RSS of the measured process and its children
together, sampled from the bench's own process. Prints a table and writes
bench/results/evaluate_ctr.json, which `retrain plan` reads (rows/s per worker).

    .venv/bin/python bench/evaluate_ctr.py --sizes 1000000,5000000,20000000 \
        --rows-per-day 500000 --data-dir /tmp/evalbench
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from preprocess_ctr import _TreePeak

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
SCORED_START = dt.date(2026, 1, 1)


def _models(data: Path) -> dict[str, str]:
    """Two models trained by the product's trainer on 3 generated days (seeds 1 and 2)."""
    from components.ctr.generate import GenerateSpec, run as generate
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    out = {}
    for name, seed in (("candidate", 1), ("baseline", 2)):
        model = data / "models" / name / "serving_model"
        if not model.exists():
            work = data / "train"
            if not (work / "pre").exists():
                generate(GenerateSpec(out_root=str(work), start="2026-11-01", days=3,
                                      rows_per_day=20000))
                preprocess(PreprocessSpec(raw_root=str(work / "raw" / "ctr"),
                                          span="2026-11-03", output_dir=str(work / "pre"),
                                          window_days=3))
            spec = {"preprocess_dir": str(work / "pre"), "out_dir": str(model.parent),
                    "seed": seed, "checkpoint_every_steps": 0}
            subprocess.run([sys.executable, "-m", "components.ctr.ps_train", "--spec",
                            json.dumps(spec)], check=True, cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={k: v for k, v in os.environ.items() if k != "TF_CONFIG"})
        out[name] = str(model)
    return out


def _scored_days(data: Path, total: int, rows_per_day: int) -> list[str]:
    """Generated days holding `total` rows, newest first (the span first)."""
    from components.ctr.generate import GenerateSpec, run as generate
    days = -(-total // rows_per_day)
    root = data / "scored"
    generate(GenerateSpec(out_root=str(root), start=SCORED_START.isoformat(), days=days,
                          rows_per_day=rows_per_day))
    return [str(root / "raw" / "ctr" / f"dt={SCORED_START + dt.timedelta(days=i)}")
            for i in reversed(range(days))]


def _measure(cmd: list[str]) -> dict:
    started = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    tree = _TreePeak(proc.pid)
    stdout, stderr = proc.communicate()
    peak = tree.stop_mb()
    if proc.returncode:
        raise RuntimeError(f"{cmd[2:4]} failed:\n{stderr[-3000:]}")
    return {"seconds": round(time.time() - started, 2), "peak_mb": peak,
            "result": json.loads(stdout.strip().splitlines()[-1])}


def job(days: list[str], models: dict, workers: int, out: Path) -> dict:
    runner = ([] if workers == 1 else ["--direct_running_mode=multi_processing",
                                       f"--direct_num_workers={workers}", "--tf-threads=1"])
    cmd = [sys.executable, "-m", "beam_jobs.evaluate_ctr", "--day-dirs", json.dumps(days),
           "--eval-percent", "100", "--slices", json.dumps(["category", "device", "user_type"]),
           *[a for name, path in models.items() for a in ("--model", f"{name}={path}")],
           "--output", str(out), *runner]
    m = _measure(cmd)
    rows = m["result"]["rows_scored"]
    return {"workers": workers, "rows": rows, "seconds": m["seconds"], "peak_mb": m["peak_mb"],
            "rows_per_second": round(rows / m["seconds"]),
            "beam_seconds": m["result"]["beam_seconds"]}


def in_memory(days: list[str], models: dict) -> dict:
    code = (
        "import json, sys, time\n"
        "import numpy as np, pyarrow as pa\n"
        "from components import gate\n"
        "from components.ctr import features as F, rawdata, slices\n"
        "from components.ctr.evaluate import assess\n"
        "days, models = json.loads(sys.argv[1]), json.loads(sys.argv[2])\n"
        "rows = pa.concat_tables([rawdata.read_eval_rows(d, 100) for d in days])\n"
        "raw = rawdata.to_raw_features(rows)\n"
        "scores = {n: rawdata.predict(p, raw) for n, p in models.items()}\n"
        "a = assess(rows.column(F.LABEL_KEY).to_numpy(), scores, slices.assign(rows),\n"
        "           gate.Thresholds(min_auc=0.0))\n"
        "print(json.dumps({'rows': rows.num_rows, 'auc': a['candidate']['auc']}))\n")
    m = _measure([sys.executable, "-c", code, json.dumps(days), json.dumps(models)])
    rows = m["result"]["rows"]
    return {"rows": rows, "seconds": m["seconds"], "peak_mb": m["peak_mb"],
            "rows_per_second": round(rows / m["seconds"]), "auc": m["result"]["auc"]}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1000000,5000000,20000000",
                   help="held-out rows scored, comma-separated (smallest first)")
    p.add_argument("--rows-per-day", type=int, default=500_000,
                   help="rows of each generated day (one part file each)")
    p.add_argument("--two-workers-at", default="",
                   help="sizes also run with 2 worker processes (default: smallest, largest)")
    p.add_argument("--data-dir", default="/tmp/retrain-evalbench",
                   help="where the data and models are generated (kept for reruns)")
    p.add_argument("--out", default=str(RESULTS / "evaluate_ctr.json"))
    a = p.parse_args(argv)
    sizes = sorted(int(float(s)) for s in a.sizes.split(","))
    two = ([int(float(s)) for s in a.two_workers_at.split(",")] if a.two_workers_at
           else sorted({sizes[0], sizes[-1]}))
    data = Path(a.data_dir)
    models = _models(data)
    result: dict = {"command": "bench/evaluate_ctr.py " + " ".join(argv or sys.argv[1:]),
                    "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                    "models": list(models), "rows_per_day": a.rows_per_day, "runs": []}
    all_days = _scored_days(data, sizes[-1], a.rows_per_day)
    for size in sizes:
        days = all_days[:-(-size // a.rows_per_day)]      # the newest days, span first
        for workers in (1, 2) if size in two else (1,):
            r = job(days, models, workers, data / f"state-{size}-{workers}.npz")
            result["runs"].append({"kind": "beam_job", **r})
            print(f"  job {workers} worker(s) {r['rows']:>12,} rows {r['seconds']:>8.1f} s "
                  f"{r['rows_per_second']:>9,} rows/s  peak {r['peak_mb']:>7,.0f} MB", flush=True)
        if size == sizes[0]:
            r = in_memory(days, models)
            result["runs"].append({"kind": "in_memory", **r})
            print(f"  in-memory          {r['rows']:>12,} rows {r['seconds']:>8.1f} s "
                  f"{r['rows_per_second']:>9,} rows/s  peak {r['peak_mb']:>7,.0f} MB", flush=True)
    ones = [r for r in result["runs"] if r["kind"] == "beam_job" and r["workers"] == 1]
    big, small = max(ones, key=lambda r: r["rows"]), min(ones, key=lambda r: r["rows"])
    result["peak_ratio_largest_over_smallest"] = round(big["peak_mb"] / small["peak_mb"], 3)
    result["rows_per_second_per_worker"] = big["rows_per_second"]
    pairs = {r["rows"]: r for r in result["runs"] if r["kind"] == "beam_job" and r["workers"] == 2}
    result["two_over_one_workers"] = {str(n): round(r["rows_per_second"] / next(
        o["rows_per_second"] for o in ones if o["rows"] == n), 2) for n, r in pairs.items()}
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("peak_ratio_largest_over_smallest",
                                             "rows_per_second_per_worker",
                                             "two_over_one_workers")}))
    return result


if __name__ == "__main__":
    main()
