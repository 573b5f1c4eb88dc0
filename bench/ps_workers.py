"""Does a second PS worker, reading its own shards on its own host and core, add throughput
and keep the model as good?

Why: with N workers each reads 1/N of the window's rows (components.ctr.train_input,
`workers=N`: consecutive ranges of the rows by the per-file counts the preprocessing job
writes), so the data-parallel side should scale while the model stays the same.

Measured in one run on the same transformed shards (3 generated days, preprocessed as the
DAG does) and the same budget in examples, with export on: (a) 1 ps + 1 worker, (b) 1 ps +
2 workers, and (c) as (b) on the same window preprocessed again into `--equal-shards`
files a split (the job's --num-shards, Beam's sink: no per-file counts, so every 2nd
file). (c) told unequal shares in (b) apart from the second worker itself when workers
took every N-th file of unequal files (69 % / 31 % of the rows); each worker's share of
the rows is recorded. Every role is on a network-namespace host of its own
(retrain.common.netns): the ps on one, worker i on "wk<i>", pinned to core i from its exec
on (`ip netns exec wk<i> taskset -c <i> python ...`: the bench wraps
components.ctr.cluster's command prefix, and checks every thread of each worker while it
runs). The ps and the chief (the root namespace, where this script runs) are not pinned:
they share both cores with the workers.

Examples/s count the trainer's own training loop (`loop_seconds`), not start-up or the
export; AUC and log loss are the trainer's export figures on the eval split (all of its
rows, the same for every run). Each config runs `--repeats` times, round robin with the
order rotating; medians, every run in the JSON. Also recorded: the CPU each role used per
second of wall time between the first and the last checkpoint before the end (what bound
the loop), each worker's share of the rows, the cores and the load average (other jobs
share this machine). Needs root. Prints a table and writes bench/results/ps_workers.json.

    sudo .venv/bin/python bench/ps_workers.py                # generates 3 x 200k rows first
    sudo .venv/bin/python bench/ps_workers.py --preprocess-dir /tmp/pre --repeats 5
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import gzip
import json
import os
import secrets
import shlex
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
HZ = os.sysconf("SC_CLK_TCK")


def _records(path: Path) -> int:
    """Records in a gzip TFRecord file (length-prefixed frames), without TensorFlow."""
    n = 0
    with gzip.open(path, "rb") as f:
        while header := f.read(12):
            (length,) = struct.unpack("<Q", header[:8])
            f.seek(length + 4, os.SEEK_CUR)
            n += 1
    return n


def _shares(pre: str, workers: int) -> list[dict]:
    """What each worker reads with validation_percent 0 (train + validation shards, name
    order), as train_input.make_dataset_fn cuts them: the rows by the job's per-file counts
    (`worker_plan`), or without them every `workers`-th file from the worker's index. The
    rows are counted here from the files, not taken from the job's counts."""
    from components.ctr.train_input import shard_rows, worker_plan
    names = sorted(str(p) for d in ("train", "validation") for p in Path(pre, d).glob("*.tfrecord.gz"))
    rows = {n: _records(Path(n)) for n in names}
    total = sum(rows.values())
    counts = shard_rows(names) if workers > 1 else None
    if counts is not None:
        assert counts == rows, "the job's per-file row counts are not the files' records"
        plan = worker_plan(names, counts, workers)
    else:
        plan = [[(n, 0, rows[n]) for n in names[w::workers]] for w in range(workers)]
    return [{"worker": w, "by": "rows" if counts is not None else "files",
             "reads": [[str(Path(n).relative_to(pre)), skip, take] for n, skip, take in mine],
             "rows": sum(take for _, _, take in mine),
             "share": round(sum(take for _, _, take in mine) / total, 3)}
            for w, mine in enumerate(plan)]


def _cpu_seconds(pid: int) -> float | None:
    try:   # /proc/<pid>/stat fields 14, 15 (utime, stime), after the ")" of the name
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / HZ
    except (OSError, IndexError, ValueError):
        return None


