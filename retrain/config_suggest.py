"""`retrain config suggest`: a starting family config written from a few days of the user's
own partitions, so bringing new data starts from a file that already passes validation.

Why here: reading the days and profiling their columns knows no family; what a column
becomes (a feature, a label, a task) is each family's business (`components.ctr.suggest`,
`components.text.suggest`), and each family's own loader checks the result before a byte
is written. Reads `<raw_root>/dt=YYYY-MM-DD/part-*.{parquet,jsonl,jsonl.gz}` of the newest
delivered days (`_SUCCESS`); writes one YAML file (or stdout).

Errors name the folder, file or rule, never a value read from the data (rule 22).
"""
from __future__ import annotations

import dataclasses
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

FAMILIES = {"ctr": "components.ctr.suggest", "text": "components.text.suggest"}
PARQUET = (".parquet",)
JSONL = (".jsonl", ".jsonl.gz", ".json", ".json.gz")
VALUE_CAP = 10_000        # distinct values counted exactly per column (vocabularies)
HASH_CAP = 2_000_000      # distinct values tracked per column (ids, hash buckets)
SAMPLE = 10_000           # numbers / lengths kept per column (quantiles, skew)
DAY_VALUE_CAP = 50        # per-day value counts kept for low-cardinality columns
_TOKEN = re.compile(r"[^\W_]+")
_SPACE = re.compile(r"\s+")


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


@dataclasses.dataclass
class Day:
    name: str                        # dt=YYYY-MM-DD
    rows: int = 0
    rejected: int = 0                # lines that are not JSON objects
    duplicate_rows: int = 0          # rows equal to an earlier row of the day
    overlap_previous: float = 0.0    # share of rows also on the previous day read
    columns: dict = dataclasses.field(default_factory=dict)     # name -> DayColumn


class Column:
    """One column over every day read: types, distinct values, numbers, lengths."""

    def __init__(self, name: str):
        self.name = name
        self.types: Counter = Counter()     # null, bool, int, float, str, str_list, list, dict
        self.arrow: set[str] = set()        # Parquet types seen
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

    def _sample(self, bucket: list, x, seen: int) -> None:
        """Reservoir sampling: `bucket` stays a uniform sample of the `seen` values
        (seeded per column, so the same days give the same config)."""
        if len(bucket) < SAMPLE:
            bucket.append(x)
        else:
            j = self._rng.randrange(seen)
            if j < SAMPLE:
                bucket[j] = x

    def add(self, value, day: DayColumn) -> None:
        self.count += 1
        day.rows += 1
        t = type_of(value)
        self.types[t] += 1
        if t == "null":
            self.nulls += 1
            day.nulls += 1
            return
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
        elif t == "str":
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

    def day_values(self, column: str):
        """[(day name, DayColumn)] of one column (days where it is absent: empty)."""
        return [(d.name, d.columns.get(column, DayColumn())) for d in self.days]


def type_of(value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float, str, dict)):
        return type(value).__name__
    if isinstance(value, list):
        return "str_list" if all(isinstance(v, str) for v in value) else "list"
    return "other"


def delivered_days(raw_root: str | Path, n: int) -> list[Path]:
    """The newest `n` folders dt=YYYY-MM-DD with a `_SUCCESS` marker, oldest first."""
    from retrain.common import paths, spans
    root = Path(raw_root)
    if not root.is_dir():
        raise FileNotFoundError(f"raw root {root} does not exist or is not a folder")
    days = spans.delivered_days(root)
    if not days:
        raise FileNotFoundError(f"raw root {root} holds no delivered day (a folder "
                                "dt=YYYY-MM-DD with a _SUCCESS marker)")
    return [Path(paths.partition(root, d)) for d in days[-n:]]


def _parts(day_dir: Path) -> list[Path]:
    """The day's parts, checked like every reader's (`rawfiles.list_parts`: regular files
    inside the raw root, at most the default parts per day): no config exists yet."""
    from retrain.common import rawfiles
    return rawfiles.list_parts(day_dir, PARQUET + JSONL, day_dir.parent)


def _rows(part: Path, day: Day, arrow: dict):
    """Rows of one part as dicts; a line that is not a JSON object is counted, not read."""
    if part.name.endswith(PARQUET):
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


def profile(raw_root: str | Path, days: int = 7) -> Profile:
    """Read the newest `days` delivered days whole and profile every column."""
    columns: dict[str, Column] = {}
    out, formats, arrow, previous = [], set(), {}, set()
    for day_dir in delivered_days(raw_root, days):
        day = Day(name=day_dir.name)
        hashes: set = set()
        for part in _parts(day_dir):
            formats.add("parquet" if part.name.endswith(PARQUET) else "jsonl")
            for row in _rows(part, day, arrow):
                day.rows += 1
                h = hash(json.dumps(row, sort_keys=True, default=str))
                day.duplicate_rows += h in hashes
                hashes.add(h)
                for name in [*row, *(c for c in columns if c not in row)]:
                    col = columns.setdefault(name, Column(name))
                    col.add(row.get(name), day.columns.setdefault(name, DayColumn()))
        day.overlap_previous = len(hashes & previous) / len(hashes) if hashes else 0.0
        previous = hashes
        for c in day.columns.values():
            c.text_hashes = set()        # only the count is kept
        out.append(day)
    for name, types in arrow.items():
        columns.setdefault(name, Column(name)).arrow |= types
    return Profile(raw_root=str(raw_root), days=out, columns=columns, formats=formats)


