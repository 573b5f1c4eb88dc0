"""Fine-tuning in bfloat16 (mixed precision) against float32: training speed, and quality
judged by the evaluation step itself on the same held-out reviews.

The bundled reviews, `--days` days of `--rows-per-day` (default 3 x 2,500), preprocessed
with the demo's config; each precision fine-tunes in its own process through the step's
entry point (`python -m components.text.train`) with the demo run's settings (3 epochs,
batch 16, `--train-examples` training texts: the demo trains on 1,664; dev slices of 200
for early stopping and for the decision offsets), the same seed. Then the evaluation
step (`python -m components.text.evaluate`) scores the bfloat16-trained export as the
candidate against the float32-trained one as the baseline on every eval text after the dev
slices: per task macro-F1 of each and the paired bootstrap interval of the difference.
Both exports compute in float32 (`components.text.model.as_float32`).

    .venv/bin/python bench/finetune_precision.py

Prints the figures; writes bench/results/finetune_precision.json (about 15 min on 2 cores).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results"
DEMO_CONFIG = REPO / "components" / "text" / "configs" / "reviews-demo.yaml"


def step(module: str, spec: dict) -> dict:
    """Run a step's entry point in a fresh process as a task does (the launcher the DAG
    tasks use); its result and wall seconds."""
    from retrain.orchestration.launch import run_step
    started = time.perf_counter()
    result = run_step(module, spec)
    return {**result, "step_seconds": round(time.perf_counter() - started, 1)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--days", type=int, default=3)
    p.add_argument("--rows-per-day", type=int, default=2500)
    p.add_argument("--train-examples", type=int, default=1664)
    p.add_argument("--dev", type=int, default=200)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--work", help="keep the data and models here (default: a temp folder)")
    args = p.parse_args(argv)

    from components.text.load import LoadTextSpec, run as load_text
    from components.text.preprocess import TextPreprocessSpec, run as preprocess

    work = Path(args.work or tempfile.mkdtemp(prefix="finetune-precision-"))
    start = dt.date(2026, 11, 1)
    span = (start + dt.timedelta(days=args.days - 1)).isoformat()
    load_text(LoadTextSpec(out_root=str(work), start=start.isoformat(), days=args.days,
                           max_rows_per_day=args.rows_per_day))
    pre = preprocess(TextPreprocessSpec(raw_root=str(work / "raw" / "text"), span=span,
                                        output_dir=str(work / "pre"), window_days=args.days,
                                        text_config=str(DEMO_CONFIG)))
    trained = {}
    for precision in ("float32", "mixed_bfloat16"):
        trained[precision] = step("components.text.train", {
            "preprocess_dir": pre["output_dir"], "out_dir": str(work / precision / "model"),
            "epochs": args.epochs, "batch_size": 16, "max_train_examples": args.train_examples,
            "max_eval_examples": args.dev, "calibration_examples": args.dev,
            "precision": precision})
    evaluation = step("components.text.evaluate", {
        "preprocess_dir": pre["output_dir"],
        "candidate_model_dir": trained["mixed_bfloat16"]["model_dir"],
        "baseline_model_dir": trained["float32"]["model_dir"],
        "out_dir": str(work / "evaluation"), "eval_offset": 2 * args.dev,
        "max_train_examples": args.train_examples, "min_eval_positives": 0})
    report = json.loads((work / "evaluation" / "eval.json").read_text())
    tasks = list(report["labels"])
    out = {
        "setting": {**vars(args), "rows_train": pre["rows_train"], "rows_eval": pre["rows_eval"],
                    "config": str(DEMO_CONFIG.relative_to(REPO))},
        "training": {k: {f: v[f] for f in ("compute_dtype_policy", "examples_per_second",
                                          "epochs_run", "eval_loss_after", "seconds")}
                     for k, v in trained.items()},
        "scored_rows": report["rows"], "evaluate_seconds": evaluation["step_seconds"],
        "macro_f1": {t: {"float32": report["intervals"]["baseline"][t]["macro_f1"]["estimate"],
                         "mixed_bfloat16":
                             report["intervals"]["candidate"][t]["macro_f1"]["estimate"]}
                     for t in tasks},
        "macro_f1_delta_bf16_minus_f32": {
            t: {k: report["candidate"]["macro_f1_delta"]["baseline"][t][k]
                for k in ("estimate", "low", "high")} for t in tasks},
        "host": {"python": platform.python_version(), "cpus": os.cpu_count(),
                 "load_average": os.getloadavg()},
    }
    speed = {k: v["examples_per_second"] for k, v in out["training"].items()}
    print(f"training examples/s: float32 {speed['float32']}, bfloat16 {speed['mixed_bfloat16']}"
          f" ({speed['mixed_bfloat16'] / speed['float32']:.2f}x)")
    for t in tasks:
        d = out["macro_f1_delta_bf16_minus_f32"][t]
        print(f"{t}: macro-F1 float32 {out['macro_f1'][t]['float32']:.3f}, bfloat16 "
              f"{out['macro_f1'][t]['mixed_bfloat16']:.3f}, difference {d['estimate']:+.3f} "
              f"[{d['low']:+.3f}, {d['high']:+.3f}] on {out['scored_rows']} texts")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "finetune_precision.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
