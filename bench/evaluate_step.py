"""The evaluation step's fixed cost: the whole step (`python -m components.ctr.evaluate`:
imports, loading both SavedModels, the Beam job, bootstrap intervals, the report, curves
and the slice guards) at two small held-out sizes, so `retrain plan` predicts a step and
not only its Beam job.

bench/evaluate_ctr.py measures the job's rate at 1M-20M rows; its fixed cost is the job
alone, and the step around it costs more (about 30 s here). This bench runs the step
through its entry point as a task does, on the same two models and generated days,
`--repeats` times interleaved, and takes the fastest run of each size (other jobs on a
shared machine only add time). The start-up is the intercept of the line through the two
points. Writes bench/results/evaluate_step.json, which `retrain plan` reads.

    .venv/bin/python bench/evaluate_step.py --sizes 100000,400000 --data-dir /tmp/evalbench
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

from evaluate_ctr import RESULTS, _models, _scored_days
from preprocess_ctr import _TreePeak

REPO = Path(__file__).resolve().parents[1]


def step(days: list[str], models: dict, out: Path) -> dict:
    """One run of the evaluation step on every row of `days` (eval_percent 100)."""
    spec = {"span_dir": days[0], "window_span_dirs": days, "eval_percent": 100,
            "candidate_model_dir": models["candidate"],
            "baseline_model_dir": models["baseline"], "out_dir": str(out / "evaluation"),
            "min_auc": 0.0}
    result = out / "result.json"
    result.unlink(missing_ok=True)
    started = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "components.ctr.evaluate", "--spec",
                             json.dumps(spec), "--result-file", str(result)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    tree = _TreePeak(proc.pid)
    _, stderr = proc.communicate()
    peak = tree.stop_mb()
    if proc.returncode:
        raise RuntimeError(f"the evaluation step failed:\n{stderr[-3000:]}")
    seconds = time.time() - started
    scored = json.loads(result.read_text())
    return {"seconds": round(seconds, 2), "peak_mb": peak,
            "rows": scored["rows"]}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100000,400000",
                   help="held-out rows scored, two sizes, comma-separated")
    p.add_argument("--rows-per-day", type=int, default=100_000,
                   help="rows of each generated day")
    p.add_argument("--repeats", type=int, default=2, help="runs of each size (interleaved)")
    p.add_argument("--data-dir", default="/tmp/retrain-evalstep",
                   help="where the data and models are generated (kept for reruns)")
    p.add_argument("--out", default=str(RESULTS / "evaluate_step.json"))
    a = p.parse_args(argv)
    sizes = sorted(int(float(s)) for s in a.sizes.split(","))
    if len(sizes) != 2 or sizes[0] == sizes[1]:
        p.error("--sizes: give two different sizes")
    data = Path(a.data_dir)
    models = _models(data)
    all_days = _scored_days(data, sizes[-1], a.rows_per_day)
    runs: dict[int, list[dict]] = {n: [] for n in sizes}
    for rep in range(a.repeats):
        for n in sizes:
            days = all_days[:-(-n // a.rows_per_day)]
            r = step(days, models, data / f"step-{n}")
            runs[n].append(r)
            print(f"  run {rep + 1}/{a.repeats} {r['rows']:>10,} rows {r['seconds']:7.1f} s "
                  f"peak {r['peak_mb']:,.0f} MB", flush=True)
    fastest = {n: min(rs, key=lambda r: r["seconds"]) for n, rs in runs.items()}
    (x0, y0), (x1, y1) = ((fastest[n]["rows"], fastest[n]["seconds"]) for n in sizes)
    slope = (y1 - y0) / (x1 - x0)
    result = {
        "command": "bench/evaluate_step.py " + " ".join(argv or sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_after": os.getloadavg()},
        "what": "the whole evaluation step through its entry point (two models, every row "
                "of the days held out), fastest of the repeats at each size",
        "runs": [{"size": n, **r} for n in sizes for r in runs[n]],
        "startup_seconds": round(y0 - slope * x0, 2),
        "step_rows_per_second": round(1 / slope) if slope > 0 else None,
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("startup_seconds", "step_rows_per_second")}))
    return result


if __name__ == "__main__":
    main()
