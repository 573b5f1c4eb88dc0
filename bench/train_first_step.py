"""The CTR trainer's time before its first step, against the window's rows.

The trainer used to count the window's training rows, clicks and per-id occurrences in a
pass of its own before training (~57 h at the seed's 7e10 rows, in one process); the
preprocessing job now counts them while it transforms (`components/ctr/split_stats.py`).
For each window size this bench generates 3 days, preprocesses them as the DAG does, then
runs the trainer in one process (no TF_CONFIG) with a budget of 4 steps, no checkpoints
and no export, and reads from its result `before_first_step_seconds` (entering the
trainer to scheduling step 1) and `stats_seconds`. With `--baseline-root DIR` (a git
worktree of an earlier commit) that checkout's trainer runs on the same preprocessed
output in the same run, alternating; it reports its counting pass as `stats_seconds`.
Each side's wall time counts its imports too. Writes bench/results/train_first_step.json.

    .venv/bin/python bench/train_first_step.py --window-rows 100000,2000000,20000000 \
        --baseline-root /tmp/base-c2c1efb
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def _prepare(data: Path, window_rows: int) -> str:
    from components.ctr.generate import GenerateSpec, run as generate
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    work = data / f"w{window_rows}"
    pre = work / "pre"
    if not (pre / "split_stats.npz").exists():
        generate(GenerateSpec(out_root=str(work), start="2026-11-01", days=3,
                              rows_per_day=-(-window_rows // 3)))
        preprocess(PreprocessSpec(raw_root=str(work / "raw" / "ctr"), span="2026-11-03",
                                  output_dir=str(pre), window_days=3))
    return str(pre)


def _train(code_root: Path, pre: str, out: Path) -> dict:
    spec = {"preprocess_dir": pre, "out_dir": str(out), "train_examples": 4096,
            "export": False, "checkpoint_every_steps": 0}
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(PYTHONPATH=str(code_root), TF_CPP_MIN_LOG_LEVEL="2")
    result = out.parent / f"{out.name}.result.json"
    started = time.time()
    subprocess.run([sys.executable, "-m", "components.ctr.ps_train", "--spec", json.dumps(spec),
                    "--result-file", str(result)], check=True, cwd=code_root, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = json.loads(result.read_text())
    return {"wall_s": round(time.time() - started, 2), "stats_s": r.get("stats_seconds"),
            "before_first_step_s": r.get("before_first_step_seconds")}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--window-rows", default="100000,2000000,20000000")
    p.add_argument("--baseline-root", default="", help="worktree of an earlier commit")
    p.add_argument("--data-dir", default="/tmp/retrain-firststep")
    p.add_argument("--out", default=str(RESULTS / "train_first_step.json"))
    a = p.parse_args(argv)
    data = Path(a.data_dir)
    sides = {"this": REPO, **({"baseline": Path(a.baseline_root)} if a.baseline_root else {})}
    result: dict = {"command": "bench/train_first_step.py " + " ".join(argv or sys.argv[1:]),
                    "machine": {"cpus": os.cpu_count()}, "points": []}
    for rows in (int(float(x)) for x in a.window_rows.split(",")):
        pre = _prepare(data, rows)
        point = {"window_rows": rows}
        for name, root in sides.items():
            point[name] = _train(root, pre, data / f"model-{rows}-{name}")
            print(f"  {rows:>12,} rows  {name:8} wall {point[name]['wall_s']:>7.1f} s  "
                  f"stats {point[name]['stats_s']:>7.2f} s  before first step "
                  f"{point[name]['before_first_step_s']}", flush=True)
        result["points"].append(point)
    firsts = [pt["this"]["before_first_step_s"] for pt in result["points"]]
    result["this_before_first_step_max_over_min"] = round(max(firsts) / min(firsts), 2)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"this_before_first_step_max_over_min":
                      result["this_before_first_step_max_over_min"]}))
    return result


if __name__ == "__main__":
    main()
