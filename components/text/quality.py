"""Quality figures of the text model on a corpus, with more data than CI affords: the
bundled reviews by default, or any labelled text described by a text config.

    .venv/bin/retrain text-quality            # or: python -m components.text.quality
    .venv/bin/retrain text-quality --train-examples 3000 --max-seq-length 96   # quicker
    .venv/bin/retrain text-quality --text-config my.yaml --raw-root data/ --span 2026-11-30 \\
        --window-days 30                      # your own partitions

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

from retrain.common import paths

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

SPAN = "2026-01-01"


def run(work_dir: str, train_examples: int | None = None, eval_examples: int | None = None,
        early_stop_examples: int = 200, epochs: int = 2, max_seq_length: int | None = None,
        batch_size: int = 16, learning_rate: float = 1e-4, calibration_examples: int = 1500,
        class_weighting: str | None = None, lr_schedule: str = "cosine", seed: int = 7,
        text_config: str = "", raw_root: str | None = None, span: str | None = None,
        window_days: int = 1, eval_percent: int = 20) -> dict:
    """Fine-tune and score on a corpus: the bundled reviews (default), or the user's own
    partitions (`raw_root` + `span` + `window_days`) described by `text_config`."""
    from components.metrics import macro_f1_interval
    from components.text import load
    from components.text import task_config as T
    from components.text.evaluate import TextEvaluateSpec, run as evaluate
    from components.text.preprocess import TextPreprocessSpec, run as preprocess
    from components.text.train import FinetuneSpec, run as finetune

    work = Path(work_dir)
    t0 = time.time()
    if raw_root is None:
        loaded = load.run(load.LoadTextSpec(out_root=str(work), start=SPAN, days=1))["rows"]
        raw_root, span, window_days = str(work / "raw" / "text"), SPAN, 1
    elif span is None:
        raise ValueError("give span (the newest day of the window) with raw_root")
    else:
        loaded = None
    cfg = T.load_for(text_config)
    unknown = _unknown_tokens(cfg, raw_root, span, window_days)
    pre = preprocess(TextPreprocessSpec(raw_root=raw_root, span=span, text_config=text_config,
                                        output_dir=str(work / "pre"), window_days=window_days,
                                        eval_percent=eval_percent))
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
        max_train_examples=train_examples,
        eval_offset=early_stop_examples + calibration_examples, min_auc=0.0))
    report = json.loads(Path(ev["eval_uri"]).read_text())
    classical = (report.get("classical_baseline") or {}).get("tasks") or {}
    figures = {
        "corpus": text_config or "bundled reviews", "tasks": cfg.task_labels,
        "reviews_loaded": loaded if loaded is not None else pre["rows_in"],
        "exact_duplicates": pre["exact_duplicates"],
        "near_duplicates": pre["near_duplicates"], "train_examples": trained["train_examples"],
        "eval_examples": report["rows"], "early_stop_examples": early_stop_examples,
        "calibration_examples": calibration_examples,
        "class_weighting": trained["class_weighting"],
        "lr_schedule": lr_schedule, "learning_rate": learning_rate,
        "calibration_offsets": {t: c["offsets"] for t, c in
                                ((trained.get("calibration") or {}).get("tasks") or {}).items()},
        "epochs_run": trained["epochs_run"], "seed": seed,
        "max_seq_length": trained["max_seq_length"], "train_examples_per_second":
            trained["examples_per_second"],
        "classical_baseline": (report.get("classical_baseline") or {}).get("model"),
        "unknown_tokens": unknown,
    }
    for task, m in report["candidate"]["tasks"].items():
        if not m.get("n"):
            continue
        figures.update({
            f"{task}_macro_f1": m["macro_f1"],
            f"{task}_macro_f1_ci95": _bounds(macro_f1_interval(m["confusion_matrix"])),
            f"{task}_accuracy": m["accuracy"], f"{task}_auc": m.get("auc"),
            f"{task}_majority_macro_f1": m["majority_macro_f1"],
            f"{task}_majority_accuracy": m["majority_accuracy"],
            f"{task}_classical_macro_f1": classical.get(task, {}).get("macro_f1"),
            f"{task}_classical_accuracy": classical.get(task, {}).get("accuracy"),
            f"{task}_confusion_matrix": m["confusion_matrix"],
            f"{task}_per_class": m["per_class"]})
        if "pos_vs_neg_accuracy" in m:
            figures.update(pos_vs_neg_accuracy=m["pos_vs_neg_accuracy"],
                           pos_vs_neg_n=m["pos_vs_neg_n"])
    figures.update({
        "seconds": {"load_preprocess": round(t_pre - t0), "finetune": round(t_train - t_pre),
                    "evaluate": round(time.time() - t_train)},
        "eval_uri": ev["eval_uri"], "model_dir": trained["model_dir"]})
    (work / "quality.json").write_text(json.dumps(figures, indent=2) + "\n")
    return figures


def _unknown_tokens(cfg, raw_root: str, span: str, window_days: int) -> dict:
    """The checkpoint's [UNK] rate on the newest day, as validation measures it: figures
    from a checkpoint that cannot read the text are flagged, not just printed."""
    from pathlib import Path

    from components.text import rawdata
    from components.text.validate import unknown_token_check

    rows = [r for part in rawdata.span_parts(Path(paths.partition(raw_root, span)),
                                             limits=cfg.validation.record_limits())
            for r in rawdata.read_rows(part, cfg.validation.record_limits())]
    return unknown_token_check(cfg, [cfg.text_of(r) for r in rows])


def _bounds(ci: dict) -> list[float]:
    return [round(ci["low"], 4), round(ci["high"], 4)]


def format_figures(f: dict) -> str:
    def num(x):
        return "-" if x is None else f"{x:.4f}"

    def ci(key):
        lo_hi = f.get(key)
        return f"  95% CI {lo_hi[0]:.3f}-{lo_hi[1]:.3f}" if lo_hi else ""
    lines = [
        f"{f['corpus']}: trained on {f['train_examples']} texts ({f['epochs_run']} epoch(s), "
        f"max {f['max_seq_length']} tokens, {f['train_examples_per_second']} examples/s); "
        f"scored {f['eval_examples']} held-out texts; class weighting "
        f"{f['class_weighting']}, decision offsets {f['calibration_offsets'] or 'none'} "
        f"(fitted on {f['calibration_examples']} other held-out texts)",
        f"{'':28}{'model':>8}  {'TF-IDF+LR':>9}  {'majority':>8}"]
    unk = f.get("unknown_tokens") or {}
    if unk.get("level") in ("warn", "fail"):
        lines.insert(0, f"WARNING: {unk['observed']}: the checkpoint cannot read much of this "
                        "text, so the fine-tuned figures say little (validation would "
                        + ("fail" if unk["level"] == "fail" else "warn") + ")")
    if f.get("pos_vs_neg_accuracy") is not None:
        lines.append(f"{'positive-vs-negative acc.':28}{num(f['pos_vs_neg_accuracy']):>8}  "
                     f"{'-':>9}  {'-':>8}  (n={f['pos_vs_neg_n']})")
    for task in f["tasks"]:
        if f"{task}_macro_f1" not in f:
            continue
        lines += [
            f"{task + ' macro-F1':28}{num(f[task + '_macro_f1']):>8}  "
            f"{num(f[task + '_classical_macro_f1']):>9}  "
            f"{num(f[task + '_majority_macro_f1']):>8}{ci(task + '_macro_f1_ci95')}",
            f"{task + ' accuracy':28}{num(f[task + '_accuracy']):>8}  "
            f"{num(f[task + '_classical_accuracy']):>9}  "
            f"{num(f[task + '_majority_accuracy']):>8}"]
    return "\n".join(lines)


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
    p.add_argument("--class-weighting", default=None, choices=["balanced", "sqrt", "none"],
                   help="default: the config's class_weighting")
    p.add_argument("--lr-schedule", default="cosine", choices=["cosine", "constant"])
    p.add_argument("--results", default=None,
                   help="also write the figures, with this command, to this JSON file "
                        "(e.g. bench/results/text_quality.json)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=7,
                   help="random seed of initialisation, dropout and shuffling")
    p.add_argument("--max-seq-length", type=int, default=None,
                   help="default: the config's max_seq_length (128 for the reviews)")
    p.add_argument("--text-config", default="",
                   help="the corpus' text config file (columns, tasks, labels; README "
                        "\"Your own text data\"); default: the bundled reviews")
    p.add_argument("--raw-root", default=None,
                   help="folder of dt=YYYY-MM-DD partitions to measure on (with --span); "
                        "default: the bundled reviews loaded as one span")
    p.add_argument("--span", default=None, help="newest day of the window (with --raw-root)")
    p.add_argument("--window-days", type=int, default=1, help="days read (with --raw-root)")
    p.add_argument("--eval-percent", type=int, default=20,
                   help="share of distinct texts held out (stable text hash)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--learning-rate", type=float, default=1e-4)
    return p


def add_cli(subparsers) -> None:
    """Register `retrain text-quality`."""
    p = subparsers.add_parser(
        "text-quality", help="fine-tune on a corpus (default: the bundled reviews) and print "
                             "the quality figures (accuracy, macro-F1, TF-IDF and majority "
                             "baselines)",
        description=__doc__.split("\n\n")[0])
    _parser(p).set_defaults(func=_cmd)


def _cmd(args) -> int:
    work = args.work_dir or tempfile.mkdtemp(prefix="text-quality-")
    figures = run(work, args.train_examples, args.eval_examples, args.early_stop_examples,
                  args.epochs, args.max_seq_length, args.batch_size, args.learning_rate,
                  args.calibration_examples, args.class_weighting, args.lr_schedule,
                  args.seed, text_config=args.text_config, raw_root=args.raw_root,
                  span=args.span, window_days=args.window_days,
                  eval_percent=args.eval_percent)
    print(format_figures(figures))
    if args.results:
        from retrain.common.atomic import write_json
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
