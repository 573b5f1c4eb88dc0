"""The text family's config file: which column holds the text, which tasks to learn, their
labels, the checkpoint, and the dataset's validation and gate settings.

Everything specific to a corpus lives here (rule 14), so a user brings their own data with a
file of about ten lines and never edits code. The bundled reviews are one such file
(`configs/reviews.yaml`, the default). Every problem in a file is reported at once, each
with its place (`tasks.sentiment.labels: ...`), as the CTR feature config does.

    example_id: ticket_id          # unique per record; omitted: derived (TextConfig.id_of)
    text: body                     # or text_template: "{subject}. {body}"
    tasks:
      queue:                       # one or more; each becomes one head of the model
        label_column: queue
        labels: [billing, outage, account]
      urgent:                      # derived from a numeric column: value <= 2 -> "no"
        label_column: priority
        labels: [no, yes]
        thresholds: [2]

Stdlib + PyYAML only (parsed in the steps; the DAG only passes the path on). Errors name,
never echo (rule 22): the file, the key and its place, the rule; a value only if it is a
number out of bounds or a short word where a name or a choice goes; a syntax error only
its line and column (`retrain.common.run_inputs`).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import re
import string
from pathlib import Path
from typing import Any

from retrain.common.errors import ConfigError
from retrain.common.record_limits import DEFAULT_MAX_PARTS_PER_DAY, RecordLimits
from retrain.common.run_inputs import (key_text, number_text, read_config_file, what,
                                          word_text, words_text)

PACKAGED_DIR = Path(__file__).resolve().parent / "configs"
DEFAULT_CONFIG = PACKAGED_DIR / "reviews.yaml"
CONFIG_FILE = "text_config.json"          # the resolved config, written beside artifacts
UNLABELLED = -1
CLASS_WEIGHTING = ("balanced", "sqrt", "none")
# Names the preprocessed records use for their own fields: a task may not take them.
RESERVED = ("example_id", "text", "span", "split")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_TOP_KEYS = {"example_id", "text", "text_template", "tasks", "checkpoint", "max_seq_length",
             "bucket_boundaries", "class_weighting", "validation", "gate", "description"}
_TASK_KEYS = {"label_column", "labels", "thresholds", "positive", "min_macro_f1",
              "max_macro_f1_drop", "description"}


# A number in exponent form without a dot (`5e-3`), which PyYAML's YAML 1.1 reads as text.
_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
# Keys whose value is a share of rows or pieces: at most 1.
_SHARE_SUFFIXES = ("_rate", "_share", "unknown_token_warn", "unknown_token_fail")


@dataclasses.dataclass(frozen=True)
class Validation:
    """Per-dataset rules of the text validation gate (bounds are inclusive)."""

    min_rows: int = 50
    max_rows: int = 10_000_000
    min_chars: int = 2
    max_chars: int = 20_000
    min_median_chars: int = 10
    max_median_chars: int = 5_000
    max_unlabelled_rate: float = 0.5      # per task: share of rows without its label
    max_class_share: float = 0.95         # per task: largest class's share of labelled rows
    max_duplicate_rate: float = 0.2
    unknown_token_warn: float = 0.05      # checkpoint tokenizer's [UNK] share of the pieces
    unknown_token_fail: float = 0.25
    unknown_token_sample: int = 2000      # texts of the span the [UNK] rate is measured on
    # Share of rows whose text holds control characters, U+FFFD or lone surrogates (the
    # encoding rule); preprocessing drops them, counted. A real scrape has a few.
    max_bad_encoding_rate: float = 0.001
    # What one part and one record may hold (retrain.common.record_limits). A day of
    # text is read whole, so a part's limit is lower than the CTR logs'.
    max_part_bytes: int = 256 << 20       # decompressed, per part
    max_value_bytes: int = 1 << 20        # per string (a text may be a long document)
    max_depth: int = 32                   # nesting of a record
    max_parts_per_day: int = DEFAULT_MAX_PARTS_PER_DAY   # part files of a day

    def record_limits(self) -> RecordLimits:
        return RecordLimits(self.max_part_bytes, self.max_value_bytes, self.max_depth,
                            self.max_parts_per_day)


@dataclasses.dataclass(frozen=True)
class Gate:
    """Family-wide gate settings; per-task macro-F1 limits sit on each task.

    Evidence (rule 21), per task: `min_eval_rows` labelled eval texts, and
    `min_eval_positives` eval texts of *each* class of the task (a class's "positives";
    both classes of a binary task). Below either the gate does not bless, naming the task,
    the class and the counts; 0 switches the rule off. Why 200 and 5: a macro-F1's 95 %
    interval is about ±0.02 on the bundled reviews' 2,785 held-out texts (README,
    Performance) and widens as 1/sqrt(rows), to about ±0.07-0.09 at 200, already wider
    than any difference the gate is asked to judge; and one class's F1 is 1/k of
    macro-F1, so a class seen 3 times moves the headline by several points on the luck
    of one text. A real daily feed passes: the
    bundled reviews' default run (3 days of about 3,350 reviews, 20 % held out, 2 x 200
    dev texts) scores about 1,600 texts, and its rarest class (topic Trend, 0.5 % of the
    reviews) about 8.

    `refuse_confidently_worse`: never bless a candidate whose paired bootstrap interval of
    a task's macro-F1 difference to the published model lies wholly below 0 (as the CTR
    gate's `Thresholds.refuse_confidently_worse`).
    """

    min_auc: float = 0.6                  # mean over tasks of the macro one-vs-rest AUC
    max_auc_drop: float = 0.005
    max_log_loss_increase: float = 0.02
    max_task_auc_drop: float = 0.02       # per task, against the published model
    min_task_rows: int = 20
    beat_classical_baseline: bool = True  # macro-F1 >= TF-IDF + logistic regression's
    classical_baseline_margin: float = 0.0
    min_eval_rows: int = 200              # per task: labelled eval texts
    min_eval_positives: int = 5           # per class of every task: its eval texts
    refuse_confidently_worse: bool = True


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    label_column: str
    labels: tuple[str, ...]
    thresholds: tuple[float, ...] | None = None   # numeric column: label i if value <= t_i
    positive: str | None = None                   # binary tasks: the positive class
    min_macro_f1: float | None = None
    max_macro_f1_drop: float | None = None

    @property
    def binary(self) -> bool:
        return len(self.labels) == 2

    @property
    def positive_index(self) -> int | None:
        return self.labels.index(self.positive or self.labels[1]) if self.binary else None

    def label_of(self, raw: Any) -> str | None:
        """The label name of a raw value (None: not labelled); ValueError if unknown."""
        if raw is None or (isinstance(raw, float) and math.isnan(raw)) or raw == "":
            return None
        if self.thresholds is None:
            label = str(raw)
            if label not in self.labels:
                # the record's value is not shown (rule 22): a label column may hold text
                raise ValueError(f"{self.name}: a {self.label_column} value is not one of "
                                 f"the labels {words_text(self.labels)}")
            return label
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{self.name}: a {self.label_column} value is not a number "
                             f"(it holds {what(raw)})") from None
        if math.isnan(value):
            return None
        for label, cut in zip(self.labels, self.thresholds):
            if value <= cut:
                return label
        return self.labels[-1]

    def index_of(self, raw: Any) -> int:
        label = self.label_of(raw)
        return UNLABELLED if label is None else self.labels.index(label)


@dataclasses.dataclass(frozen=True)
class TextConfig:
    source: str
    example_id: str | None                        # None: derived from the record (id_of)
    text: str | None
    text_template: str | None
    tasks: tuple[Task, ...]
    checkpoint: str | None = None                 # None: the bundled all-MiniLM-L6-v2
    max_seq_length: int = 128
    bucket_boundaries: tuple[int, ...] = (16, 32, 48, 64, 96)
    class_weighting: str = "balanced"
    validation: Validation = Validation()
    gate: Gate = Gate()

    @property
    def task_labels(self) -> dict[str, list[str]]:
        """{task: labels}: the model's heads, in order (what labels.json records)."""
        return {t.name: list(t.labels) for t in self.tasks}

    def task(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(f"no task {name!r} (tasks: {[t.name for t in self.tasks]})")

    def text_columns(self) -> list[str]:
        if self.text_template is None:
            return [self.text]
        return [f for _, f, _, _ in string.Formatter().parse(self.text_template) if f]

    def raw_columns(self) -> list[str]:
        """Every raw column a record needs (id, text parts, label columns), in order."""
        cols = [*([self.example_id] if self.example_id else []), *self.content_columns()]
        return list(dict.fromkeys(cols))

    def content_columns(self) -> list[str]:
        """The columns a record's content is read from: text parts, then label columns."""
        return list(dict.fromkeys([*self.text_columns(),
                                   *(t.label_column for t in self.tasks)]))

    def id_of(self, row: dict) -> str | None:
        """The record's id: the `example_id` column's value as text (integer ids too), or,
        when the config names no id column, a hash of the record's content columns. A
        derived id is stable across reloads, and exact repeats (same text, same labels)
        share it: validation counts them as duplicates and keeps the first, so a repeated
        record can never sit in both the train and the eval split."""
        if self.example_id:
            value = row.get(self.example_id)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                # as the CTR readers: 1.0 and 1 would be one id, 1.5 a made-up one
                raise ValueError(f"example_id column {self.example_id!r} holds a "
                                 f"{type(value).__name__}: ids are text or integers")
            return str(value)
        content = json.dumps([row.get(c) for c in self.content_columns()],
                             ensure_ascii=False, default=str, separators=(",", ":"))
        return "h" + hashlib.sha256(content.encode("utf-8")).hexdigest()[:24]

    def text_of(self, row: dict) -> str:
        if self.text_template is None:
            value = row.get(self.text)
            return "" if value is None else str(value)
        parts = {c: "" if row.get(c) is None else str(row.get(c)) for c in self.text_columns()}
        return self.text_template.format(**parts)

    def checkpoint_dir(self) -> str:
        if self.checkpoint:
            return self.checkpoint
        from components.text.config import default_checkpoint_dir
        return default_checkpoint_dir()

    def to_dict(self) -> dict:
        d = json.loads(json.dumps(dataclasses.asdict(self)))   # tuples -> lists
        d["tasks"] = {t.pop("name"): t for t in d["tasks"]}
        d.pop("source")
        return d


class _Problems(list):
    def add(self, where: str, what: str) -> None:
        self.append(f"{where}: {what}")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def _fill(cls, raw, where: str, problems: _Problems):
    """A dataclass of settings from a mapping: unknown keys and wrong types reported."""
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        problems.add(where, f"must be a mapping, got {what(raw)}")
        return cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in raw.items():
        if key not in fields:
            problems.add(f"{where}.{key_text(key)}", f"unknown key (allowed: {', '.join(fields)})")
            continue
        default = fields[key].default
        if isinstance(value, str) and _EXPONENT.fullmatch(value.strip()) \
                and isinstance(default, float):
            value = float(value)   # YAML 1.1 reads 5e-3 as text; the user meant 0.005
        if isinstance(default, bool):
            ok = isinstance(value, bool)
            expected = "true or false"
        elif isinstance(default, int) or key.startswith(("min_rows", "max_rows")):
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            expected = "an integer >= 0"
        else:
            ok = (value is None and default is None) or (_number(value) and value >= 0)
            expected = f"a number >= 0{' or null' if default is None else ''}"
        if not ok:
            # a number of the right kind out of range is shown; anything else by its type
            shown = (number_text(value) if not isinstance(default, bool) and _number(value)
                     else what(value))
            problems.add(f"{where}.{key}", f"must be {expected}, got {shown}")
            continue
        if key.endswith(_SHARE_SUFFIXES) and value is not None and value > 1:
            problems.add(f"{where}.{key}", f"is a share: must be in [0, 1], got "
                                           f"{number_text(value)}")
            continue
        values[key] = value
    merged = {f: values.get(f, fields[f].default) for f in fields}
    for key in fields:
        other = "max_" + key[4:]
        if key.startswith("min_") and other in fields and (key in values or other in values) \
                and merged[key] is not None and merged[other] is not None \
                and merged[key] > merged[other]:
            problems.add(f"{where}.{key}", f"{merged[key]!r} is above {other} {merged[other]!r}")
    return cls(**values)


def _parse_task(name, raw, problems: _Problems) -> Task | None:
    where = f"tasks.{key_text(name)}"
    if not isinstance(name, str) or not _NAME.match(name) or name in RESERVED:
        problems.add(where, f"task name must match {_NAME.pattern} and not be one of "
                            f"{list(RESERVED)}")
        return None
    if not isinstance(raw, dict):
        problems.add(where, f"must be a mapping with label_column and labels, got {what(raw)}")
        return None
    for key in sorted(set(raw) - _TASK_KEYS, key=str):
        problems.add(f"{where}.{key_text(key)}",
                     f"unknown key (allowed: {', '.join(sorted(_TASK_KEYS))})")
    column = raw.get("label_column", name)
    if not isinstance(column, str) or not column:
        problems.add(f"{where}.label_column", f"must be a column name, got {what(column)}")
    labels = raw.get("labels")
    if isinstance(labels, list) and any(isinstance(x, bool) for x in labels):
        at = [i for i, x in enumerate(labels) if isinstance(x, bool)]
        problems.add(f"{where}.labels", f"item(s) {at} are booleans: YAML reads unquoted "
                                        "yes/no/true/false as booleans; quote the label names")
        return None
    if not isinstance(labels, list) or len(labels) < 2 \
            or not all(isinstance(x, (str, int)) for x in labels):
        problems.add(f"{where}.labels", f"must list at least 2 label names, got {what(labels)}")
        return None
    labels = tuple(str(x) for x in labels)
    if len(set(labels)) != len(labels):
        repeated = sorted({x for x in labels if labels.count(x) > 1})
        problems.add(f"{where}.labels", f"repeats a label: {words_text(repeated)}")
    thresholds = raw.get("thresholds")
    if thresholds is not None:
        if not isinstance(thresholds, list) or not all(_number(x) for x in thresholds) \
                or len(thresholds) != len(labels) - 1 or sorted(thresholds) != thresholds:
            problems.add(f"{where}.thresholds", f"must be {len(labels) - 1} increasing numbers "
                         f"(one cut per label but the last), got {what(thresholds)}")
            thresholds = None
        else:
            thresholds = tuple(float(x) for x in thresholds)
    positive = raw.get("positive")
    if positive is not None and (len(labels) != 2 or str(positive) not in labels):
        problems.add(f"{where}.positive", f"names the positive class of a 2-label task, "
                     f"got {word_text(positive)} for labels {words_text(labels)}")
        positive = None
    limits = {}
    for key in ("min_macro_f1", "max_macro_f1_drop"):
        value = raw.get(key)
        if value is not None and not (_number(value) and 0 <= value <= 1):
            problems.add(f"{where}.{key}", f"must be a number in [0, 1], got "
                                           f"{number_text(value)}")
            value = None
        limits[key] = value
    return Task(name=name, label_column=column, labels=labels, thresholds=thresholds,
                positive=None if positive is None else str(positive), **limits)


def from_dict(data: Any, source: str = "") -> TextConfig:
    """Validate a parsed config; ConfigError lists every problem with its place."""
    problems = _Problems()
    if not isinstance(data, dict):
        raise ConfigError(f"text config {source}: must be a mapping, got {type(data).__name__}")
    for key in sorted(set(data) - _TOP_KEYS, key=str):
        problems.add(key_text(key), f"unknown key (allowed: {', '.join(sorted(_TOP_KEYS))})")
    example_id = data.get("example_id")
    if example_id is not None and (not isinstance(example_id, str) or not example_id):
        problems.add("example_id", f"must name the column with each record's unique id "
                                   f"(or be left out: ids are then derived from the text "
                                   f"and labels), got {what(example_id)}")
    text, template = data.get("text"), data.get("text_template")
    if (text is None) == (template is None):
        problems.add("text", "give exactly one of text (a column) or text_template "
                             "(e.g. '{title}. {body}')")
    elif text is not None and (not isinstance(text, str) or not text):
        problems.add("text", f"must be a column name, got {what(text)}")
    elif template is not None:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(str(template)) if f]
        except ValueError:
            fields = None
            problems.add("text_template", "is not a valid template (an unmatched { or }?)")
        if fields == []:
            problems.add("text_template", "must name at least one column as {column}")
    tasks_raw = data.get("tasks")
    tasks: list[Task] = []
    if not isinstance(tasks_raw, dict) or not tasks_raw:
        problems.add("tasks", "must map at least one task name to its label_column and labels")
    else:
        tasks = [t for n, r in tasks_raw.items() if (t := _parse_task(n, r, problems))]
    checkpoint = data.get("checkpoint")
    if checkpoint is not None:
        if not isinstance(checkpoint, str):
            problems.add("checkpoint", f"must be a folder path, got {what(checkpoint)}")
        elif not (Path(checkpoint) / "vocab.txt").is_file() \
                or not (Path(checkpoint) / "config.json").is_file():
            problems.add("checkpoint", "the folder it names is not a Hugging Face-format BERT "
                                       "folder (needs config.json, vocab.txt, "
                                       "model.safetensors)")
    seq = data.get("max_seq_length", 128)
    if not isinstance(seq, int) or isinstance(seq, bool) or not 8 <= seq <= 512:
        problems.add("max_seq_length", f"must be an integer in [8, 512], got "
                                       f"{number_text(seq) if isinstance(seq, int) else what(seq)}")
        seq = 128
    buckets = data.get("bucket_boundaries", [16, 32, 48, 64, 96])
    if not isinstance(buckets, list) or not all(isinstance(b, int) and b > 0 for b in buckets) \
            or sorted(set(buckets)) != buckets:
        problems.add("bucket_boundaries", f"must be increasing positive integers, got "
                                          f"{what(buckets)}")
        buckets = [16, 32, 48, 64, 96]
    weighting = data.get("class_weighting", "balanced")
    if not isinstance(weighting, str) or weighting not in CLASS_WEIGHTING:
        problems.add("class_weighting", f"must be one of {CLASS_WEIGHTING}, got "
                                        f"{word_text(weighting)}")
        weighting = "balanced"
    validation = _fill(Validation, data.get("validation"), "validation", problems)
    gate = _fill(Gate, data.get("gate"), "gate", problems)
    if problems:
        raise ConfigError(f"text config {source or '(text)'} has {len(problems)} problem(s):\n  "
                          + "\n  ".join(problems))
    return TextConfig(source=source, example_id=example_id, text=text,
                      text_template=None if template is None else str(template),
                      tasks=tuple(tasks), checkpoint=checkpoint, max_seq_length=seq,
                      bucket_boundaries=tuple(buckets), class_weighting=weighting,
                      validation=validation, gate=gate)


def load(path: str | Path) -> TextConfig:
    """Read a YAML or JSON text config file and validate it. No error quotes the file
    (rule 22): a syntax error names the line and column, a problem its key and place."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"text config {p} does not exist")
    data = read_config_file(p, "text config", as_json=False)   # YAML reads JSON too
    try:
        return from_dict(data if data is not None else {}, source=str(p))
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - a shape the checks did not foresee: not echoed
        raise ConfigError(f"text config {p}: its structure cannot be checked "
                          f"({type(e).__name__})") from None


@functools.lru_cache(maxsize=1)
def default() -> TextConfig:
    return load(DEFAULT_CONFIG)


def load_for(path: str | Path | None) -> TextConfig:
    """The config at `path`, or the bundled reviews' config for None / ""."""
    return default() if path in (None, "") else load(path)


def resolved(cfg: TextConfig) -> dict:
    """What a preprocess run writes beside its output so later steps (and later days) read
    the exact config the data was made with."""
    return {**cfg.to_dict(), "source": cfg.source}


def from_resolved(data: dict) -> TextConfig:
    data = dict(data)
    return from_dict({k: v for k, v in data.items() if k != "source"},
                     source=data.get("source", ""))