def _core_busy() -> dict[str, float]:
    """Busy seconds of every core so far (all processes, this bench's or not)."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *ticks = line.split()
        if name.startswith("cpu") and name != "cpu":
            t = [int(x) for x in ticks]
            out[name] = (sum(t[:8]) - t[3] - t[4]) / HZ   # minus idle and iowait
    return out


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def _pinned_at_exec(cores_by_netns: dict[str, int]):
    """Roles placed on these hosts start as `ip netns exec <host> taskset -c <core> ...`
    (taskset execs: same pid, so the launcher's teardown reaches them)."""
    from components.ctr import cluster
    original = cluster.exec_prefix

    def prefix(netns):
        core = cores_by_netns.get(netns)
        return original(netns) + ([] if core is None else ["taskset", "-c", str(core)])
    cluster.exec_prefix = prefix
    try:
        yield
    finally:
        cluster.exec_prefix = original


class _Watch(threading.Thread):
    """Checks that every thread of each worker is on its core (every 0.1 s until all were
    seen, then every 0.25 s; one found elsewhere is counted and pinned), and samples each
    role's CPU seconds and the cores' busy seconds whenever the trainer's progress file
    shows a new checkpointed step."""

    def __init__(self, status_file: Path, progress_file: Path, cores: dict[str, int]):
        super().__init__(daemon=True)
        self.status_file, self.progress_file, self.cores = status_file, progress_file, cores
        self.done = threading.Event()
        self.pinned = {name: {"core": core, "pids": [], "threads_seen": 0,
                              "threads_found_off_core": 0} for name, core in cores.items()}
        self.samples: list[dict] = []

    def _check_pinned(self, name: str, pid: int, core: int) -> None:
        record = self.pinned[name]
        if pid not in record["pids"]:
            record["pids"].append(pid)
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return
        record["threads_seen"] = max(record["threads_seen"], len(tids))
        for tid in tids:
            try:
                if os.sched_getaffinity(tid) != {core}:
                    os.sched_setaffinity(tid, {core})
                    record["threads_found_off_core"] += 1
            except OSError:
                pass    # the thread ended meanwhile

    def run(self) -> None:
        last_step = None
        while not self.done.is_set():
            pids = _read_json(self.status_file).get("pids", {})
            for name, core in self.cores.items():
                if name in pids:
                    self._check_pinned(name, pids[name], core)
            step = _read_json(self.progress_file).get("step")
            if step is not None and step != last_step:
                last_step = step
                self.samples.append({"t": time.time(), "step": step, "cores": _core_busy(),
                                     "cpu": {n: _cpu_seconds(p) for n, p in pids.items()}})
            self.done.wait(0.1 if not all(n in pids for n in self.cores) else 0.25)

    def steady(self, total_steps: int) -> dict:
        """CPU seconds per wall second of each role and each core, between the first and the
        last checkpoint before the end (start-up, restore and export left out)."""
        s = [x for x in self.samples if x["step"] < total_steps]
        if len(s) < 2:
            return {}
        a, b = s[0], s[-1]
        dt = b["t"] - a["t"]
        return {"from_step": a["step"], "to_step": b["step"], "seconds": round(dt, 1),
                "steps_per_s": round((b["step"] - a["step"]) / dt, 2),
                "cpu_per_wall_s": {n: round((b["cpu"][n] - a["cpu"][n]) / dt, 2)
                                   for n in b["cpu"] if a["cpu"].get(n) is not None
                                   and b["cpu"][n] is not None},
                "core_busy": {c: round((b["cores"][c] - a["cores"][c]) / dt, 2)
                              for c in b["cores"]}}


def _run_one(pre: str, work: Path, net, name: str, workers: int, cores: list[int],
             args) -> dict:
    from components.ctr.cluster import ClusterFailed, ClusterSpec, run
    out = work / name
    status_file = work / f"{name}.status.json"
    train = {"preprocess_dir": pre, "out_dir": str(out), "train_examples": args.train_examples,
             "steps_per_execution": args.steps_per_execution, "export": True,
             "checkpoint_every_steps": args.checkpoint_every, "validation_percent": 0}
    spec = ClusterSpec(train=train, num_ps=1, num_workers=workers, host=net.gateway,
                       status_file=str(status_file),
                       hosts={"ps": net.host("ps").placement(),
                              **{f"worker/{w}": net.host(f"wk{w}").placement()
                                 for w in range(workers)}},
                       ps_unreachable_timeout_s=30)
    watch = _Watch(status_file, Path(f"{out}_checkpoints") / "progress.json",
                   {f"worker/{w}": cores[w] for w in range(workers)})
    tail = collections.deque(maxlen=60)
    started = time.time()
    watch.start()
    try:
        with _pinned_at_exec({net.host(f"wk{w}").netns: cores[w] for w in range(workers)}):
            result = run(spec, sink=tail.append)
    except ClusterFailed:
        print("\n".join(tail), file=sys.stderr)
        raise
    finally:
        watch.done.set()
        watch.join()
    summary = _read_json(Path(result["model_dir"]).parent / "train_summary.json") \
        if result.get("model_dir") else {}
    row = {"steps": result["steps_run"], "loop_s": result["loop_seconds"],
           "examples_per_s": result["examples_per_second"],
           "steps_per_s": round(result["steps_run"] / max(result["loop_seconds"], 1e-9), 2),
           "val_auc": result["val_auc"], "val_log_loss": result["val_log_loss"],
           "eval_rows": (summary.get("val_sample") or {}).get("eval_rows"),
           "input_recoveries": (summary.get("input_recoveries") or {}).get("count"),
           "worker_restarts": result["cluster"]["worker_restarts"],
           "wall_s_incl_startup_and_export": round(time.time() - started, 1),
           "pinning": watch.pinned, "steady": watch.steady(result["total_steps"])}
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(f"{out}_checkpoints", ignore_errors=True)
    return row


def _spread(values: list[float]) -> dict:
    return {"mean": round(statistics.mean(values), 5), "median": round(statistics.median(values), 5),
            "stdev": round(statistics.stdev(values), 5) if len(values) > 1 else None,
            "min": min(values), "max": max(values)}


def _equal_shards(work: Path, n: int) -> str:
    """The same generated window preprocessed again into exactly n files per split (the
    job's --num-shards: Beam's per-record sink), so 2 workers get equal shares."""
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    return preprocess(PreprocessSpec(
        raw_root=str(work / "raw" / "ctr"), span="2026-11-03", output_dir=str(work / "pre_eq"),
        window_days=3, beam_args=["--runner=DirectRunner", f"--num-shards={n}"]))["output_dir"]


def _auc_difference(base: dict, other: dict) -> dict:
    se = (base["val_auc"]["stdev"] ** 2 / len(base["runs"]) +
          other["val_auc"]["stdev"] ** 2 / len(other["runs"])) ** 0.5
    diff = round(other["val_auc"]["mean"] - base["val_auc"]["mean"], 5)
    return {"of": other["config"], "against": base["config"], "mean_difference": diff,
            "standard_error": round(se, 5), "within_noise": abs(diff) <= 2 * se}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preprocess-dir", help="existing output of beam_jobs.preprocess_ctr "
                                            "(default: generate and preprocess 3 days)")
    p.add_argument("--rows-per-day", type=int, default=200_000)
    p.add_argument("--train-examples", type=int, default=2000 * 1024,
                   help="budget of every run, in examples (batch 1,024)")
    p.add_argument("--steps-per-execution", type=int, default=10)
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps")
    p.add_argument("--repeats", type=int, default=4, help="runs per config (median)")
    p.add_argument("--equal-shards", type=int, default=4,
                   help="(c): 2 workers on the window preprocessed into this many files per "
                        "split (equal shares); 0, or with --preprocess-dir: left out")
    p.add_argument("--out", default=str(RESULTS / "ps_workers.json"), help="results JSON")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("bench/ps_workers.py needs root (network namespaces)")
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        sys.exit(f"needs 2 cores to pin 2 workers, has {cores}")
    from ps_train import _prepare   # bench/ps_train.py: the same data preparation
    from retrain.common.netns import Network, free_subnet

    work = Path(tempfile.mkdtemp(prefix="bench-ps-workers-"))
    net = Network(f"pw{secrets.token_hex(2)}", free_subnet(), ("ps", "wk0", "wk1"))
    load_before = os.getloadavg()
    try:
        pre = args.preprocess_dir or _prepare(work, args.rows_per_day)
        configs = [("(a) 1 ps + 1 worker", 1, pre), ("(b) 1 ps + 2 workers", 2, pre)]
        if args.equal_shards and not args.preprocess_dir:
            configs.append((f"(c) as (b), window in {args.equal_shards} files a split", 2,
                            _equal_shards(work, args.equal_shards)))
        net.up()
        runs: dict[str, list[dict]] = {label: [] for label, _, _ in configs}
        for i in range(args.repeats):   # round robin, order rotating: drift hits all alike
            for k in range(len(configs)):
                label, workers, data = configs[(i + k) % len(configs)]
                load = os.getloadavg()[0]
                r = _run_one(data, work, net, f"{label[1]}{i}", workers, cores, args)
                runs[label].append({**r, "loadavg_1min_at_start": round(load, 2)})
                print(f"round {i}, {label}: {r['examples_per_s']:,.0f} examples/s, "
                      f"AUC {r['val_auc']}, log loss {r['val_log_loss']}", flush=True)
        rows = [{"config": label, "workers": workers,
                 "pinned": {f"worker/{w}": f"core {cores[w]}" for w in range(workers)},
                 "examples_per_s": statistics.median(r["examples_per_s"] for r in runs[label]),
                 "loop_s": statistics.median(r["loop_s"] for r in runs[label]),
                 "val_auc": _spread([r["val_auc"] for r in runs[label]]),
                 "val_log_loss": _spread([r["val_log_loss"] for r in runs[label]]),
                 "shares": _shares(data, workers), "runs": runs[label]}
                for label, workers, data in configs]
        load_after = os.getloadavg()
    finally:
        net.down()
        shutil.rmtree(work, ignore_errors=True)

    one = rows[0]
    for r in rows:
        r["ratio_to_a"] = round(r["examples_per_s"] / one["examples_per_s"], 3)
    loads = (load_before, load_after)
    out = {"benchmark": "ps_workers",
           "command": shlex.join(["sudo", ".venv/bin/python", "bench/ps_workers.py",
                                  *(sys.argv[1:] if argv is None else argv)]),
           "batch_size": 1024, "train_examples": args.train_examples,
           "steps_per_execution": args.steps_per_execution,
           "checkpoint_every_steps": args.checkpoint_every, "repeats": args.repeats,
           "validation_percent": 0, "rows_per_day": None if args.preprocess_dir
           else args.rows_per_day,
           "placement": "ps on its own namespace host, unpinned; worker i on host wk<i>, "
                        f"pinned to core {cores[0]} / {cores[1]}; the chief in the root "
                        "namespace, unpinned (ps and chief share every core with the workers)",
           "rows": rows,
           "ratio_2_over_1_examples_per_s": rows[1]["ratio_to_a"],
           "auc_differences": [_auc_difference(one, r) for r in rows[1:]],
           "auc_noise_rule": "within noise: |difference of the mean AUCs| <= 2 standard errors "
                             "of it (from each config's run-to-run stdev)",
           "machine": {"cpus": os.cpu_count(), "loadavg_before": loads[0],
                       "loadavg_after": loads[1],
                       "note": "2-core machine shared with other jobs" +
                       ("; load was high (1-min load average above 2), so examples/s are noisy"
                        if max(x["loadavg_1min_at_start"] for r in rows for x in r["runs"]) > 2
                        else "")},
           "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                    capture_output=True, text=True).stdout.strip(),
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"\n{'config':<38} {'examples/s':>10} {'ratio':>6} {'every run':>30} {'AUC':>7} "
          f"{'stdev':>7} {'log loss':>8}")
    for r in rows:
        each = " ".join(f"{x['examples_per_s']:,.0f}" for x in r["runs"])
        print(f"{r['config']:<38} {r['examples_per_s']:>10,.0f} {r['ratio_to_a']:>6.2f} "
              f"{each:>30} {r['val_auc']['mean']:>7.4f} {r['val_auc']['stdev']:>7.4f} "
              f"{r['val_log_loss']['mean']:>8.4f}")
    for d in out["auc_differences"]:
        print(f"AUC {d['of'][:3]} - {d['against'][:3]}: {d['mean_difference']:+.4f} (standard "
              f"error {d['standard_error']:.4f}: {'within' if d['within_noise'] else 'outside'} "
              "noise)")
    print(f"load average before/after: {loads[0]} / {loads[1]} on {os.cpu_count()} cores")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
