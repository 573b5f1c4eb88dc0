"""`retrain plan --check`: runs the preprocessing, training and evaluation steps here at two
sizes and compares them with the plan's prediction, so the model is tested against real
runs.

The steps run as subprocesses that die with this one.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from retrain.common.processes import die_with_parent
from retrain.plan.figures import load_figures
from retrain.plan.fmt import _n
from retrain.plan.model import _steps
from retrain.plan.spec import BENCH_DIR, CHECK_TOLERANCE, REPO, Machine, PlanSpec


def _timed(cmd: list[str], log: Path, timeout: float) -> tuple[float, float]:
    """(wall s, CPU s of the process and its children) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                              timeout=timeout, preexec_fn=die_with_parent(),
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"{cmd[2]} exited {proc.returncode}; its log: {log} (kept)")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


# Judged by --check: every step. Training's figures come from bench/train_sweep.py, which
# runs the very command below at other sizes; evaluation's from bench/evaluate_ctr.py.
JUDGED = ("preprocess", "train", "evaluate")
START = dt.date(2026, 1, 1)


def prepare(work: Path, rows: int, window_days: int) -> Path:
    """Generated logs of `window_days` days of `rows` rows each under work/rows<N>."""
    d = work / f"rows{rows}"
    subprocess.run([sys.executable, "-m", "retrain.cli", "generate", "--out-root", str(d),
                    "--start", START.isoformat(), "--days", str(window_days),
                    "--rows-per-day", str(rows)], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600,
                   preexec_fn=die_with_parent())
    return d


def eval_model(work: Path, d: Path) -> str:
    """A model to evaluate with (trained once, in one process, on `d`'s preprocessed window;
    not timed): the evaluation step scores it as candidate and as published model."""
    out = work / "eval_model"
    if not (out / "serving_model").exists():
        spec = {"preprocess_dir": str(d / "pre"), "out_dir": str(out), "epochs": 1,
                "checkpoint_every_steps": 0, "validation_percent": 0}
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        subprocess.run([sys.executable, "-m", "components.ctr.ps_train", "--spec",
                        json.dumps(spec)], check=True, cwd=REPO, env=env, timeout=900,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       preexec_fn=die_with_parent())
    return str(out / "serving_model")


def commands(d: Path, window_days: int, model: str) -> dict[str, list[str]]:
    """The Beam preprocessing job, then a 1 ps + 1 worker training run (1 epoch, no
    validation slice, no export, no checkpoints) on its output, then the evaluation step
    (its Beam job over the window's held-out rows, two models), as `retrain plan` models
    them; `train_result.json` holds the trainer's own timings."""
    py = sys.executable
    span = (START + dt.timedelta(days=window_days - 1)).isoformat()
    days = [str(d / "raw" / "ctr" / f"dt={START + dt.timedelta(days=i)}")
            for i in reversed(range(window_days))]
    evaluate = {"span_dir": days[0], "window_span_dirs": days, "candidate_model_dir": model,
                "baseline_model_dir": model, "out_dir": str(d / "evaluation"),
                "min_auc": 0.0}
    train = {"preprocess_dir": str(d / "pre"), "out_dir": str(d / "model"),
             "epochs": 1, "export": False, "checkpoint_every_steps": 0,
             "validation_percent": 0}
    return {
        "preprocess": [py, "-m", "beam_jobs.preprocess_ctr", "--raw-root",
                       str(d / "raw" / "ctr"), "--span", span, "--window-days",
                       str(window_days), "--output-dir", str(d / "pre"),
                       "--analysis-cache-dir", str(d / "cache")],
        "train": [py, "-m", "components.ctr.cluster", "--spec",
                  json.dumps({"train": train, "num_ps": 1, "num_workers": 1}),
                  "--result-file", str(d / "train_result.json")],
        "evaluate": [py, "-m", "components.ctr.evaluate", "--spec", json.dumps(evaluate),
                     "--result-file", str(d / "evaluate_result.json")]}


def run_step(d: Path, name: str, cmd: list[str]) -> tuple[float, float]:
    """One fresh run of a step (its earlier outputs removed): (wall s, CPU s)."""
    olds = {"preprocess": (d / "pre", d / "cache"), "evaluate": (d / "evaluation",)}
    for old in olds.get(name, (d / "model", d / "model_checkpoints")):
        shutil.rmtree(old, ignore_errors=True)
    return _timed(cmd, d / f"{name}.log", 900)


