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


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=4000)
    p.add_argument("--items", type=int, default=1500)
    p.add_argument("--rows-per-day", type=int, default=20000)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)

    import pyarrow.parquet as pq

    from components.ctr.recommend_layout import ITEMS_FILE, USERS_DIR
    from components.ctr import feature_config
    from components.ctr import recommend_inputs as I
    from components.ctr.recommend_scoring import PairLayout

    work = Path(tempfile.mkdtemp(prefix="bench-recommend-"))
    try:
        started = time.perf_counter()
        model_dir = train(work, args)
        train_s = time.perf_counter() - started
        cfg = feature_config.for_model_dir(model_dir)
        layout = PairLayout("user_id", "item_id", ("category_id", "price", "item_age_days"),
                            {"position": 1})
        rows, _ = I.read_window(str(work / "raw/ctr"), "2026-11-03", 3, cfg)
        inputs_cols = [c for c in cfg.raw_columns() if c not in (cfg.label, cfg.example_id)]
        users = I.users(rows, "user_id", [c for c in layout.user_columns(inputs_cols)
                                          if c != "user_id"])
        pool = I.items(rows, cfg.label, "item_id", list(layout.item_columns), "window", 0)
        inputs = work / "inputs"
        (inputs / USERS_DIR).mkdir(parents=True)
        for i, shard in enumerate(I.shards(users, "user_id", args.shards)):
            pq.write_table(shard, inputs / USERS_DIR / f"part-{i:05d}.parquet")
        pq.write_table(pool, inputs / ITEMS_FILE)

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
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}}
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
