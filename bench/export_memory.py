"""The coordinator's memory while the CTR trainer exports, against the size of its tables.

The export used to copy every table from the parameter servers into a plain model on the
coordinator before saving it (`gather`), so the coordinator needed the whole model's
memory; it now saves the sharded network itself: each parameter server writes its shards
as slices of one full-shape variable (components/ctr/train_export.py).

For each size, one cluster of 2 ps + 1 worker + the chief (components.ctr.cluster, local
processes) trains 4 steps on the same small preprocessed window, with `user_id` given a
deep embedding of `--dim` floats and `--rows` table rows, and then:
  this      exports with this checkout's trainer,
  no_export does not export (this checkout: the chief's memory without any export),
  baseline  exports with the trainer of `--baseline-root` (a git worktree of an earlier
            commit, e.g. 27cdae7, which gathers), if given.
The chief's peak RSS (VmHWM from /proc) is the figure; each side runs in a process of its
own. Each exported model is fed 512 raw eval rows, which the trainer also scored in the
cluster before exporting (`check_raw_rows`): the two must agree.
Writes bench/results/export_memory.json.

    git worktree add /tmp/base-27cdae7 27cdae7
    .venv/bin/python bench/export_memory.py --rows 262144,1048576,4194304 \
        --baseline-root /tmp/base-27cdae7
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


def _prepare(data: Path, rows_per_day: int) -> tuple[str, str]:
    from components.ctr.generate import GenerateSpec, run as generate
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    pre = data / "pre"
    if not (pre / "split_stats.npz").exists():
        generate(GenerateSpec(out_root=str(data), start="2026-11-01", days=3,
                              rows_per_day=rows_per_day))
        preprocess(PreprocessSpec(raw_root=str(data / "raw" / "ctr"), span="2026-11-03",
                                  output_dir=str(pre), window_days=3))
    return str(pre), str(data / "raw" / "ctr" / "dt=2026-11-03")


def _cluster(code_root: Path, pre: str, out: Path, rows: int, dim: int, export: bool,
             check_rows: Path) -> dict:
    from components.ctr import feature_config
    deep = list(feature_config.default().model.deep_fields) + ["user_id"]
    train = {"preprocess_dir": pre, "out_dir": str(out), "batch_size": 256, "max_steps": 4,
             "steps_per_execution": 2, "checkpoint_every_steps": 0, "validation_percent": 0,
             "deep_fields": deep, "embedding_dims": {"user_id": dim},
             "table_rows": {"user_id": rows}, "export": export,
             "check_raw_rows": str(check_rows) if export else None}
    spec = {"train": train, "num_ps": 2, "num_workers": 1}
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(PYTHONPATH=str(code_root), TF_CPP_MIN_LOG_LEVEL="2")
    result_file = out.parent / f"{out.name}.result.json"
    started = time.time()
    subprocess.run([sys.executable, "-m", "components.ctr.cluster", "--spec", json.dumps(spec),
                    "--result-file", str(result_file)], check=True, cwd=code_root, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = json.loads(result_file.read_text())
    c = r["cluster"]
    return {"wall_s": round(time.time() - started, 1),
            "chief_peak_rss_mb": c["peak_rss_mb"]["chief"],
            "ps_peak_rss_mb": [c["peak_rss_mb"][f"ps/{i}"] for i in range(2)],
            "train_seconds": r.get("train_seconds"), "model_dir": r.get("model_dir")}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="262144,524288,1048576,2097152,4194304",
                   help="user_id table rows, comma-separated")
    p.add_argument("--dim", type=int, default=64, help="user_id embedding width (floats)")
    p.add_argument("--baseline-root", default="", help="worktree of an earlier commit")
    p.add_argument("--data-dir", default="/tmp/retrain-export-memory")
    p.add_argument("--out", default=str(RESULTS / "export_memory.json"))
    a = p.parse_args(argv)
    import numpy as np

    from components.ctr import rawdata
    data = Path(a.data_dir)
    pre, eval_day = _prepare(data, 20_000)
    raw = rawdata.to_raw_features(rawdata.read_eval_rows(eval_day, 25).slice(0, 512))
    check_rows = data / "check_rows.json"
    check_rows.write_text(json.dumps({k: v.tolist() for k, v in raw.items()}))
    sides = [("this", REPO, True), ("no_export", REPO, False)]
    if a.baseline_root:
        sides.append(("baseline", Path(a.baseline_root), True))
    result: dict = {"command": "bench/export_memory.py " + " ".join(argv or sys.argv[1:]),
                    "machine": {"cpus": os.cpu_count()}, "dim": a.dim,
                    "cluster": "2 ps + 1 worker + chief, local processes", "points": []}
    for rows in (int(float(x)) for x in a.rows.split(",")):
        point: dict = {"table_rows": rows, "table_mb": round(rows * a.dim * 4 / 2**20, 1)}
        for name, root, export in sides:
            point[name] = _cluster(root, pre, data / f"model-{rows}-{name}", rows, a.dim, export,
                                   check_rows)
            print(f"  {rows:>10,} rows ({point['table_mb']:>7,.0f} MB table)  {name:9} chief "
                  f"peak {point[name]['chief_peak_rss_mb']:>7,.0f} MB  ps peaks "
                  f"{point[name]['ps_peak_rss_mb']}  wall {point[name]['wall_s']} s", flush=True)
        for name, _, export in sides:
            if export:
                model_dir = Path(point[name]["model_dir"])
                in_cluster = json.loads((model_dir.parent / "in_training_predictions.json")
                                        .read_text())["p_click"]
                point[name]["max_abs_exported_minus_in_cluster"] = float(np.max(np.abs(
                    rawdata.predict(model_dir, raw) - np.asarray(in_cluster))))
        point["export_over_no_export_mb"] = round(
            point["this"]["chief_peak_rss_mb"] - point["no_export"]["chief_peak_rss_mb"], 1)
        result["points"].append(point)
    peaks = [pt["this"]["chief_peak_rss_mb"] for pt in result["points"]]
    result["this_chief_peak_max_over_min"] = round(max(peaks) / min(peaks), 3)
    if a.baseline_root:
        base = [pt["baseline"]["chief_peak_rss_mb"] for pt in result["points"]]
        result["baseline_chief_peak_max_over_min"] = round(max(base) / min(base), 3)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k.endswith("max_over_min")}))
    return result


if __name__ == "__main__":
    main()
