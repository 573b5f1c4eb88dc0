"""The memory wall: embedding tables larger than any one parameter server may hold, trained
to the end over parameter servers on separate network-namespace hosts.

Issue 44: a table that outgrows one machine must still train, sharded over several. For
each size in `--rows` the `user_id` and `item_id` tables are widened to that many rows,
each with a `--dim`-wide embedding besides its bias (lazy Adam: two slots per trainable
row), and trained for `--steps` steps by `--num-ps` parameter servers, each on its own
namespace host (retrain.common.netns), the worker on another, the chief in the root
namespace. Every ps runs under `ps_memory_limit_mb` (components.ctr.cluster kills a ps
above it, as an OOM killer would), the cap set to

    runtime + headroom x (one ps's share of weights + slots)

where the runtime is measured first (one ps at the feature config's own table sizes: its
peak private memory minus its weights + slots, as bench/ps_sparse.py derives it) and the
headroom covers the initial values that sit beside each table while it is created
(ps_sparse measured 1.76x weights + slots at the peak). Shares come from the capacity
plan's own table model (retrain.plan.tables). A control run puts the largest size on ONE
ps with the same cap: it must be killed by the cap. A run the cap kills is recorded as a
failed point with its reason, never crashes the bench. Each size runs `--repeats` times,
round robin (the machine is shared: step time is the median of the trainer's own loop time,
no start-up). Needs root. Prints a table and writes bench/results/memory_wall.json.

    sudo .venv/bin/python bench/memory_wall.py          # 2^20, 2^22, 2^24 rows, 4 ps
    sudo .venv/bin/python bench/memory_wall.py --rows 1048576,4194304 --steps 50
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BATCH = 1024
WIDENED = ("user_id", "item_id")
KILLED = re.compile(r"(ps/\d+) uses (\d+) MB private memory > limit")


def _spec(pre: str, out: Path, rows: int | None, dim: int, steps: int) -> dict:
    """ps_sparse's training spec with both tables widened and embedded (rows None: the
    feature config's own sizes)."""
    from components.ctr import feature_config as fc
    deep = list(fc.default().model.deep_fields) + list(WIDENED)
    return {"preprocess_dir": pre, "out_dir": str(out), "epochs": 100, "max_steps": steps,
            "batch_size": BATCH, "steps_per_execution": 20, "export": False,
            "checkpoint_every_steps": 0, "validation_percent": 0, "optimizer": "lazy_adam",
            "deep_fields": deep, "embedding_dims": {k: dim for k in WIDENED},
            "table_rows": {k: rows for k in WIDENED} if rows else {}}


def _sizes_mb(rows: int | None, dim: int, num_ps: int) -> dict:
    """Weights, weights + slots of the whole model, and the most one of `num_ps` ps holds
    (the plan's model of the trainer's tables and its round-robin sharding)."""
    from components.ctr.ps_train import PsTrainSpec
    from retrain.plan.spec import PlanSpec
    from retrain.plan.tables import model_tables, ps_bytes
    from components.ctr import feature_config as fc
    plan = PlanSpec(table_rows={k: rows for k in WIDENED} if rows else {},
                    embedding_dims={k: dim for k in WIDENED}, optimizer="lazy_adam")
    tables, _, slots = model_tables(plan, fc.default())
    mb = 2 ** 20
    return {"weights_mb": round(sum(t.rows * t.width * 4 for t in tables) / mb, 1),
            "weights_and_slots_mb": round(sum(t.rows * t.width * 4 * (1 + (
                slots if t.trainable else 0)) for t in tables) / mb, 1),
            "share_per_ps_mb": round(ps_bytes(tables, num_ps, slots,
                                              PsTrainSpec.min_shard_bytes) / mb, 1)}