# ------------------------------------------------------------------------ YAML out

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "none", "~"}


def scalar(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        text = f"{v:.6f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    v = str(v)
    return v if _PLAIN.match(v) and v.lower() not in _YAML_WORDS else json.dumps(v)


def _comment(text: str) -> str:
    return "  # " + " ".join(str(text).split()) if text else ""


def render(doc, indent: int = 0) -> list[str]:
    """YAML lines of a dict whose leaves may be (value, comment) tuples; keys starting
    with "#" are comment lines. Lists of scalars go in flow style."""
    pad, lines = "  " * indent, []
    for key, value in doc.items():
        if str(key).startswith("#"):
            lines += [f"{pad}# {line}" for line in str(value).splitlines()]
            continue
        comment = ""
        if isinstance(value, tuple):
            value, comment = value
        head = f"{pad}{scalar(key)}:"
        if isinstance(value, dict) and value:
            lines += [head + _comment(comment), *render(value, indent + 1)]
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(head + _comment(comment))
            for item in value:
                sub = render(item, indent + 2)
                lines += [f"{pad}  - {sub[0].lstrip()}", *sub[1:]]
        elif isinstance(value, (list, dict)):
            flow = "{}" if isinstance(value, dict) else \
                "[" + ", ".join(scalar(x) for x in value) + "]"
            lines.append(f"{head} {flow}{_comment(comment)}")
        else:
            lines.append(f"{head} {scalar(value)}{_comment(comment)}")
    return lines


# ------------------------------------------------------------------------ the command

def choose_family(prof: Profile, given: str | None) -> tuple[str, str]:
    """(family, why): the one given, else the one family whose claim fits the data."""
    if given:
        return given, "--family"
    claims = {f: importlib.import_module(m).claim(prof) for f, m in FAMILIES.items()}
    fitting = {f: why for f, why in claims.items() if why}
    if len(fitting) != 1:
        raise ValueError(f"cannot guess the family of the data under {prof.raw_root} "
                         f"({'both fit' if fitting else 'none fits'}): give --family "
                         f"{'|'.join(FAMILIES)}")
    return next(iter(fitting.items()))


def suggest(raw_root: str, family: str | None = None, days: int = 7, *,
            label: str | None = None, text: str | None = None,
            id_column: str | None = None) -> tuple[str, str, list[str]]:
    """(YAML text, family, notes): the config, checked by the family's own loader."""
    if days < 1:
        raise ValueError(f"--days must be at least 1, got {days}")
    prof = profile(raw_root, days)
    if not any(d.rows for d in prof.days):
        skipped = sum(d.rejected for d in prof.days)
        raise ValueError(f"the days read under {raw_root} hold no rows" + (
            f": {skipped} line(s) of their JSONL parts are not JSON objects" if skipped else ""))
    for given, flag in ((label, "--label"), (text, "--text"), (id_column, "--id")):
        if given is not None and given not in prof.columns:
            raise ValueError(f"{flag}: no such column in the days read under {raw_root}")
    family, why = choose_family(prof, family)
    module = importlib.import_module(FAMILIES[family])
    doc, notes = module.suggest(prof, label=label, text=text, id_column=id_column)
    read = f"{prof.days[0].name} .. {prof.days[-1].name}" if len(prof.days) > 1 \
        else prof.days[0].name
    header = [f"# Suggested by `retrain config suggest` from {len(prof.days)} day(s) under "
              f"{raw_root} ({read}).",
              f"# Family: {family}: {why}.",
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
    return yaml_text, family, [f"family: {family} ({why})", *notes]


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
        "suggest", help="write a starting config from a few days of your partitions",
        description="Read the newest delivered days under --raw-root (dt=YYYY-MM-DD/ with "
                    "_SUCCESS and part-*.parquet|jsonl[.gz]) and write a starting family "
                    "config: columns, types, features or tasks, validation bounds fitted "
                    "to those days, a comment on every value saying where it came from. "
                    "The result is checked with the family's own loader before it is "
                    "written. Guesses are printed to stderr; correct them with the options.")
    s.add_argument("--raw-root", required=True, help="folder holding dt=YYYY-MM-DD/ days")
    s.add_argument("--family", choices=sorted(FAMILIES), default=None,
                   help="ctr or text (default: guessed from the columns, and said why)")
    s.add_argument("--days", type=int, default=7,
                   help="read the newest N delivered days (default 7)")
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
