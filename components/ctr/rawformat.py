"""The CTR family's raw log format: which part files a span folder may hold.

One home for what validation, preprocessing, `retrain config suggest` and the benches
accept, so they never disagree about a folder (issue 47). Stdlib only.
"""
PARQUET_SUFFIXES = (".parquet",)
JSONL_SUFFIXES = (".jsonl.gz", ".json.gz", ".jsonl", ".json")
PART_SUFFIXES = PARQUET_SUFFIXES + JSONL_SUFFIXES
