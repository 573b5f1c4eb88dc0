"""Step time and parameter-server memory as the embedding tables grow, dense vs lazy Adam.

One run, 1 ps + 1 worker (`components.ctr.cluster`) on the same transformed shards: the
`user_id` and `item_id` tables are widened to each size in `--rows` (the user table also
gets a 16-wide embedding in the deep part, so a step looks up ~2k of its rows), trained
for `--steps` steps with tf_keras's Adam (which decays both moment slots of every row on
every step) and with the trainers' default lazy Adam (only the looked-up rows:
`components.ctr.optimizers`). Step time is the trainer's own loop time per step (no
start-up). Memory: the ps's peak private memory against its share of weights + two Adam
slots; the TensorFlow runtime is what remains at the smallest size. Prints a table and
writes bench/results/ps_sparse.json.

    .venv/bin/python bench/ps_sparse.py --rows 262144,1048576,4194304 --steps 200
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BATCH = 1024
USER_DIM = 16


def _spec(pre: str, out: Path, rows: int, optimizer: str, steps: int) -> dict:
    from components.ctr import feature_config as fc
    deep = list(fc.default().model.deep_fields) + ["user_id"]
    return {"preprocess_dir": pre, "out_dir": str(out), "epochs": 100, "max_steps": steps,
            "batch_size": BATCH, "steps_per_execution": 20, "export": False,
            "checkpoint_every_steps": 0, "validation_percent": 0, "optimizer": optimizer, "deep_fields": deep,
            "embedding_dims": {"user_id": USER_DIM},
            "table_rows": {"user_id": rows, "item_id": rows}}


def _table_mb(rows: int) -> float:
    """Weights of the two widened tables: user bias + embedding, item bias (float32)."""
    return rows * (1 + USER_DIM + 1) * 4 / 2**20


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="262144,1048576,4194304",
                   help="table rows per size, comma-separated (default 2^18, 2^20, 2^22)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--optimizers", default="adam,lazy_adam")
    p.add_argument("--preprocess-dir", help="existing output of beam_jobs.preprocess_ctr "
                                            "(default: generate and preprocess 3 x 30k rows)")
    args = p.parse_args(argv)
    from components.ctr.cluster import ClusterSpec, run
    from ps_train import _prepare   # bench/ps_train.py: the same data preparation

    sizes = [int(x) for x in args.rows.split(",") if x]
    work = Path(tempfile.mkdtemp(prefix="bench-ps-sparse-"))
    points = []
    try:
        pre = args.preprocess_dir or _prepare(work, 30_000)
        for optimizer in args.optimizers.split(","):
            for rows in sizes:
                t0 = time.time()
                r = run(ClusterSpec(train=_spec(pre, work / f"{optimizer}-{rows}", rows,
                                                optimizer, args.steps),
                                    num_ps=1, num_workers=1), sink=lambda line: None)
                peaks = r["cluster"]["peak_private_mb"]
                ps_peak = max(v for k, v in peaks.items() if k.startswith("ps/"))
                point = {"optimizer": optimizer, "table_rows": rows,
                         "steps": r.get("steps", args.steps),
                         "step_ms": round(1000 * BATCH / r["examples_per_second"], 2),
                         "ps_peak_private_mb": round(ps_peak),
                         "weights_mb": round(_table_mb(rows)),
                         "weights_and_slots_mb": round(3 * _table_mb(rows)),
                         "wall_s_incl_startup": round(time.time() - t0, 1)}
                points.append(point)
                print(f"  {optimizer:9} {rows:>9,} rows  {point['step_ms']:>8.1f} ms/step  "
                      f"ps peak {ps_peak:>6,.0f} MB (weights + slots "
                      f"{point['weights_and_slots_mb']:,} MB)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"benchmark": "ps_sparse", "command": "bench/ps_sparse.py " + " ".join(
        sys.argv[1:] if argv is None else argv), "batch_size": BATCH, "points": points,
        "machine": {"cpus": os.cpu_count(), "loadavg_after": os.getloadavg()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for optimizer in args.optimizers.split(","):
        mine = [q for q in points if q["optimizer"] == optimizer]
        small, big = mine[0], mine[-1]
        runtime = small["ps_peak_private_mb"] - small["weights_and_slots_mb"]
        out[optimizer] = {
            "step_time_ratio_largest_to_smallest": round(big["step_ms"] / small["step_ms"], 2),
            "ps_runtime_mb": runtime,
            "ps_peak_over_weights_and_slots_largest": round(
                (big["ps_peak_private_mb"] - runtime) / big["weights_and_slots_mb"], 2)}
        print(f"{optimizer}: step time x{out[optimizer]['step_time_ratio_largest_to_smallest']} "
              f"from {small['table_rows']:,} to {big['table_rows']:,} rows; ps peak minus "
              f"the runtime ({runtime} MB) = "
              f"{out[optimizer]['ps_peak_over_weights_and_slots_largest']}x weights + slots")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ps_sparse.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
