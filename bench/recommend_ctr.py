"""Recommendation scoring throughput: the Beam job with 1 and 2 workers against a plain loop.

Generates a small world, trains a CTR model on it in this process (the trainer without a
cluster), builds the job's inputs once (users sharded by their stable hash, the pool),
then scores every user against every pool item three ways, each in a fresh process,
alternated `--repeats` times:

- loop: `PairScorer` over the shards one after another, no Beam, TensorFlow's default
  threads (every core);
- beam-1: `python -m beam_jobs.recommend_ctr`, one DirectRunner worker process with one
  TensorFlow thread;
- beam-2: the same job with two worker processes of one thread each.

beam-2 against beam-1 is what one more worker adds (here: one more core; on Flink,
Spark or Dataflow: one more machine); beam-2 against loop is the job's overhead on the
same cores. Each figure is user x item pairs scored per second of the whole command
(interpreter start and model loading included, as a user pays them), best of the
repeats; the three outputs must hold the same top-K lists (checked).

    .venv/bin/python bench/recommend_ctr.py --users 4000 --items 1500 --repeats 2

Prints the figures; writes bench/results/recommend_ctr.json.

With `--memory-items 2500,25000` it measures instead whether a worker's memory stays flat
as the pool grows: for each pool size the job runs once with 1 and once with 2 worker
processes, and every worker's peak RSS (VmHWM, read from /proc every 0.2 s from this
process) is recorded with the pairs scored per second; the pool is the window's items,
repeated under fresh item ids up to each size (same columns, so each pair costs what a
real item's does; the generator's Zipf clicks would need millions of rows to show 25,000
distinct items). Writes bench/results/recommend_memory.json.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
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


def train(work: Path, args) -> str:
    from components.ctr.generate import GenerateSpec, run as generate
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    from components.ctr.ps_train import PsTrainSpec, run as fit

    generate(GenerateSpec(out_root=str(work), start="2026-11-01", days=3,
                          rows_per_day=args.rows_per_day, n_users=args.users,
                          n_items=args.items, n_categories=30))
    pre = preprocess(PreprocessSpec(raw_root=str(work / "raw/ctr"), span="2026-11-03",
                                    output_dir=str(work / "pre"), window_days=3,
                                    eval_percent=10))
    fit(PsTrainSpec(preprocess_dir=pre["output_dir"], out_dir=str(work / "model")))
    return glob.glob(str(work / "model/**/saved_model.pb"), recursive=True)[0].rsplit("/", 1)[0]


def loop(inputs: Path, model_dir: str, layout, k: int, out: Path) -> None:
    """The plain loop (run by `--as-loop` in its own process); writes its rows as JSON."""
    import pyarrow.parquet as pq

    from components.ctr.recommend_layout import ITEMS_FILE, USERS_DIR
    from components.ctr.recommend_scoring import PairScorer

    scorer = PairScorer(model_dir, pq.read_table(inputs / ITEMS_FILE), layout, k)
    rows = [r for path in sorted((inputs / USERS_DIR).glob("part-*.parquet"))
            for r in scorer.top_k(pq.read_table(path))]
    out.write_text(json.dumps({"pairs": scorer.pairs_scored, "rows": rows}))


def timed(cmd: list[str]) -> float:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def beam_cmd(inputs: Path, model_dir: str, layout, k: int, workers: int, out: Path) -> list:
    import dataclasses

    return [sys.executable, "-m", "beam_jobs.recommend_ctr", "--inputs-dir", str(inputs),
            "--model-dir", model_dir, "--output-dir", str(out), "--k", str(k),
            "--tf-threads", "1", "--layout", json.dumps(dataclasses.asdict(layout)),
            "--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]


def widen(pool, n: int, item_column: str):
    """The pool's first n rows, its rows repeated under fresh ids past its end (see the
    module doc): a pool of any size from a small world."""
    import pyarrow as pa

    reps = -(-n // pool.num_rows)
    table = pa.concat_tables([pool] * reps).slice(0, n)
    ids = [str(v) for v in pool.column(item_column).to_pylist()]
    fresh = ids + [f"i{10_000_000 + j}" for j in range(n - len(ids))]
    at = table.column_names.index(item_column)
    return table.set_column(at, item_column, pa.array(fresh[:n], table.schema.field(at).type))


class WorkerPeaks:
    """Peak RSS of each Beam worker process (children running sdk_worker_main) of a
    running job, from a thread of this process: VmHWM never falls, so its last reading
    before the worker ends is the worker's peak (the private part, RssAnon, is sampled)."""

    def __init__(self, pid: int, every: float = 0.2):
        import threading

        import psutil

        self._root, self._every = psutil.Process(pid), every
        self.hwm_kb: dict[int, int] = {}
        self.anon_kb: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _workers(self) -> list[int]:
        import psutil

        pids = []
        try:
            for child in self._root.children(recursive=True):
                try:   # the python process itself, not the shell that starts it
                    if "apache_beam.runners.worker.sdk_worker_main" in child.cmdline():
                        pids.append(child.pid)
                except psutil.Error:
                    pass
        except psutil.Error:      # the job has ended
            pass
        return pids

    def _run(self) -> None:
        from components.ctr.cluster import _rss_kb

        while not self._stop.wait(self._every):
            for pid in self._workers():
                anon, hwm = _rss_kb(pid)
                self.hwm_kb[pid] = max(self.hwm_kb.get(pid, 0), hwm)
                self.anon_kb[pid] = max(self.anon_kb.get(pid, 0), anon)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return {"peak_rss_mb": _mb(self.hwm_kb), "peak_private_mb": _mb(self.anon_kb)}


