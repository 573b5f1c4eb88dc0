"""`retrain config suggest`: a starting family config written from the user's own
partitions, so bringing new data starts from a file that already passes validation on
every day it was fitted on.

Why here: reading the days and profiling their columns knows no family; what a column
becomes (a feature, a label, a task) is each family's business (`components.ctr.suggest`,
`components.text.suggest`), and each family's own loader checks the result before a byte
is written. Which part files a day may hold is each family's too (its module's
`PART_SUFFIXES`, imported from the family's raw format: one home, design rule 26).

Reads `<raw_root>/dt=YYYY-MM-DD/part-*` of the newest delivered days (`_SUCCESS`): by
default as many as the longest window a DAG run may validate (RETRAIN_MAX_WINDOW_DAYS),
since every day a run validates must pass the config; one day at a time, keeping only
per-column summaries (counts, min/max, capped distinct sets, fixed-size samples) and the
day's own figures, so memory does not grow with the window (design rule 24). Writes one
YAML file (or stdout); its header names the days read and warns when fewer than asked.

Errors name the folder, file or rule, never a value read from the data (rule 22).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import importlib
import json
import os
import random
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

from retrain.config_yaml import render

FAMILIES = {"ctr": "components.ctr.suggest", "text": "components.text.suggest"}
VALUE_CAP = 10_000        # distinct values counted exactly per column (vocabularies)
HASH_CAP = 2_000_000      # distinct values tracked per column (ids, hash buckets)
SAMPLE = 10_000           # numbers / lengths kept per column (quantiles, skew)
DAY_VALUE_CAP = 50        # per-day value counts kept for low-cardinality columns
_TOKEN = re.compile(r"[^\W_]+")
_SPACE = re.compile(r"\s+")
# An ISO 8601 date or date-time, as logs write event times in text.
_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?"
                       r"(Z|[+-]\d{2}:?\d{2})?)?$")
# Words of a column name that say it holds a time (ts, created_at, eventTime, ...).
_TIME_WORDS = {"ts", "time", "timestamp", "date", "datetime", "dt", "epoch", "created",
               "updated", "day"}
# Epoch numbers between 1973 and 2103, by unit: (name, units per second, lowest, highest).
_EPOCH_UNITS = (("seconds", 1, 1e8, 4.2e9), ("milliseconds", 1e3, 1e11, 4.2e12),
                ("microseconds", 1e6, 1e14, 4.2e15), ("nanoseconds", 1e9, 1e17, 4.2e18))


def family_module(family: str):
    return importlib.import_module(FAMILIES[family])


def part_suffixes() -> tuple[str, ...]:
    """Every part suffix some family reads (each family's own list, imported: rule 26)."""
    return tuple(dict.fromkeys(s for f in FAMILIES for s in family_module(f).PART_SUFFIXES))


def parquet_suffixes() -> tuple[str, ...]:
    return tuple(dict.fromkeys(s for f in FAMILIES for s in family_module(f).PARQUET_SUFFIXES))


def _suffix(name: str, suffixes: tuple[str, ...]) -> str:
    """The longest of `suffixes` that `name` ends with ("" if none)."""
    return max((s for s in suffixes if name.endswith(s)), key=len, default="")


def time_named(name: str) -> bool:
    """Whether a column's name says it holds a time: a word ts/time/timestamp/date/... in
    it (snake_case or camelCase), or an ending _at/_on/time/date/stamp."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower()
    words = set(re.split(r"[^a-z0-9]+", spaced))
    return bool(words & _TIME_WORDS) or spaced.endswith(("_at", "_on", "time", "date",
                                                          "stamp"))


def epoch_unit(lo, hi) -> tuple[str, float] | None:
    """(unit, units per second) when every number in [lo, hi] reads as an epoch time of
    one unit between 1973 and 2103; None otherwise."""
    if lo is None or hi is None:
        return None
    for name, per_second, low, high in _EPOCH_UNITS:
        if low <= lo and hi < high:
            return name, per_second
    return None


# ------------------------------------------------------------------------ the profile

@dataclasses.dataclass
class DayColumn:
    """One column on one day: what the span-level validation rules measure."""
    rows: int = 0
    nulls: int = 0
    values: Counter | None = dataclasses.field(default_factory=Counter)  # None: too many
    text_hashes: set = dataclasses.field(default_factory=set)   # normalized text, strings
    text_dups: int = 0
    lengths: list = dataclasses.field(default_factory=list)     # stripped chars, sampled
    median_chars: int | None = None  # of `lengths`, kept when the day is closed


@dataclasses.dataclass
class Day:
    name: str                        # dt=YYYY-MM-DD
    rows: int = 0
    rejected: int = 0                # lines that are not JSON objects
    duplicate_rows: int = 0          # rows equal to an earlier row of the day
    overlap_previous: float = 0.0    # share of rows also on the previous day read
    columns: dict = dataclasses.field(default_factory=dict)     # name -> DayColumn

    @property
    def start(self) -> float | None:
        """The day's first second, as epoch seconds (UTC)."""
        try:
            day = dt.date.fromisoformat(self.name.split("=", 1)[1])
        except (IndexError, ValueError):
            return None
        return dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp()

    def close(self) -> None:
        """Keep the day's figures, drop what only counting them needed (memory stays
        flat over a long window)."""
        for c in self.columns.values():
            c.text_hashes = set()        # only the count is kept
            if c.lengths:
                c.median_chars = sorted(c.lengths)[len(c.lengths) // 2]
            c.lengths = []


class Column:
    """One column over every day read: types, distinct values, numbers, lengths."""

    def __init__(self, name: str):
        self.name = name
        self.types: Counter = Counter()     # null, bool, int, float, str, str_list, list,
        self.arrow: set[str] = set()        # dict, datetime; Parquet types seen
        self.count = self.nulls = 0
        self.values: Counter | None = Counter()   # exact counts; None past VALUE_CAP
        self.hashes: set | None = set()     # distinct tracking; None past HASH_CAP
        self.repeated = False               # a non-null value seen twice
        self.min = self.max = None
        self.numbers: list = []             # sample
        self.chars = self.spaced = 0        # strings: total length, values with whitespace
        self.min_chars = self.max_chars = None   # strings: stripped length, exact
        self.tokens: set = set()            # distinct tokens of strings (capped)
        self.token_counts: list = []        # tokens per value, sample
        self.list_lengths: list = []        # str_list: values per row, sample
        self.elements: Counter | None = Counter()
        self.element_hashes: set = set()
        # event time: ISO strings seen (counted until a string is not one), numbers that
        # fall on their partition's day as epoch times, never decreasing in read order
        self.iso = 0
        self.iso_ok = True
        self.on_day = 0
        self.monotone = True
        self._last = None
        self._rng = random.Random(name)

    @property
    def distinct(self) -> int:
        """Distinct non-null values (HASH_CAP: at least that many)."""
        return HASH_CAP if self.hashes is None else len(self.hashes)

    @property
    def unique(self) -> bool:
        return self.count - self.nulls > 0 and not self.repeated

    @property
    def kind(self) -> str:
        """The one non-null type of the column, or "mixed" / "null"."""
        kinds = set(self.types) - {"null"}
        if kinds <= {"int", "float"} and "float" in kinds:
            return "float"
        return kinds.pop() if len(kinds) == 1 else ("null" if not kinds else "mixed")

    @property
    def mean_chars(self) -> float:
        n = self.types.get("str", 0)
        return self.chars / n if n else 0.0

    @property
    def event_time(self) -> str | None:
        """Why the column reads as the rows' event time (a date/time type; ISO dates; epoch
        numbers on their partition's day, or under a time-like name; a time-like name
        over never-decreasing numbers), or None. Such a column is never proposed as a
        feature: a model keyed on the clock learns the day, not the user."""
        seen = self.count - self.nulls
        if "datetime" in self.types or any(a.startswith(("timestamp", "date", "time"))
                                           for a in self.arrow):
            return "a date/time type"
        if not seen:
            return None
        if self.kind == "str":
            return "ISO dates/times" if self.iso_ok and self.iso == seen else None
        if self.kind not in ("int", "float"):
            return None
        unit = epoch_unit(self.min, self.max)
        if unit and self.on_day >= 0.9 * seen:
            return f"epoch {unit[0]}, each on the day of its partition"
        if unit and time_named(self.name):
            return f"epoch {unit[0]} under a time-like name"
        if time_named(self.name) and self.monotone and self.min != self.max:
            return "a time-like name over numbers that never decrease in the order read"
        return None

    def _sample(self, bucket: list, x, seen: int) -> None:
        """Reservoir sampling: `bucket` stays a uniform sample of the `seen` values
        (seeded per column, so the same days give the same config)."""
        if len(bucket) < SAMPLE:
            bucket.append(x)
        else:
            j = self._rng.randrange(seen)
            if j < SAMPLE:
                bucket[j] = x

    def add(self, value, day: DayColumn, day_start: float | None = None) -> None:
        self.count += 1
        day.rows += 1
        t = type_of(value)
        self.types[t] += 1
        if t == "null":
            self.nulls += 1
            day.nulls += 1
            return
        if t in ("str", "int", "float"):
            try:
                self.monotone &= self._last is None or value >= self._last
            except TypeError:            # a str after a number: not one order
                self.monotone = False
            self._last = value
        if t in ("str", "int", "bool"):
            self._distinct(value)
            if day.values is not None:
                day.values[value] += 1
                if len(day.values) > DAY_VALUE_CAP:
                    day.values = None
        if t in ("int", "float"):
            self.min = value if self.min is None else min(self.min, value)
            self.max = value if self.max is None else max(self.max, value)
            self._sample(self.numbers, value, self.count)
            unit = epoch_unit(value, value)
            if unit and day_start is not None \
                    and -86_400 <= value / unit[1] - day_start < 2 * 86_400:
                self.on_day += 1
        elif t == "str":
            if self.iso_ok:
                self.iso_ok = bool(_ISO_TIME.match(value))
                self.iso += self.iso_ok
            self.chars += len(value)
            n = len(value.strip())
            self.min_chars = n if self.min_chars is None else min(self.min_chars, n)
            self.max_chars = n if self.max_chars is None else max(self.max_chars, n)
            self.spaced += bool(_SPACE.search(value.strip()))
            tokens = _TOKEN.findall(value.lower())
            if len(self.tokens) < HASH_CAP:
                self.tokens.update(tokens)
            self._sample(self.token_counts, len(tokens), self.count)
            self._sample(day.lengths, n, day.rows)
            h = hash(_SPACE.sub(" ", value).strip().casefold())
            day.text_dups += h in day.text_hashes
            day.text_hashes.add(h)
        elif t == "str_list":
            self._sample(self.list_lengths, len(value), self.count)
            for v in value:
                if self.elements is not None:
                    self.elements[v] += 1
                    if len(self.elements) > VALUE_CAP:
                        self.elements = None
                if len(self.element_hashes) < HASH_CAP:
                    self.element_hashes.add(hash(v))

    def _distinct(self, value) -> None:
        if self.values is not None:
            self.values[value] += 1
            if len(self.values) > VALUE_CAP:
                self.values = None
        if self.hashes is not None:
            h = hash((type(value).__name__, value))
            self.repeated |= h in self.hashes
            self.hashes.add(h)
            if len(self.hashes) > HASH_CAP:
                self.hashes = None


@dataclasses.dataclass
class Profile:
    """What the days read hold, for a family's `suggest(profile, ...)`."""
    raw_root: str
    days: list                       # [Day], oldest first
    columns: dict                    # name -> Column, in first-seen order
    formats: set                     # {"parquet", "jsonl"}
    suffixes: dict = dataclasses.field(default_factory=dict)   # suffix -> a part read
    window: int = 0                  # the days asked for
    delivered: int = 0               # delivered days under the root, read or not

    def day_values(self, column: str):
        """[(day name, DayColumn)] of one column (days where it is absent: empty)."""
        return [(d.name, d.columns.get(column, DayColumn())) for d in self.days]

    @property
    def event_times(self) -> dict[str, str]:
        """{column: why it reads as the event time} (`Column.event_time`)."""
        return {n: why for n, c in self.columns.items() if (why := c.event_time)}


def type_of(value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float, str, dict)):
        return type(value).__name__
    if isinstance(value, (dt.date, dt.time)):
        return "datetime"
    if isinstance(value, list):
        return "str_list" if all(isinstance(v, str) for v in value) else "list"
    return "other"


def default_window() -> int:
    """The longest window a DAG run may validate (RETRAIN_MAX_WINDOW_DAYS): a config must
    pass every day of any window a run may ask for."""
    from retrain.common.settings import settings
    return settings().max_window_days


def _delivered(raw_root: str | Path) -> list[dt.date]:
    from retrain.common import spans
    root = Path(raw_root)
    if not root.is_dir():
        raise FileNotFoundError(f"raw root {root} does not exist or is not a folder")
    days = spans.delivered_days(root)
    if not days:
        raise FileNotFoundError(f"raw root {root} holds no delivered day (a folder "
                                "dt=YYYY-MM-DD with a _SUCCESS marker)")
    return days


def delivered_days(raw_root: str | Path, n: int) -> list[Path]:
    """The newest `n` folders dt=YYYY-MM-DD with a `_SUCCESS` marker, oldest first."""
    from retrain.common import paths
    return [Path(paths.partition(Path(raw_root), d)) for d in _delivered(raw_root)[-n:]]


def _parts(day_dir: Path) -> list[Path]:
    """The day's parts, checked like every reader's (`rawfiles.list_parts`: regular files
    inside the raw root, at most the default parts per day): no config exists yet."""
    from retrain.common import rawfiles
    return rawfiles.list_parts(day_dir, part_suffixes(), day_dir.parent)


def _rows(part: Path, day: Day, arrow: dict):
    """Rows of one part as dicts; a line that is not a JSON object is counted, not read."""
    if part.name.endswith(parquet_suffixes()):
        import pyarrow.parquet as pq
        try:
            pf = pq.ParquetFile(part)
            for field in pf.schema_arrow:
                arrow.setdefault(field.name, set()).add(
                    str(field.type).replace("large_", "").replace("_view", ""))
            for batch in pf.iter_batches(batch_size=65_536):
                yield from batch.to_pylist()
        except Exception as e:   # noqa: BLE001 - pyarrow's errors may quote bytes
            raise ValueError(f"{part}: not a readable Parquet file ({type(e).__name__})") \
                from None
        return
    opener = gzip.open if part.name.endswith(".gz") else open
    try:
        with opener(part, "rb") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    row = None
                if isinstance(row, dict):
                    yield row
                else:
                    day.rejected += 1
    except (OSError, EOFError) as e:
        raise ValueError(f"{part}: not a readable JSONL file ({type(e).__name__})") from None


def profile(raw_root: str | Path, days: int | None = None) -> Profile:
    """Read the newest `days` delivered days (default: `default_window()`), one day at a
    time, and profile every column."""
    from retrain.common import paths
    window = days or default_window()
    delivered = _delivered(raw_root)
    columns: dict[str, Column] = {}
    out, formats, arrow, previous, suffixes = [], set(), {}, set(), {}
    parquet = parquet_suffixes()
    for date in delivered[-window:]:
        day_dir = Path(paths.partition(Path(raw_root), date))
        day = Day(name=day_dir.name)
        start = day.start
        hashes: set = set()
        for part in _parts(day_dir):
            suffixes.setdefault(_suffix(part.name, part_suffixes()), f"{day.name}/{part.name}")
            formats.add("parquet" if part.name.endswith(parquet) else "jsonl")
            for row in _rows(part, day, arrow):
                day.rows += 1
                h = hash(json.dumps(row, sort_keys=True, default=str))
                day.duplicate_rows += h in hashes
                hashes.add(h)
                for name in [*row, *(c for c in columns if c not in row)]:
                    col = columns.setdefault(name, Column(name))
                    col.add(row.get(name), day.columns.setdefault(name, DayColumn()), start)
        day.overlap_previous = len(hashes & previous) / len(hashes) if hashes else 0.0
        previous = hashes
        day.close()
        out.append(day)
    for name, types in arrow.items():
        columns.setdefault(name, Column(name)).arrow |= types
    return Profile(raw_root=str(raw_root), days=out, columns=columns, formats=formats,
                   suffixes=suffixes, window=window, delivered=len(delivered))


# ------------------------------------------------------------------------ the command

def choose_family(prof: Profile, given: str | None) -> tuple[str, str]:
    """(family, why): the one given, else the one family whose claim fits the data."""
    if given:
        return given, "--family"
    claims = {f: family_module(f).claim(prof) for f in FAMILIES}
    fitting = {f: why for f, why in claims.items() if why}
    if len(fitting) != 1:
        raise ValueError(f"cannot guess the family of the data under {prof.raw_root} "
                         f"({'both fit' if fitting else 'none fits'}): give --family "
                         f"{'|'.join(FAMILIES)}")
    return next(iter(fitting.items()))


def _window_lines(prof: Profile) -> list[str]:
    """Which days were read, and a warning for each way the window the config must pass
    on may hold days it was not fitted on."""
    read = f"{prof.days[0].name} .. {prof.days[-1].name}" if len(prof.days) > 1 \
        else prof.days[0].name
    rows = sum(d.rows for d in prof.days)
    lines = [f"read {len(prof.days)} day(s), {read} ({rows:,} rows), of a {prof.window}-day "
             "window"]
    if len(prof.days) < prof.window:
        lines.append(f"WARNING: only {len(prof.days)} of the {prof.window} days asked for "
                     "are delivered: a run whose window holds days delivered later "
                     "validates them against bounds fitted without them (suggest again "
                     "once they have arrived, or check its first validations)")
    older = prof.delivered - len(prof.days)
    if older:
        lines.append(f"WARNING: {older} older delivered day(s) before {prof.days[0].name} "
                     "were not read: a longer window or a backfill validates them against "
                     "bounds fitted without them (--window-days reads more)")
    return lines


def suggest(raw_root: str, family: str | None = None, days: int | None = None, *,
            label: str | None = None, text: str | None = None,
            id_column: str | None = None) -> tuple[str, str, list[str]]:
    """(YAML text, family, notes): the config, checked by the family's own loader, fitted
    on every day it read (the newest `days` delivered; default `default_window()`)."""
    if days is not None and days < 1:
        raise ValueError(f"--window-days must be at least 1, got {days}")
    prof = profile(raw_root, days)
    if not any(d.rows for d in prof.days):
        skipped = sum(d.rejected for d in prof.days)
        raise ValueError(f"the days read under {raw_root} hold no rows" + (
            f": {skipped} line(s) of their JSONL parts are not JSON objects" if skipped else ""))
    for given, flag in ((label, "--label"), (text, "--text"), (id_column, "--id")):
        if given is not None and given not in prof.columns:
            raise ValueError(f"{flag}: no such column in the days read under {raw_root}")
    family, why = choose_family(prof, family)
    module = family_module(family)
    unread = {s: part for s, part in prof.suffixes.items() if s not in module.PART_SUFFIXES}
    if unread:
        raise ValueError(f"{raw_root}/{next(iter(unread.values()))}: the {family} family "
                         f"reads parts ending in {', '.join(module.PART_SUFFIXES)}, so its "
                         "validation would not read this one (rename it, or give --family)")
    doc, notes = module.suggest(prof, label=label, text=text, id_column=id_column)
    window = _window_lines(prof)
    times = [f"column {name!r} reads as the event time ({why}): never proposed as a "
             "feature" for name, why in prof.event_times.items()]
    header = [f"# Suggested by `retrain config suggest` from the days under {raw_root}: "
              f"{window[0]}.", *(f"# {w}" for w in window[1:]),
              f"# Family: {family}: {why}.", *(f"# Event time: {t}." for t in times),
              "# Every fitted value says where it came from; check the choices, then point "
              "the DAG's config param at this file."]
    yaml_text = "\n".join([*header, *render(doc)]) + "\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "suggested.yaml"
        path.write_text(yaml_text, encoding="utf-8")
        try:
            module.load(path)
        except ValueError as e:
            raise ValueError(f"the suggested {family} config does not pass its loader "
                             f"(a bug in the suggester, please report it): "
                             f"{str(e).replace(str(path), '<suggested>')}") from None
    return yaml_text, family, [*window, f"family: {family} ({why})", *times, *notes]


def write_out(path: str, text: str, force: bool) -> None:
    """Write atomically; an existing file is replaced only with `force`."""
    target = Path(path)
    if target.exists() and not force:
        raise ValueError(f"--out {target} already exists (add --force to replace it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if force:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)     # fails if the file appeared meanwhile
            except FileExistsError:
                raise ValueError(f"--out {target} already exists (add --force to replace "
                                 "it)") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def add_cli(subparsers) -> None:
    """Register `retrain config suggest`."""
    p = subparsers.add_parser("config", help="family config files: suggest one from your data",
                              description="Family config files.")
    sub = p.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    s = sub.add_parser(
        "suggest", help="write a starting config from your partitions",
        description="Read the newest delivered days under --raw-root (dt=YYYY-MM-DD/ with "
                    "_SUCCESS and part-* files in a format the family reads) and write a "
                    "starting family config: columns, types, features or tasks, "
                    "validation bounds fitted to every day read, a comment on every value "
                    "saying where it came from. By default it reads as many days as the "
                    "longest window a DAG run may validate, one day at a time. A column "
                    "holding the rows' event time is recognised and never made a feature. "
                    "The result is checked with the family's own loader before it is "
                    "written. The days read, guesses and warnings are printed to stderr; "
                    "correct the guesses with the options.")
    s.add_argument("--raw-root", required=True, help="folder holding dt=YYYY-MM-DD/ days")
    s.add_argument("--family", choices=sorted(FAMILIES), default=None,
                   help="ctr or text (default: guessed from the columns, and said why)")
    s.add_argument("--window-days", "--days", dest="days", type=int, default=None,
                   metavar="N",
                   help="read the newest N delivered days: the window_days the DAG runs "
                        "will use (default: the longest window a run may ask for, "
                        "RETRAIN_MAX_WINDOW_DAYS, 60 unless set; fewer delivered: all of "
                        "them, with a warning)")
    s.add_argument("--out", default=None, help="write here (default: stdout)")
    s.add_argument("--force", action="store_true", help="replace an existing --out file")
    s.add_argument("--label", default=None,
                   help="ctr: the 0/1 label column; text: the one task's label column")
    s.add_argument("--text", default=None, help="text: the column holding the text")
    s.add_argument("--id", dest="id_column", default=None,
                   help="the unique id column (default: one that is unique over the days "
                        "read; none: ids are derived)")
    s.set_defaults(func=_cmd)


def _cmd(args) -> int:
    from retrain.common.errors import BadData
    if args.out and Path(args.out).exists() and not args.force:
        raise ValueError(f"--out {args.out} already exists (add --force to replace it)")
    try:
        text, _, notes = suggest(args.raw_root, args.family, args.days, label=args.label,
                                 text=args.text, id_column=args.id_column)
    except BadData as e:
        raise ValueError(str(e)) from None
    for note in notes:
        print(f"retrain config suggest: {note}", file=sys.stderr)
    if args.out:
        write_out(args.out, text, args.force)
        print(f"retrain config suggest: wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
