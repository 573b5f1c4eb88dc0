"""The layout of `beam_jobs.preprocess_ctr`'s output folder: the contract between the Beam
job that writes it and the trainer, evaluation and tests that read it.

Stdlib only and apart from the job and its step wrapper, so the trainer reads the layout
without importing Beam and the job never imports the step that launches it.
"""
TRANSFORM_DIR = "transform_fn_output"   # tft.TFTransformOutput layout
TRAIN_DIR, EVAL_DIR = "train", "eval"   # gzip TFRecord shards of transformed examples
SUMMARY_FILE = "summary.json"
REJECTED_DIR = "rejected"                # dead letters: one JSON object per malformed record
VALIDATION_DIR = "validation"            # the window's validation slice (early stopping)
SPLIT_STATS_FILE = "split_stats.npz"     # rows, clicks, id counts per split (split_stats)
ID_COVERAGE_FILE = "id_coverage.json"    # id fields' distinct, shared and new ids (id_coverage)
SHARD_ROWS_FILE = "shard_rows.json"     # in each split folder: {shard file name: rows}
