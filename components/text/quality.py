"""Quality figures of the text model on the real reviews, with more data than CI affords.

    .venv/bin/retrain text-quality            # or: python -m components.text.quality
    .venv/bin/retrain text-quality --train-examples 3000 --max-seq-length 96   # quicker

Defaults = the best measured configuration (README, Performance): all ~18,100 training
reviews, 2 epochs, max 128 tokens, peak learning rate 1e-4 with the cosine schedule,
balanced class weights, decision offsets fitted on 1,500 held-out reviews, figures on
all the ~2,800 held-out reviews after those (~40 min on an idle 2-core machine).

Runs the DAG's own steps in this process, on the whole review set loaded as one span:
Beam preprocessing (normalize, dedup, text-hash split) -> fine-tuning (early stopping on
the first `--early-stop-examples` eval texts; decision offsets fitted on the *next*
`--calibration-examples` eval texts) -> evaluation through the exported SavedModel on the
eval texts after those, `--eval-examples` of them, never seen in training, early stopping
or calibration. Prints positive-vs-negative accuracy (ratings >= 4 vs <= 2; target >= 0.92),
3-class sentiment macro-F1 (target >= 0.70, with its 95% bootstrap interval: on a few
thousand reviews the figure moves by about +-0.02 with the sample) and topic macro-F1,
each next to the majority-class baseline, and writes them to `<work-dir>/quality.json`.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

SPAN = "2026-01-01"


def run(work_dir: str, train_examples: int | None = None, eval_examples: int | None = None,
        early_stop_examples: int = 200, epochs: int = 2, max_seq_length: int = 128,
        batch_size: int = 16, learning_rate: float = 1e-4, calibration_examples: int = 1500,
        class_weighting: str = "balanced", lr_schedule: str = "cosine", seed: int = 7) -> dict:
    from components.metrics import macro_f1_interval
    from components.text import load
    from components.text.evaluate import TextEvaluateSpec, run as evaluate
    from components.text.preprocess import TextPreprocessSpec, run as preprocess
    from components.text.train import FinetuneSpec, run as finetune

    work = Path(work_dir)
    t0 = time.time()
    loaded = load.run(load.LoadTextSpec(out_root=str(work), start=SPAN, days=1))
    pre = preprocess(TextPreprocessSpec(raw_root=str(work / "raw" / "text"), span=SPAN,
                                        output_dir=str(work / "pre"), window_days=1,
                                        eval_percent=20))
    t_pre = time.time()
    trained = finetune(FinetuneSpec(
        preprocess_dir=pre["output_dir"], out_dir=str(work / "model"), epochs=epochs,
        batch_size=batch_size, max_seq_length=max_seq_length, learning_rate=learning_rate,
        max_train_examples=train_examples, max_eval_examples=early_stop_examples,
        class_weighting=class_weighting, lr_schedule=lr_schedule, seed=seed,
        calibrate=calibration_examples > 0, calibration_examples=calibration_examples or None))
    t_train = time.time()
    ev = evaluate(TextEvaluateSpec(
        preprocess_dir=pre["output_dir"], candidate_model_dir=trained["model_dir"],
        out_dir=str(work / "evaluation"), max_eval_examples=eval_examples,
        eval_offset=early_stop_examples + calibration_examples, min_auc=0.0))
    report = json.loads(Path(ev["eval_uri"]).read_text())
    s, t = report["candidate"]["tasks"]["sentiment"], report["candidate"]["tasks"]["topic"]
    figures = {
        "reviews_loaded": loaded["rows"], "exact_duplicates": pre["exact_duplicates"],
        "near_duplicates": pre["near_duplicates"], "train_examples": trained["train_examples"],
        "eval_examples": report["rows"], "early_stop_examples": early_stop_examples,
        "calibration_examples": calibration_examples, "class_weighting": class_weighting,
        "lr_schedule": lr_schedule, "learning_rate": learning_rate,
        "calibration_offsets": {t: c["offsets"] for t, c in
                                ((trained.get("calibration") or {}).get("tasks") or {}).items()},
        "epochs_run": trained["epochs_run"], "seed": seed,
        "max_seq_length": max_seq_length, "train_examples_per_second":
            trained["examples_per_second"],
        "pos_vs_neg_accuracy": s.get("pos_vs_neg_accuracy"), "pos_vs_neg_n": s.get("pos_vs_neg_n"),
        "sentiment_macro_f1": s["macro_f1"],
        "sentiment_macro_f1_ci95": _bounds(macro_f1_interval(s["confusion_matrix"])),
        "sentiment_accuracy": s["accuracy"],
        "sentiment_majority_macro_f1": s["majority_macro_f1"],
        "sentiment_majority_accuracy": s["majority_accuracy"],
        "topic_macro_f1": t["macro_f1"],
        "topic_macro_f1_ci95": _bounds(macro_f1_interval(t["confusion_matrix"])),
        "topic_accuracy": t["accuracy"],
        "topic_majority_macro_f1": t["majority_macro_f1"],
        "topic_majority_accuracy": t["majority_accuracy"],
        "sentiment_confusion_matrix": s["confusion_matrix"],
        "sentiment_per_class": s["per_class"],
        "seconds": {"load_preprocess": round(t_pre - t0), "finetune": round(t_train - t_pre),
                    "evaluate": round(time.time() - t_train)},
        "eval_uri": ev["eval_uri"], "model_dir": trained["model_dir"],
    }
    (work / "quality.json").write_text(json.dumps(figures, indent=2) + "\n")
    return figures


def _bounds(ci: dict) -> list[float]:
    return [round(ci["low"], 4), round(ci["high"], 4)]


def format_figures(f: dict) -> str:
    def pct(x):
        return "-" if x is None else f"{x:.4f}"

    def ci(key):
        lo_hi = f.get(key)
        return f"  95% CI {lo_hi[0]:.3f}-{lo_hi[1]:.3f}" if lo_hi else ""
    return "\n".join([
        f"trained on {f['train_examples']} reviews ({f['epochs_run']} epoch(s), max "
        f"{f['max_seq_length']} tokens, {f['train_examples_per_second']} examples/s); "
        f"scored {f['eval_examples']} held-out reviews; class weighting "
        f"{f['class_weighting']}, decision offsets {f['calibration_offsets'] or 'none'} "
        f"(fitted on {f['calibration_examples']} other held-out reviews)",
        f"{'':28}{'model':>8}  {'majority class':>14}  target",
        f"{'positive-vs-negative acc.':28}{pct(f['pos_vs_neg_accuracy']):>8}  "
        f"{'-':>14}  >= 0.92  (n={f['pos_vs_neg_n']})",
        f"{'sentiment 3-class macro-F1':28}{pct(f['sentiment_macro_f1']):>8}  "
        f"{pct(f['sentiment_majority_macro_f1']):>14}  >= 0.70"
        f"{ci('sentiment_macro_f1_ci95')}",
        f"{'sentiment accuracy':28}{pct(f['sentiment_accuracy']):>8}  "
        f"{pct(f['sentiment_majority_accuracy']):>14}",
        f"{'topic macro-F1':28}{pct(f['topic_macro_f1']):>8}  "
        f"{pct(f['topic_majority_macro_f1']):>14}          {ci('topic_macro_f1_ci95')}",
        f"{'topic accuracy':28}{pct(f['topic_accuracy']):>8}  "
        f"{pct(f['topic_majority_accuracy']):>14}",
    ])


def _parser(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--work-dir", default=None, help="where spans, shards, model and "
                   "quality.json go (default: a new temp dir)")
    p.add_argument("--train-examples", type=int, default=None,
                   help="training reviews to fine-tune on (default: all of the training "
                        "split, ~18,100)")
    p.add_argument("--eval-examples", type=int, default=None,
                   help="held-out reviews scored for the figures (default: all the "
                        "held-out reviews after the early-stopping and calibration ones)")
    p.add_argument("--early-stop-examples", type=int, default=200,
                   help="held-out reviews used for early stopping (not scored)")
    p.add_argument("--calibration-examples", type=int, default=1500,
                   help="held-out reviews after the early-stopping ones on which the "
                        "decision offsets are fitted (not scored); 0: no calibration")
    p.add_argument("--class-weighting", default="balanced", choices=["balanced", "sqrt", "none"])
    p.add_argument("--lr-schedule", default="cosine", choices=["cosine", "constant"])
    p.add_argument("--results", default=None,
                   help="also write the figures, with this command, to this JSON file "
                        "(e.g. bench/results/text_quality.json)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=7,
                   help="random seed of initialisation, dropout and shuffling")
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--learning-rate", type=float, default=1e-4)
    return p


def add_cli(subparsers) -> None:
    """Register `retrain text-quality`."""
    p = subparsers.add_parser(
        "text-quality", help="fine-tune on the real reviews and print the quality figures "
                             "(accuracy, macro-F1, majority baseline)",
        description=__doc__.split("\n\n")[0])
    _parser(p).set_defaults(func=_cmd)


def _cmd(args) -> int:
    work = args.work_dir or tempfile.mkdtemp(prefix="text-quality-")
    figures = run(work, args.train_examples, args.eval_examples, args.early_stop_examples,
                  args.epochs, args.max_seq_length, args.batch_size, args.learning_rate,
                  args.calibration_examples, args.class_weighting, args.lr_schedule,
                  args.seed)
    print(format_figures(figures))
    if args.results:
        from components.common.atomic import write_json
        if "text-quality" in sys.argv:     # `retrain text-quality ...`
            args_given = sys.argv[sys.argv.index("text-quality") + 1:]
            command = " ".join([".venv/bin/retrain text-quality", *args_given])
        else:                               # `python -m components.text.quality ...`
            command = " ".join(["python -m components.text.quality", *sys.argv[1:]])
        write_json(args.results, {**figures, "command": command,
                                  "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                               time.gmtime())})
        print(f"figures written to {args.results}")
    print(f"details: {Path(work) / 'quality.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    import logging
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = _parser(argparse.ArgumentParser(prog="python -m components.text.quality",
                                           description=__doc__.split("\n\n")[0])).parse_args(argv)
    return _cmd(args)


if __name__ == "__main__":
    sys.exit(main())