def _attempt(run, cluster_spec, started: float) -> dict:
    """One cluster run as a point: finished with its figures, or failed with the reason
    (the launcher's kill line says at how many MB the cap struck)."""
    from components.ctr.cluster import ClusterFailed
    lines: list[str] = []
    try:
        r = run(cluster_spec, sink=lines.append)
    except ClusterFailed as e:
        killed = [m.groups() for m in map(KILLED.search, lines) if m]
        return {"finished": False, "failure": str(e)[:400],
                "killed_by_cap": bool(killed),
                "killed_at_mb": {task: int(mb) for task, mb in killed},
                "wall_s_incl_startup": round(time.time() - started, 1)}
    peaks = r["cluster"]["peak_private_mb"]
    return {"finished": True, "steps": r["steps_run"],
            "step_ms": round(1000 * BATCH / r["examples_per_second"], 2),
            "ps_peak_private_mb": {k: round(v) for k, v in peaks.items() if k.startswith("ps/")},
            "worker_peak_private_mb": round(peaks.get("worker/0", 0)),
            "chief_peak_private_mb": round(peaks.get("chief", 0)),
            "wall_s_incl_startup": round(time.time() - started, 1)}


def _by_size(runs: list[dict]) -> dict:
    """One size's runs in one row: all finished, the highest ps peak, the median step."""
    first, ok = runs[0], [q for q in runs if q["finished"]]
    peak = max((v for q in ok for v in q["ps_peak_private_mb"].values()), default=None)
    return {k: first[k] for k in ("table_rows", "weights_mb", "weights_and_slots_mb",
                                  "num_ps", "share_per_ps_mb", "cap_mb",
                                  "cap_below_weights_and_slots")} | {
        "runs": len(runs), "finished": len(ok) == len(runs), "ps_peak_private_mb_max": peak,
        "peak_within_cap": peak is not None and peak <= first["cap_mb"],
        "step_ms_median": statistics.median(q["step_ms"] for q in ok) if ok else None,
        "step_ms_runs": [q["step_ms"] for q in ok]}


def _memory_gb() -> tuple[float, float]:
    """(total, available) memory of this machine, GB."""
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return tuple(round(int(info[k].split()[0]) / 2**20, 1) for k in ("MemTotal", "MemAvailable"))


