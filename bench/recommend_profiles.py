"""The recommendation inputs (one profile per active user, one row per item) as the window
grows at a fixed number of users: the Beam job `beam_jobs.recommend_profiles` against the
driver-side build it replaced (the whole window read into one table), given as a checkout.

Generates `--days-per-point` windows of generated logs (`--rows-per-day` rows a day,
`--users` users), then builds the inputs of each window both ways, each in a fresh
process timed by /usr/bin/time (wall seconds, peak RSS), alternated `--repeats` times:

- job: `python -m beam_jobs.recommend_profiles` (DirectRunner, one process), without
  seen lists (plain) and with them (`--seen-max 1000`: seen);
- baseline: with `--baseline-root` (a checkout of 6699f6f or older), its
  `recommend_inputs.read_window` + `users` (seen lists off / on) + `items`, as its
  recommend step ran them. Both ways must give the same users (latest values, seen lists) and items
  (latest values, clicks, impressions): checked, `same_inputs` in the results.

    .venv/bin/python bench/recommend_profiles.py --rows-per-day 500000 --users 50000 \\
        --days-per-point 1,2,4 --baseline-root /tmp/wt-6699f6f

Prints the figures; writes bench/results/recommend_profiles.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results"

USER_SIDE = ["device", "user_past_clicks"]
ITEM_SIDE = ["category_id", "price", "item_age_days"]

BASELINE = """
import sys
from components.ctr import feature_config, recommend_inputs as I
cfg = feature_config.for_model_dir(sys.argv[1])
rows, days = I.read_window(sys.argv[2], sys.argv[3], int(sys.argv[4]), cfg)
users = I.users(rows, "user_id", {user_side}, "item_id" if sys.argv[6] == "1" else None)
items = I.items(rows, cfg.label, "item_id", {item_side}, "window", 0)
import pyarrow.parquet as pq
pq.write_table(users, sys.argv[5] + "/users.parquet")
pq.write_table(items, sys.argv[5] + "/items.parquet")
print(users.num_rows, items.num_rows)
"""


def same_inputs(job_out: Path, base_out: Path, seen_max: int) -> dict:
    """Whether the job's users (every shard) and items hold what the baseline's tables
    hold. A seen list the job capped (a user with more than `seen_max` distinct items)
    must be `seen_max` of the baseline's uncapped list; such users are counted."""
    import pyarrow.parquet as pq

    from beam_jobs.recommend_profiles import WINDOW_ITEMS
    from components.ctr.recommend_inputs import CLICKS, IMPRESSIONS, SEEN

    def cell(v):
        if isinstance(v, list):
            return tuple(v)
        return None if isinstance(v, float) and v != v else v   # NaN equals NaN here

    def rows(table, key, columns):
        return {str(r[key]): tuple(cell(r[c]) for c in columns)
                for r in table.select([key, *columns]).to_pylist()}

    cols = [*USER_SIDE, SEEN]
    job = rows(pq.read_table(job_out / "users"), "user_id", cols)
    base = rows(pq.read_table(base_out / "users.parquet"), "user_id", cols)
    capped = [u for u, r in base.items() if len(r[-1]) > seen_max]
    users_same = job.keys() == base.keys() and all(
        job[u][:-1] == r[:-1] and (job[u][-1] == r[-1] if len(r[-1]) <= seen_max else
                                   len(job[u][-1]) == seen_max
                                   and set(job[u][-1]) <= set(r[-1]))
        for u, r in base.items())
    cols = [*ITEM_SIDE, CLICKS, IMPRESSIONS]
    items_same = (rows(pq.read_table(job_out / WINDOW_ITEMS), "item_id", cols)
                  == rows(pq.read_table(base_out / "items.parquet"), "item_id", cols))
    return {"users": users_same, "items": items_same, "users_capped": len(capped)}


def timed(cmd: list[str], root: str | Path) -> tuple[float, float, str]:
    """Wall seconds and peak RSS (MB) of a command in a fresh process run from (and
    importing) the checkout `root`, and its stdout."""
    env = {**os.environ, "PYTHONPATH": str(root), "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", *cmd], env=env, cwd=root,
                         capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"failed ({out.returncode}): {cmd[:3]}\n{out.stderr[-3000:]}")
    line = [x for x in out.stderr.splitlines() if x.startswith("TIME ")][-1]
    wall, kb = line.split()[1:]
    return float(wall), int(kb) / 1024, out.stdout


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows-per-day", type=int, default=500_000)
    p.add_argument("--users", type=int, default=50_000)
    p.add_argument("--items", type=int, default=20_000)
    p.add_argument("--days-per-point", default="1,2,4")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--baseline-root", default=None)
    args = p.parse_args(argv)

    from components.ctr import feature_config
    from components.ctr.generate import GenerateSpec, run as generate

    points = [int(x) for x in args.days_per_point.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-recommend-profiles-"))
    try:
        generate(GenerateSpec(out_root=str(work), start="2026-11-01", days=max(points),
                              rows_per_day=args.rows_per_day, n_users=args.users,
                              n_items=args.items, n_categories=50))
        model = work / "model"
        model.mkdir()
        feature_config.write_model_config(model, feature_config.default())
        raw = str(work / "raw" / "ctr")
        all_days = sorted(d.name.removeprefix("dt=") for d in Path(raw).glob("dt=*"))
        rows = []
        for days in points:
            window = all_days[:days]
            span = window[-1]
            job = [sys.executable, "-m", "beam_jobs.recommend_profiles", "--raw-root", raw,
                   "--days", json.dumps(window), "--model-dir", str(model),
                   "--user-column", "user_id", "--item-column", "item_id",
                   "--user-side", json.dumps(USER_SIDE), "--item-side", json.dumps(ITEM_SIDE),
                   "--num-shards", "8"]
            base = [sys.executable, "-c",
                    BASELINE.format(user_side=USER_SIDE, item_side=ITEM_SIDE),
                    str(model), raw, span, str(days), str(work / f"base-{days}")]
            point = {"days": days, "rows": days * args.rows_per_day}
            for seen in (False, True):
                tag = "seen" if seen else "plain"
                for _ in range(args.repeats):
                    out = work / f"out-{days}"
                    shutil.rmtree(out, ignore_errors=True)
                    wall, mb, stdout = timed([*job, "--output-dir", str(out), "--seen-max",
                                              "1000" if seen else "0"], REPO)
                    summary = json.loads(stdout[stdout.index("{"):])
                    point.setdefault(f"job_{tag}", []).append(
                        {"seconds": wall, "peak_rss_mb": round(mb),
                         "users": summary["users_written"]})
                    if args.baseline_root:
                        (work / f"base-{days}").mkdir(exist_ok=True)
                        wall, mb, stdout = timed([*base, "1" if seen else "0"],
                                                 args.baseline_root)
                        point.setdefault(f"baseline_{tag}", []).append(
                            {"seconds": wall, "peak_rss_mb": round(mb),
                             "users": int(stdout.split()[0])})
                        if seen:
                            point["same_inputs"] = same_inputs(out, work / f"base-{days}", 1000)
            rows.append(point)
            print(json.dumps(point), flush=True)
        result = {"command": "bench/recommend_profiles.py " + " ".join(argv or sys.argv[1:]),
                  "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                  "users": args.users, "rows_per_day": args.rows_per_day, "points": rows}
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "recommend_profiles.json").write_text(json.dumps(result, indent=2) + "\n")
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