def _mb(kb_by_pid: dict) -> list[float]:
    return sorted(round(v / 1024, 1) for v in kb_by_pid.values())


def read_rows(name: str, out: Path) -> list:
    import pyarrow.parquet as pq

    if name == "loop":
        return json.loads((out / "loop.json").read_text())["rows"]
    return pq.read_table(sorted(str(p) for p in out.glob("part-*.parquet"))).to_pylist()


def top_lists(rows: list) -> dict:
    return {(r["user"], r["rank"]): r["item"] for r in rows}


def as_loop(work: Path, model_dir: str, k: int) -> None:
    from components.ctr.recommend_scoring import PairLayout

    layout = PairLayout.from_dict(json.loads((work / "layout.json").read_text()))
    loop(work / "inputs", model_dir, layout, k, work / "out-loop" / "loop.json")


def write_inputs(inputs: Path, users_dir: Path, pool) -> None:
    """The job's inputs: the profiles job's user shards and this pool."""
    import pyarrow.parquet as pq

    from components.ctr.recommend_layout import ITEMS_FILE, USERS_DIR

    inputs.mkdir(parents=True)
    shutil.copytree(users_dir, inputs / USERS_DIR)
    pq.write_table(pool, inputs / ITEMS_FILE)


def memory(work: Path, model_dir: str, layout, users, users_dir: Path, pool,
           args) -> list[dict]:
    """Each pool size x 1 and 2 workers: the job in a fresh process, its workers' peaks."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    points = []
    for n in (int(x) for x in args.memory_items.split(",")):
        inputs = work / f"inputs-{n}"
        write_inputs(inputs, users_dir, widen(pool, n, layout.item_column))
        for workers in (1, 2):
            out = work / f"out-mem-{n}-{workers}"
            t0 = time.perf_counter()
            job = subprocess.Popen(beam_cmd(inputs, model_dir, layout, args.k, workers, out),
                                   env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
            watch = WorkerPeaks(job.pid)
            stdout, _ = job.communicate()
            seconds = time.perf_counter() - t0
            peaks = watch.stop()
            pairs = users.num_rows * n
            summary = json.loads(stdout) if job.returncode == 0 else {}
            if summary.get("pairs_scored") != pairs or not peaks["peak_rss_mb"]:
                raise SystemExit(f"at {n} items, {workers} workers: exit {job.returncode}, "
                                 f"{summary.get('pairs_scored')} of {pairs} pairs scored, "
                                 f"{len(peaks['peak_rss_mb'])} workers seen")
            points.append({"items": n, "workers": workers, "pairs": pairs,
                           "seconds": round(seconds, 2),
                           "pairs_per_s": round(pairs / seconds),
                           "job_seconds": summary["beam_seconds"],
                           "job_pairs_per_s": round(pairs / summary["beam_seconds"]),
                           **peaks})
            print(f"{n:>7,} items  {workers} workers  {pairs:>12,} pairs  "
                  f"{pairs / seconds:>9,.0f} pairs/s  peak RSS per worker "
                  f"{peaks['peak_rss_mb']} MB", flush=True)
            shutil.rmtree(out, ignore_errors=True)
    return points


def memory_report(points: list[dict]) -> dict:
    """Peak per worker at the largest pool over the smallest, per worker count."""
    ratios = {}
    for workers in (1, 2):
        at = {p["items"]: max(p["peak_rss_mb"]) for p in points if p["workers"] == workers}
        ratios[str(workers)] = round(at[max(at)] / at[min(at)], 3)
    print(f"\n{'items':>7} {'workers':>7} {'pairs':>12} {'pairs/s':>9}  peak RSS per worker (MB)")
    for p in points:
        print(f"{p['items']:>7,} {p['workers']:>7} {p['pairs']:>12,} {p['pairs_per_s']:>9,}  "
              f"{', '.join(f'{v:,.0f}' for v in p['peak_rss_mb'])}")
    print("peak per worker, largest pool / smallest: "
          + ", ".join(f"{w} worker(s) {r}x" for w, r in ratios.items()) + " (flat: <= 1.2x)")
    return ratios


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=4000)
    p.add_argument("--items", type=int, default=1500)
    p.add_argument("--rows-per-day", type=int, default=20000)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--memory-items", default=None,
                   help="pool sizes, e.g. 2500,25000: measure each worker's peak memory "
                        "at each instead of the throughput comparison")
    args = p.parse_args(argv)

    import pyarrow.parquet as pq

    from beam_jobs import recommend_profiles
    from components.ctr import feature_config
    from components.ctr import recommend_inputs as I
    from components.ctr.recommend_layout import USERS_DIR
    from components.ctr.recommend_scoring import PairLayout

    work = Path(tempfile.mkdtemp(prefix="bench-recommend-"))
    try:
        started = time.perf_counter()
        model_dir = train(work, args)
        train_s = time.perf_counter() - started
        cfg = feature_config.for_model_dir(model_dir)
        layout = PairLayout("user_id", "item_id", ("category_id", "price", "item_age_days"),
                            {"position": 1})
        inputs_cols = [c for c in cfg.raw_columns() if c not in (cfg.label, cfg.example_id)]
        profiles = work / "profiles"
        recommend_profiles.run([
            "--raw-root", str(work / "raw/ctr"),
            "--days", json.dumps(["2026-11-01", "2026-11-02", "2026-11-03"]),
            "--model-dir", model_dir, "--output-dir", str(profiles),
            "--user-column", "user_id", "--item-column", "item_id",
            "--user-side", json.dumps([c for c in layout.user_columns(inputs_cols)
                                       if c != "user_id"]),
            "--item-side", json.dumps(list(layout.item_columns)),
            "--num-shards", str(args.shards)])
        users_dir = profiles / USERS_DIR
        users = pq.read_table(users_dir)
        pool = I.pool(pq.read_table(profiles / recommend_profiles.WINDOW_ITEMS), "item_id",
                      "window", 0)
        machine = {"cpus": os.cpu_count(), "python": platform.python_version()}
        if args.memory_items:
            points = memory(work, model_dir, layout, users, users_dir, pool, args)
            result = {"command": "bench/recommend_ctr.py " + " ".join(argv or sys.argv[1:]),
                      "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      "users": users.num_rows, "window_pool_items": pool.num_rows,
                      "k": args.k, "shards": args.shards,
                      "train_s": round(train_s, 1), "machine": machine, "points": points,
                      "peak_ratio_largest_to_smallest_pool": memory_report(points)}
            RESULTS.mkdir(parents=True, exist_ok=True)
            (RESULTS / "recommend_memory.json").write_text(json.dumps(result, indent=2) + "\n")
            return result
        inputs = work / "inputs"
        write_inputs(inputs, users_dir, pool)

        (work / "layout.json").write_text(json.dumps(dataclasses.asdict(layout)))
        outs = {name: work / f"out-{name}" for name in ("loop", "beam-1", "beam-2")}
        runs = {"loop": [sys.executable, __file__, "--as-loop", str(work), model_dir,
                         str(args.k)],
                "beam-1": beam_cmd(inputs, model_dir, layout, args.k, 1, outs["beam-1"]),
                "beam-2": beam_cmd(inputs, model_dir, layout, args.k, 2, outs["beam-2"])}
        pairs = users.num_rows * pool.num_rows
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        lists = {}
        for _ in range(args.repeats):
            for name, cmd in runs.items():
                shutil.rmtree(outs[name], ignore_errors=True)
                outs[name].mkdir()
                seconds[name].append(timed(cmd))
                lists[name] = top_lists(read_rows(name, outs[name]))
                print(f"{name}: {pairs} pairs in {seconds[name][-1]:.1f} s", flush=True)
        same = lists["loop"] == lists["beam-1"] == lists["beam-2"]
        if not same:
            raise SystemExit("the three ways disagree on the top-K lists")
        figures = {name: {"best_s": round(min(s), 2), "seconds": [round(x, 2) for x in s],
                          "pairs_per_s": round(pairs / min(s))} for name, s in seconds.items()}
        result = {
            "command": "bench/recommend_ctr.py " + " ".join(argv or sys.argv[1:]),
            "users": users.num_rows, "pool_items": pool.num_rows, "pairs": pairs,
            "k": args.k, "shards": args.shards, "train_s": round(train_s, 1),
            "runs": figures, "same_lists": same,
            "beam_2_vs_1": round(figures["beam-1"]["best_s"] / figures["beam-2"]["best_s"], 2),
            "beam_2_vs_loop": round(figures["loop"]["best_s"] / figures["beam-2"]["best_s"], 2),
            "machine": machine}
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "recommend_ctr.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--as-loop"]:
        as_loop(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    else:
        main()