def _print(label: str, p: dict) -> None:
    peak = max({**p.get("ps_peak_private_mb", {}), **p.get("killed_at_mb", {})}.values(),
               default=0)
    rows = f"{p['table_rows']:,}" if p["table_rows"] else "own"
    if p["finished"]:
        outcome = f"{p['step_ms']:>7.1f} ms/step  finished"
    elif p["killed_by_cap"]:
        outcome = f"{'':>15}  FAILED: killed by the cap at {p['killed_at_mb']} MB"
    else:
        outcome = f"{'':>15}  FAILED: {p['failure'][:120]}"
    print(f"  {label:<9} {rows:>11} {p['weights_and_slots_mb']:>10,.0f} "
          f"{p['num_ps']:>3} {p['cap_mb'] or 0:>8,} {p['share_per_ps_mb']:>9,.0f} "
          f"{peak:>9,}  {outcome}", flush=True)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="1048576,4194304,16777216",
                   help="rows of each widened table per size, comma-separated "
                        "(default 2^20, 2^22, 2^24)")
    p.add_argument("--dim", type=int, default=16, help="embedding width of both tables")
    p.add_argument("--num-ps", type=int, default=4, help="parameter servers at every size")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3,
                   help="sharded runs per size, round robin (the table shows the median)")
    p.add_argument("--headroom", type=float, default=2.0,
                   help="cap = runtime + headroom x one ps's weights + slots")
    p.add_argument("--preprocess-dir", help="existing output of beam_jobs.preprocess_ctr "
                                            "(default: generate and preprocess 3 x 30k rows)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("bench/memory_wall.py needs root (network namespaces)")
    from components.ctr.cluster import ClusterSpec, run
    from ps_train import _prepare   # bench/ps_train.py: the same data preparation
    from retrain.common.netns import Network, free_subnet

    sizes = [int(x) for x in args.rows.split(",") if x]
    hosts = tuple(f"ps{i}" for i in range(args.num_ps)) + ("wk",)
    net = Network(f"mw{secrets.token_hex(2)}", free_subnet(), hosts)
    work = Path(tempfile.mkdtemp(prefix="bench-memory-wall-"))
    load_before, (mem_total, mem_available) = os.getloadavg(), _memory_gb()
    points = []

    def point(label: str, rows: int | None, num_ps: int, cap_mb: int, repeat: int = 0) -> dict:
        placed = {f"ps/{i}": net.host(f"ps{i}").placement() for i in range(num_ps)}
        spec = ClusterSpec(train=_spec(pre, work / f"{label}-{rows}-{repeat}", rows, args.dim,
                                       args.steps),
                           num_ps=num_ps, num_workers=1, host=net.gateway,
                           hosts={**placed, "worker": net.host("wk").placement()},
                           ps_memory_limit_mb=cap_mb)
        q = {"run": label, "repeat": repeat, "table_rows": rows, "num_ps": num_ps, "cap_mb": cap_mb or None,
             **_sizes_mb(rows, args.dim, num_ps)}
        q.update(_attempt(run, spec, time.time()))
        if q["finished"] and cap_mb:
            q["peak_within_cap"] = max(q["ps_peak_private_mb"].values()) <= cap_mb
        q["cap_below_weights_and_slots"] = bool(cap_mb) and cap_mb < q["weights_and_slots_mb"]
        points.append(q)
        _print(label, q)
        return q

    try:
        pre = args.preprocess_dir or _prepare(work, 30_000)
        net.up()
        print(f"  {'run':<9} {'rows/table':>11} {'w+slots MB':>10} {'ps':>3} {'cap MB':>8} "
              f"{'share MB':>9} {'peak MB':>9}")
        calib = point("runtime", None, 1, 0)
        if not calib["finished"]:
            raise SystemExit(f"the runtime calibration failed: {calib['failure']}")
        runtime = calib["ps_peak_private_mb"]["ps/0"] - calib["share_per_ps_mb"]
        caps = {rows: math.ceil(runtime + args.headroom * _sizes_mb(
            rows, args.dim, args.num_ps)["share_per_ps_mb"]) for rows in sizes}
        # Every ps may grow to its cap, the worker and chief need ~1 GB each besides.
        need_gb = (args.num_ps * caps[sizes[-1]] + 2048) / 1024
        if need_gb > _memory_gb()[1]:
            raise SystemExit(f"{args.num_ps} ps at caps of {caps[sizes[-1]]:,} MB need "
                             f"{need_gb:.1f} GB, more than this machine has available "
                             f"({_memory_gb()[1]} GB): pass smaller --rows")
        for i in range(args.repeats):   # round robin: load drifts hit every size alike
            for rows in sizes:
                point("sharded", rows, args.num_ps, caps[rows], i)
        control = point("control", sizes[-1], 1, caps[sizes[-1]])
    finally:
        net.down()
        shutil.rmtree(work, ignore_errors=True)
    sizes_out = [_by_size([q for q in points if q["run"] == "sharded" and q["table_rows"] == r])
                 for r in sizes]
    done = all(q["finished"] for q in sizes_out)
    out = {"benchmark": "memory_wall", "command": "bench/memory_wall.py " + " ".join(
        sys.argv[1:] if argv is None else argv),
        "batch_size": BATCH, "steps": args.steps, "embedding_dim": args.dim,
        "optimizer": "lazy_adam", "num_ps": args.num_ps, "repeats": args.repeats,
        "headroom": args.headroom, "ps_runtime_mb": round(runtime),
        "placement": "each ps on its own network-namespace host, the worker on another, "
                     "the chief in the root namespace",
        "sizes": sizes_out, "control": control, "points": points,
        "summary": {
            "all_sharded_finished": done,
            "all_peaks_within_cap": all(q["peak_within_cap"] for q in sizes_out),
            "control_killed_by_cap": control.get("killed_by_cap", False),
            "step_ms_largest_over_smallest": round(
                sizes_out[-1]["step_ms_median"] / sizes_out[0]["step_ms_median"], 2)
            if done else None},
        "machine": {"cpus": os.cpu_count(), "memory_gb": mem_total,
                    "memory_available_gb_before": mem_available,
                    "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                    "note": "2-core machine shared with other jobs; step times are noisy"},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"\n{args.num_ps} ps, medians of {args.repeats} runs (runtime {runtime:.0f} MB):")
    for q in sizes_out:
        print(f"  {q['table_rows']:>11,} rows/table  weights + slots "
              f"{q['weights_and_slots_mb']:>7,.0f} MB  cap {q['cap_mb']:>6,} MB  peak "
              f"{q['ps_peak_private_mb_max']:>6,} MB  {q['step_ms_median']} ms/step  "
              f"finished {q['finished']}")
    print(f"control (1 ps, {sizes[-1]:,} rows, same cap) killed by the cap: "
          f"{out['summary']['control_killed_by_cap']}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "memory_wall.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
