"""The CTR train task as the DAG runs it, timed whole: this checkout against another.

The daily DAG's train step is `components.ctr.cluster` with the default params: 1 ps +
1 worker + the coordinator, a 10 % validation slice with early stopping, checkpoints and
the export. The throughput benchmarks (`ps_train.py`, `ps_hosts.py`, `ps_sparse.py`) time
the training loop alone without a validation slice; this one times what a DAG run waits
for, on one window of transformed shards, each run in a fresh output folder. With
`--baseline-root DIR` (a git worktree of an earlier commit) the two checkouts alternate
round by round, so a change is measured against its own past in the same run.

    .venv/bin/python bench/ctr_train_task.py --rounds 3 [--baseline-root /tmp/old]
    .venv/bin/python bench/ctr_train_task.py --preprocess-dir /tmp/pre   # existing shards

Writes bench/results/ctr_train_task.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from retrain.common.version import git_commit

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def _train(root: Path, pre: str, out: Path) -> dict:
    """One train task of the checkout at `root` (its own components/), timed whole."""
    spec = {"train": {"preprocess_dir": pre, "out_dir": str(out)}, "num_ps": 1,
            "num_workers": 1}
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "components.ctr.cluster", "--spec",
                           json.dumps(spec)], cwd=root, env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"train task of {root} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "train_summary.json").read_text())
    return {"wall_seconds": round(wall, 2),
            "loop_seconds": summary["loop_seconds"], "steps": summary["steps_run"],
            "stopped_early": summary["early_stopping"]["stopped_early"],
            "examples_per_second": summary["examples_per_second"],
            "val_auc": summary["history"]["val_auc"][-1]}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preprocess-dir", help="existing preprocess output (default: generate "
                                            "3 days and preprocess them)")
    p.add_argument("--rows-per-day", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--baseline-root", type=Path, help="another checkout, run in every round")
    p.add_argument("--out", default=str(RESULTS / "ctr_train_task.json"))
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-ctr-train-task-"))
    try:
        from ps_train import _prepare   # bench/ps_train.py: 3 generated days, preprocessed

        pre = args.preprocess_dir or _prepare(work, args.rows_per_day)
        sides = {"this": ROOT, **({"baseline": args.baseline_root} if args.baseline_root
                                  else {})}
        runs: dict[str, list[dict]] = {side: [] for side in sides}
        for r in range(args.rounds):
            for side in list(sides) if r % 2 == 0 else list(sides)[::-1]:
                res = _train(sides[side], pre, work / f"model-{side}-{r}")
                runs[side].append(res)
                print(f"round {r + 1} {side:8}: " + ", ".join(f"{k} {v}" for k, v in
                                                             res.items()), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    median = {side: {k: statistics.median(x[k] for x in rs) for k in rs[0]
                     if all(isinstance(x[k], (int, float)) and not isinstance(x[k], bool)
                            for x in rs)}
              for side, rs in runs.items()}
    for side, m in median.items():
        print(f"median {side:8}: " + ", ".join(f"{k} {v}" for k, v in m.items()))
    result = {"benchmark": "ctr_train_task", "data": args.preprocess_dir or
              f"generated, 3 days x {args.rows_per_day} rows, window 3",
              "median": median, "runs": runs, "commit": git_commit(ROOT),
              "baseline": args.baseline_root and {"root": str(args.baseline_root),
                                                  "commit": git_commit(args.baseline_root)},
              "machine": {"cpus": os.cpu_count(), "load_average_end": list(os.getloadavg())},
              "command": "python bench/ctr_train_task.py " + " ".join(argv or sys.argv[1:]),
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
