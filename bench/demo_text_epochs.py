"""The demo's text run against its epoch budget: how long each step of the text DAG takes
on the demo's data, and whether the gate blesses the first model, at 1, 2 and 3 epochs.

The data is what `retrain demo` writes (the bundled reviews, `--days` days of
`--rows-per-day`, ending yesterday); each step runs in its own process through its entry
point, as a task does, with the specs the text DAG's form as opened builds (the demo's
config, eval_percent 20, dev slices of 200 shrunk as the DAG shrinks them, batch 16,
precision auto, no published model), only `epochs` differing. The run's time is the sum of
its steps (validate, preprocess, fine-tune, evaluate); the push is seconds.

    .venv/bin/python bench/demo_text_epochs.py [--epochs 1 2 3]

Prints the figures; writes bench/results/demo_text_epochs.json (about 15 min on 2 cores).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results"
# The step runner and the demo config of the precision bench (same folder), not a copy.
from finetune_precision import DEMO_CONFIG, step  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--days", type=int, default=3)
    p.add_argument("--rows-per-day", type=int, default=None,
                   help="default: what `retrain demo` writes (demo.TEXT_ROWS_PER_DAY)")
    p.add_argument("--epochs", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--work", help="keep the data and models here (default: a temp folder)")
    args = p.parse_args(argv)

    from components.text import stages
    from components.text.load import LoadTextSpec, run as load_text
    from retrain.orchestration import demo

    rows_per_day = args.rows_per_day or demo.TEXT_ROWS_PER_DAY
    work = Path(args.work or tempfile.mkdtemp(prefix="demo-text-epochs-"))
    today = dt.datetime.now(dt.timezone.utc).date()
    start = today - dt.timedelta(days=args.days)
    span = (today - dt.timedelta(days=1)).isoformat()
    load_text(LoadTextSpec(out_root=str(work), start=start.isoformat(), days=args.days,
                           max_rows_per_day=rows_per_day))
    raw = work / "raw" / "text"
    validated = step("components.text.validate", {
        "span_dir": str(raw / f"dt={span}"), "out_dir": str(work / "validation"),
        "text_config": str(DEMO_CONFIG), "run_id": "bench"})
    pre = step("components.text.preprocess", {
        "raw_root": str(raw), "span": span, "output_dir": str(work / "preprocess"),
        "text_config": str(DEMO_CONFIG), "window_days": args.days, "eval_percent": 20})
    params = {"dev_examples": 200}
    dev = stages.dev_examples(params, {"preprocess": pre})
    runs = []
    for epochs in args.epochs:
        out = work / f"epochs-{epochs}"
        trained = step("components.text.train", {
            "preprocess_dir": pre["output_dir"], "out_dir": str(out / "model"),
            "epochs": epochs, "batch_size": 16, "max_eval_examples": dev,
            "calibration_examples": dev})
        judged = step("components.text.evaluate", {
            "preprocess_dir": pre["output_dir"], "candidate_model_dir": trained["model_dir"],
            "out_dir": str(out / "evaluation"), "eval_offset": 2 * dev})
        report = json.loads((out / "evaluation" / "eval.json").read_text())
        tasks = list(report["labels"])
        seconds = {"validate": validated["step_seconds"], "preprocess": pre["step_seconds"],
                   "finetune": trained["step_seconds"], "evaluate": judged["step_seconds"]}
        runs.append({
            "epochs": epochs, "epochs_run": trained["epochs_run"],
            "examples_per_second": trained["examples_per_second"],
            "compute_dtype_policy": trained["compute_dtype_policy"],
            "step_seconds": seconds, "run_seconds": round(sum(seconds.values()), 1),
            "blessed": judged["blessed"], "reasons": judged["reasons"],
            "scored_rows": report["rows"],
            "macro_f1": {t: report["candidate"]["tasks"][t].get("macro_f1") for t in tasks},
            "classical_macro_f1": {t: report["classical_baseline"]["tasks"][t].get("macro_f1")
                                   for t in tasks},
        })
        r = runs[-1]
        print(f"epochs {epochs} ({r['epochs_run']} run, {r['examples_per_second']} examples/s, "
              f"{r['compute_dtype_policy']}): run {r['run_seconds']} s "
              f"(fine-tune {seconds['finetune']} s); blessed {r['blessed']}; macro-F1 "
              + ", ".join(f"{t} {v:.3f} (classical {r['classical_macro_f1'][t]:.3f})"
                          for t, v in r["macro_f1"].items()), flush=True)
    out = {"setting": {"days": args.days, "rows_per_day": rows_per_day, "dev_examples": dev,
                       "rows_train": pre["rows_train"], "rows_eval": pre["rows_eval"],
                       "config": str(DEMO_CONFIG.relative_to(REPO))},
           "runs": runs,
           "host": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average": os.getloadavg()}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "demo_text_epochs.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