def check(sizes: tuple[int, ...] = (100_000, 400_000), window_days: int = 3,
          repeats: int = 2, bench: Path = BENCH_DIR, keep: Path | None = None,
          say=lambda line: print(line, flush=True)) -> dict:
    """Run the Beam preprocessing job, a 1 ps + 1 worker training run and the evaluation
    step at two sizes here, `repeats` times each (interleaved), predict each from the
    plan's model with this machine's cores, and compare with the fastest run: other jobs
    on a shared machine only ever add time."""
    from components.ctr import plan_facts
    work = keep or Path(tempfile.mkdtemp(prefix="retrain-plan-check-"))
    work.mkdir(parents=True, exist_ok=True)
    cfg = plan_facts.default_feature_config()
    started, load_before = time.time(), os.getloadavg()
    points, cmds, fig, model = {}, {}, None, None
    ok = False
    try:
        for rows in sizes:
            d = prepare(work, rows, window_days)
            fig = load_figures(window_days, "lazy_adam", rows * window_days, bench)
            local = Machine(cores=int(fig.cores.value), memory_gb=24)
            spec = PlanSpec(rows_per_day=rows, window_days=window_days, epochs=1,
                            validation_percent=0, export=False, machines={"": local})
            steps, data = _steps(spec, fig, cfg, cfg)
            if model is None:      # the smallest window, preprocessed once to train it
                _timed(commands(d, window_days, "")["preprocess"], d / "model_pre.log", 900)
                model = eval_model(work, d)
            cmds[rows] = commands(d, window_days, model)
            points[rows] = {"rows_per_day": rows, "window_rows": data["window_rows"],
                            "train_examples": data["train_examples"],
                            "steps": {name: {"predicted_s": round(steps[name].seconds(1), 1),
                                             "judged": name in JUDGED, "runs_s": [],
                                             "cpu_s": []}
                                      for name in ("preprocess", "train", "evaluate")},
                            "figures": {k: dataclasses.asdict(v) for k, v in fig.all().items()
                                        if k.startswith(("preprocess", "train", "evaluate"))}}
        for rep in range(repeats):
            for rows in sizes:
                d = work / f"rows{rows}"
                for name, cmd in cmds[rows].items():
                    wall, cpu = run_step(d, name, cmd)
                    step = points[rows]["steps"][name]
                    step["runs_s"].append(round(wall, 1))
                    step["cpu_s"].append(round(cpu, 1))
                    if name == "train":
                        r = json.loads((d / "train_result.json").read_text())
                        step.setdefault("trainer_loop_examples_per_s", []).append(
                            r.get("examples_per_second"))
                    say(f"  run {rep + 1}/{repeats} {_n(points[rows]['window_rows']):>10} rows "
                        f"{name:<10} {wall:6.1f} s")
        ok = True
    finally:
        if keep is None and ok:
            shutil.rmtree(work, ignore_errors=True)
        elif not ok:
            say(f"the check's files are kept in {work}")
    errors = []
    for pt in points.values():
        for name, step in pt["steps"].items():
            step.update(_compare(step["predicted_s"], min(step["runs_s"])))
            if step["judged"]:
                errors.append(abs(step["error_percent"]))
            say(f"  {_n(pt['window_rows']):>10} rows  {name:<10} predicted "
                f"{step['predicted_s']:6.1f} s  measured {step['measured_s']:6.1f} s (fastest "
                f"of {step['runs_s']})  error {step['error_percent']:+6.1f} %"
                f"{'' if step['judged'] else '  (shown, not judged)'}")
    return {
        "command": "retrain plan " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["plan"]
                                              else sys.argv[1:]),
        "what": "the Beam preprocessing job (fresh analysis cache), a 1 ps + 1 worker "
                "training run (1 epoch, no validation slice, no export, no checkpoints) and "
                "the evaluation step (its Beam job, one model as candidate and baseline) at "
                "two sizes, each run `repeats` times, interleaved; measured = the fastest run; "
                "predicted by the plan's model with one Beam worker of the benchmark "
                "machine's cores and one training worker",
        "judged": list(JUDGED),
        "window_days": window_days, "repeats": repeats, "sizes": list(points.values()),
        "tolerance_percent": CHECK_TOLERANCE * 100,
        "passed": bool(errors) and max(errors) <= CHECK_TOLERANCE * 100,
        "max_abs_judged_error_percent": round(max(errors), 1) if errors else None,
        "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before,
                    "loadavg_after": os.getloadavg()},
        "seconds": round(time.time() - started),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _compare(predicted: float, measured: float) -> dict:
    return {"predicted_s": round(predicted, 1), "measured_s": round(measured, 1),
            "error_percent": round((predicted - measured) / measured * 100, 1)}
