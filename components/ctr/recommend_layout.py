"""The layout of a recommendations partition's `inputs/` folder: the users and the item
pool the step writes for `beam_jobs.recommend_ctr` to score, and that the quality check
reads back. Stdlib only, and apart from the job, so nothing reads a name out of a Beam job.
"""
INPUTS_DIR = "inputs"
USERS_DIR = "users"            # users/part-*.parquet: one row per user, user-side columns
ITEMS_FILE = "items.parquet"   # the candidate pool, item-side columns
