"""Training's time against its size, for `retrain plan`: the 1 ps + 1 worker run that
`retrain plan --check` makes (retrain.plan.local_check.commands), at sizes other than the
check's, each run `--repeats` times, the fastest kept (other jobs on a shared machine only
add time). The trainer times reading its statistics (`stats_seconds`: before the
preprocessing job counted, a pass over the window of its own) and its training loop
itself; the rest of the wall time is start-up (three processes, the cluster, tracing).
Prints a table and writes bench/results/train_sweep.json, which retrain/plan/figures.py
reads: the loop's examples/s and the start-up, each from the piece of the measured curve
around the plan's size.

    .venv/bin/python bench/train_sweep.py                     # 30k, 200k, 700k rows a day
    .venv/bin/python bench/train_sweep.py --rows-per-day 50000,500000 --repeats 3
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"


def main(argv: list[str] | None = None) -> int:
    from retrain.plan.local_check import commands, prepare, run_step

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows-per-day", default="30000,200000,700000",
                        help="comma-separated sizes (default: %(default)s)")
    parser.add_argument("--window-days", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS / "train_sweep.json"))
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.rows_per_day.split(",")]
    work = Path(tempfile.mkdtemp(prefix="retrain-train-sweep-"))
    load_before, points = os.getloadavg(), []
    try:
        for rows in sizes:
            d = prepare(work, rows, args.window_days)
            cmds = commands(d, args.window_days, model="")   # no evaluation here
            run_step(d, "preprocess", cmds["preprocess"])
            runs = []
            for _ in range(args.repeats):
                wall, cpu = run_step(d, "train", cmds["train"])
                r = json.loads((d / "train_result.json").read_text())
                runs.append({"wall_s": round(wall, 2), "cpu_s": round(cpu, 1),
                             "stats_s": r["stats_seconds"], "loop_s": r["loop_seconds"],
                             "examples_per_s": r["examples_per_second"]})
            best = min(runs, key=lambda x: x["wall_s"])
            summary = r["summary"]       # of the last run: the same data and budget
            point = {"rows_per_day": rows, "window_rows": rows * args.window_days,
                     "train_rows": summary["train_rows"],
                     "examples": summary["steps_run"] * summary["spec"]["batch_size"],
                     **best, "startup_s": round(best["wall_s"] - best["stats_s"]
                                                - best["loop_s"], 2), "runs": runs}
            points.append(point)
            print(f"{point['window_rows']:>10,} rows: wall {best['wall_s']:6.1f} s = start-up "
                  f"{point['startup_s']:5.1f} + counting {best['stats_s']:5.1f} + loop "
                  f"{best['loop_s']:5.1f} s ({best['examples_per_s']:,.0f} examples/s)",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc = {"benchmark": "train_sweep",
           "command": "bench/train_sweep.py " + " ".join(argv if argv is not None
                                                         else sys.argv[1:]),
           "what": "components.ctr.cluster, 1 ps + 1 worker, 1 epoch, no validation slice, "
                   "no export, no checkpoints (retrain.plan.local_check.commands); the "
                   "fastest of the repeats",
           "window_days": args.window_days, "repeats": args.repeats, "points": points,
           "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before,
                       "loadavg_after": os.getloadavg()},
           "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
