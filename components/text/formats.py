"""The layout of `beam_jobs.preprocess_text`'s output folder: the contract between the Beam
job that writes it and the fine-tuning and evaluation steps that read it.

Stdlib only and apart from the job and its step wrapper (no file circle between them).
"""
TRAIN_DIR, EVAL_DIR = "train", "eval"   # gzip TFRecord shards: raw text + label indices
SUMMARY_FILE = "summary.json"
