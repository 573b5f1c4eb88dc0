"""Training throughput of the CTR model: one process vs parameter-server clusters.

Measured in one run on the same transformed shards: (a) the same model and loop in one
process without a strategy (`components.ctr.ps_train` with no TF_CONFIG), (b) 1 ps + 1
worker and (c) 2 ps + 2 workers started by `components.ctr.cluster`, each with several
steps-per-remote-call settings. Examples/s counts only the training loop (the trainer
times it), not process start-up; ratios are to (a). Prints a table and writes
bench/results/ps_train.json.

    .venv/bin/python bench/ps_train.py                       # generates 3 x 30k rows first
    .venv/bin/python bench/ps_train.py --preprocess-dir /tmp/pre --epochs 1
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def _prepare(work: Path, rows_per_day: int) -> str:
    from components.ctr.generate import GenerateSpec, run as generate
    from components.ctr.preprocess import PreprocessSpec, run as preprocess
    generate(GenerateSpec(out_root=str(work), start="2026-11-01", days=3,
                          rows_per_day=rows_per_day))
    return preprocess(PreprocessSpec(raw_root=str(work / "raw" / "ctr"), span="2026-11-03",
                                     output_dir=str(work / "pre"), window_days=3))["output_dir"]


def _train_spec(pre: str, out: Path, epochs: int, spe: int) -> dict:
    return {"preprocess_dir": pre, "out_dir": str(out), "epochs": epochs,
            "steps_per_execution": spe, "export": False, "checkpoint_every_steps": 0,
            "validation_percent": 0}   # the training loop alone, no validation passes


def _single(pre: str, out: Path, epochs: int, spe: int) -> dict:
    spec = out.parent / f"{out.name}.json"
    spec.write_text(json.dumps(_train_spec(pre, out, epochs, spe)))
    res = out.parent / f"{out.name}.result.json"
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    subprocess.run([sys.executable, "-m", "components.ctr.ps_train", "--spec", f"@{spec}",
                    "--result-file", str(res)], check=True, cwd=ROOT, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(res.read_text())


def _cluster(pre: str, out: Path, epochs: int, spe: int, ps: int, workers: int) -> dict:
    from components.ctr.cluster import ClusterSpec, run
    return run(ClusterSpec(train=_train_spec(pre, out, epochs, spe), num_ps=ps,
                           num_workers=workers), sink=lambda line: None)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preprocess-dir", help="existing output of beam_jobs.preprocess_ctr "
                                            "(default: generate and preprocess 3 days)")
    p.add_argument("--rows-per-day", type=int, default=30_000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps-per-execution", type=int, nargs="+", default=[1, 10, 50])
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-ps-train-"))
    load_before = os.getloadavg()
    try:
        pre = args.preprocess_dir or _prepare(work, args.rows_per_day)
        rows = []
        base = _single(pre, work / "a", args.epochs, max(args.steps_per_execution))
        rows.append({"config": "(a) one process, no strategy", "ps": 0, "workers": 0,
                     "steps_per_execution": max(args.steps_per_execution),
                     "examples_per_s": base["examples_per_second"]})
        for ps, workers, label in ((1, 1, "(b) 1 ps + 1 worker"), (2, 2, "(c) 2 ps + 2 workers")):
            for spe in args.steps_per_execution:
                t0 = time.time()
                r = _cluster(pre, work / f"c{ps}{workers}-{spe}", args.epochs, spe, ps, workers)
                rows.append({"config": label, "ps": ps, "workers": workers,
                             "steps_per_execution": spe,
                             "examples_per_s": r["examples_per_second"],
                             "wall_s_incl_startup": round(time.time() - t0, 1)})
        for r in rows:
            r["ratio_to_a"] = round(r["examples_per_s"] / base["examples_per_second"], 3)
        out = {"benchmark": "ps_train", "epochs": args.epochs, "total_steps": base["total_steps"],
               "batch_size": 1024, "rows": rows,
               "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before,
                           "loadavg_after": os.getloadavg(),
                           "note": "2-core machine shared with other jobs; figures are noisy"},
               "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'config':<30} {'steps/RPC':>9} {'examples/s':>11} {'ratio to (a)':>13}")
    for r in out["rows"]:
        print(f"{r['config']:<30} {r['steps_per_execution']:>9} {r['examples_per_s']:>11,.0f} "
              f"{r['ratio_to_a']:>13.2f}")
    print(f"load average before/after: {load_before} / {out['machine']['loadavg_after']}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ps_train.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
