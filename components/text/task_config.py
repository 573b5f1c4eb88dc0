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

The file's shape is a pydantic model (`TextConfigFile`; its JSON schema is in the manual,
docs/reference/text-config.schema.json); the runtime objects are the dataclasses below,
whose settings sections (`Validation`, `Gate`) are pydantic dataclasses, checked again on
`dataclasses.replace`. Stdlib + PyYAML + pydantic (parsed in the steps; the DAG only passes
the path on). Errors name, never echo (rule 22): the file, the key and its place, the rule
and the expected type (`components.config_errors`); a value only if it is a number out of
bounds or a short word where a name or a choice goes; a syntax error only its line and
column (`retrain.common.run_inputs`).
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
from typing import Annotated, Any, Literal

import pydantic
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError,
                      ValidationInfo, field_validator)

from components.config_errors import place_in, problems, rule
from retrain.common.errors import ConfigError
from retrain.common.record_limits import DEFAULT_MAX_PARTS_PER_DAY, RecordLimits
from retrain.common.run_inputs import read_config_file, what, word_text, words_text

PACKAGED_DIR = Path(__file__).resolve().parent / "configs"
DEFAULT_CONFIG = PACKAGED_DIR / "reviews.yaml"
CONFIG_FILE = "text_config.json"          # the resolved config, written beside artifacts
UNLABELLED = -1
CLASS_WEIGHTING = ("balanced", "sqrt", "none")
DEFAULT_EPOCHS = 3        # fine-tune passes at most, unless the config says (reviews-demo: 2)
# Names the preprocessed records use for their own fields: a task may not take them.
RESERVED = ("example_id", "text", "span", "split")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# A number in exponent form without a dot (`5e-3`), which PyYAML's YAML 1.1 reads as text.
_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _exponent(value):
    """YAML 1.1 reads 5e-3 as text; the user meant 0.005."""
    if isinstance(value, str) and _EXPONENT.fullmatch(value.strip()):
        return float(value)
    return value


# The value types of the settings: strict (a string or true is never read as a number).
Count = Annotated[int, Field(strict=True, ge=0)]
Amount = Annotated[float, BeforeValidator(_exponent),
                   Field(strict=True, ge=0, allow_inf_nan=False)]
Share = Annotated[float, BeforeValidator(_exponent),         # of rows or pieces: at most 1
                  Field(strict=True, ge=0, le=1, allow_inf_nan=False)]
Flag = Annotated[bool, Field(strict=True)]
_SETTINGS = ConfigDict(extra="forbid", validate_default=True)


def _min_below_max(cls, value, info: ValidationInfo):
    """A `max_` key's validator: its `min_` key may not lie above it."""
    low = "min_" + info.field_name[4:]
    if info.data.get(low) is not None and value is not None and info.data[low] > value:
        raise rule(f"{info.data[low]!r} is above {info.field_name} {value!r}", at=low)
    return value


@pydantic.dataclasses.dataclass(frozen=True, config=_SETTINGS)
class Validation:
    """Per-dataset rules of the text validation gate (bounds are inclusive)."""

    min_rows: Count = 50
    max_rows: Count = 10_000_000
    min_chars: Count = 2
    max_chars: Count = 20_000
    min_median_chars: Count = 10
    max_median_chars: Count = 5_000
    max_unlabelled_rate: Share = 0.5      # per task: share of rows without its label
    max_class_share: Share = 0.95         # per task: largest class's share of labelled rows
    max_duplicate_rate: Share = 0.2
    unknown_token_warn: Share = 0.05      # checkpoint tokenizer's [UNK] share of the pieces
    unknown_token_fail: Share = 0.25
    unknown_token_sample: Count = 2000    # texts of the span the [UNK] rate is measured on
    # Share of rows whose text holds control characters, U+FFFD or lone surrogates (the
    # encoding rule); preprocessing drops them, counted. A real scrape has a few.
    max_bad_encoding_rate: Share = 0.001
    # What one part and one record may hold (retrain.common.record_limits). A day of
    # text is read whole, so a part's limit is lower than the CTR logs'.
    max_part_bytes: Count = 256 << 20       # decompressed, per part
    max_value_bytes: Count = 1 << 20        # per string (a text may be a long document)
    max_depth: Count = 32                   # nesting of a record
    max_parts_per_day: Count = DEFAULT_MAX_PARTS_PER_DAY   # part files of a day

    _ranges = field_validator("max_rows", "max_chars", "max_median_chars")(
        classmethod(_min_below_max))

    def record_limits(self) -> RecordLimits:
        return RecordLimits(self.max_part_bytes, self.max_value_bytes, self.max_depth,
                            self.max_parts_per_day)


@pydantic.dataclasses.dataclass(frozen=True, config=_SETTINGS)
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

    min_auc: Amount = 0.6                 # mean over tasks of the macro one-vs-rest AUC
    max_auc_drop: Amount = 0.005
    max_log_loss_increase: Amount = 0.02
    max_task_auc_drop: Amount = 0.02      # per task, against the published model
    min_task_rows: Count = 20
    beat_classical_baseline: Flag = True  # macro-F1 >= TF-IDF + logistic regression's
    classical_baseline_margin: Amount = 0.0
    min_eval_rows: Count = 200            # per task: labelled eval texts
    min_eval_positives: Count = 5         # per class of every task: its eval texts
    refuse_confidently_worse: Flag = True


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
    epochs: int = DEFAULT_EPOCHS                  # the fine-tune's most; early stopping may end it
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
        if d["epochs"] == DEFAULT_EPOCHS:   # the default: configs keep their fingerprint
            del d["epochs"]
        return d


def _name(value):
    if not isinstance(value, str) or not _NAME.match(value) or value in RESERVED:
        raise rule(f"task name must match {_NAME.pattern} and not be one of {list(RESERVED)}")
    return value


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


TaskName = Annotated[str, BeforeValidator(_name)]
Limit = Share | None
_FILE = ConfigDict(extra="forbid", frozen=True)


class TaskFile(BaseModel):
    """One task as the file states it (its name is its key under `tasks`)."""
    model_config = _FILE

    label_column: str | None = Field(None, description="the column holding the label "
                                     "(default: the task's name)")
    labels: list[str] = Field(description="the label names, at least 2, in the model's "
                              "order (integers are read as their text)")
    thresholds: list[float] | None = Field(None, description="numeric label column: label "
                                           "i if value <= thresholds[i], one cut per label "
                                           "but the last, increasing")
    positive: str | None = Field(None, description="binary tasks: the positive class "
                                 "(default: the second label)")
    min_macro_f1: Limit = None
    max_macro_f1_drop: Limit = None
    description: str = ""

    @field_validator("label_column", mode="before")
    @classmethod
    def _column(cls, value):
        if value is not None and (not isinstance(value, str) or not value):
            raise rule(f"must be a column name, got {what(value)}")
        return value

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, value):
        if isinstance(value, list) and any(isinstance(x, bool) for x in value):
            at = [i for i, x in enumerate(value) if isinstance(x, bool)]
            raise rule(f"item(s) {at} are booleans: YAML reads unquoted yes/no/true/false "
                       "as booleans; quote the label names")
        if not isinstance(value, list) or len(value) < 2 \
                or not all(isinstance(x, (str, int)) for x in value):
            raise rule(f"must list at least 2 label names, got {what(value)}")
        labels = [str(x) for x in value]
        if len(set(labels)) != len(labels):
            repeated = sorted({x for x in labels if labels.count(x) > 1})
            raise rule(f"repeats a label: {words_text(repeated)}")
        return labels

    @field_validator("thresholds", mode="before")
    @classmethod
    def _thresholds(cls, value, info: ValidationInfo):
        labels = info.data.get("labels")
        if value is None or labels is None:
            return value
        if not isinstance(value, list) or not all(_number(x) for x in value) \
                or len(value) != len(labels) - 1 or sorted(value) != value:
            raise rule(f"must be {len(labels) - 1} increasing numbers (one cut per label but "
                       f"the last), got {what(value)}")
        return [float(x) for x in value]

    @field_validator("positive", mode="before")
    @classmethod
    def _positive(cls, value, info: ValidationInfo):
        labels = info.data.get("labels")
        if value is None or labels is None:
            return value
        if len(labels) != 2 or str(value) not in labels:
            raise rule(f"names the positive class of a 2-label task, got {word_text(value)} "
                       f"for labels {words_text(labels)}")
        return str(value)


def _settings(value):
    return {} if value is None else value      # an empty section: the defaults


class TextConfigFile(BaseModel):
    """A text config file as written (YAML or JSON): the schema the manual shows."""
    model_config = ConfigDict(extra="forbid", frozen=True,
                              title="Text family config (text_config.yaml)")

    description: str = ""
    example_id: str | None = Field(None, description="the column with each record's "
                                   "unique id; left out: ids are derived from the content")
    text: str | None = Field(None, description="the column holding the text (or give "
                             "text_template)")
    text_template: str | None = Field(None, description="the text from several columns, "
                                      "e.g. '{title}. {body}'")
    tasks: dict[TaskName, TaskFile] = Field(None, validate_default=True, description=(
        "task name -> its label column and labels; each task is one head of the model"))
    checkpoint: str | None = Field(None, description="a Hugging Face-format BERT folder; "
                                   "left out: the bundled all-MiniLM-L6-v2")
    max_seq_length: Annotated[int, Field(strict=True, ge=8, le=512)] = 128
    bucket_boundaries: list[Annotated[int, Field(strict=True, gt=0)]] = [16, 32, 48, 64, 96]
    class_weighting: Literal[CLASS_WEIGHTING] = "balanced"
    epochs: Annotated[int, Field(strict=True, ge=1, le=50)] = Field(DEFAULT_EPOCHS, description=(
        "passes over the window's training texts at most (early stopping on the eval "
        "split may end the fine-tune sooner); the DAG form's epochs overrides it for a run"))
    validation: Annotated[Validation, BeforeValidator(_settings)] = Validation()
    gate: Annotated[Gate, BeforeValidator(_settings)] = Gate()

    @field_validator("example_id", mode="before")
    @classmethod
    def _id(cls, value):
        if value is not None and (not isinstance(value, str) or not value):
            raise rule(f"must name the column with each record's unique id (or be left out: "
                       f"ids are then derived from the text and labels), got {what(value)}")
        return value

    @field_validator("text", mode="before")
    @classmethod
    def _text(cls, value):
        if value is not None and (not isinstance(value, str) or not value):
            raise rule(f"must be a column name, got {what(value)}")
        return value

    @field_validator("text_template", mode="before")
    @classmethod
    def _template(cls, value, info: ValidationInfo):
        if "text" in info.data and (info.data["text"] is None) == (value is None):
            raise rule("give exactly one of text (a column) or text_template "
                       "(e.g. '{title}. {body}')", at="text")
        if value is None:
            return value
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(str(value)) if f]
        except ValueError:
            raise rule("is not a valid template (an unmatched { or }?)") from None
        if not fields:
            raise rule("must name at least one column as {column}")
        return str(value)

    @field_validator("tasks", mode="before")
    @classmethod
    def _tasks(cls, value):
        if not isinstance(value, dict) or not value:
            raise rule("must map at least one task name to its label_column and labels")
        return value

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint(cls, value):
        if value is not None and (not (Path(value) / "vocab.txt").is_file()
                                  or not (Path(value) / "config.json").is_file()):
            raise rule("the folder it names is not a Hugging Face-format BERT folder (needs "
                       "config.json, vocab.txt, model.safetensors)")
        return value

    @field_validator("bucket_boundaries")
    @classmethod
    def _buckets(cls, value):
        if sorted(set(value)) != value:
            raise rule("must be increasing positive integers")
        return value


def from_dict(data: Any, source: str = "") -> TextConfig:
    """Validate a parsed config; ConfigError lists every problem with its place."""
    if not isinstance(data, dict):
        raise ConfigError(f"text config {source}: must be a mapping, got {type(data).__name__}")
    try:
        raw = TextConfigFile.model_validate(data)
    except ValidationError as e:
        found = problems(e, TextConfigFile, place_in(data))
        raise ConfigError(f"text config {source or '(text)'} has {len(found)} problem(s):\n  "
                          + "\n  ".join(found)) from None
    tasks = tuple(Task(name=name, label_column=t.label_column or name, labels=tuple(t.labels),
                       thresholds=None if t.thresholds is None else tuple(t.thresholds),
                       positive=t.positive, min_macro_f1=t.min_macro_f1,
                       max_macro_f1_drop=t.max_macro_f1_drop)
                  for name, t in raw.tasks.items())
    return TextConfig(source=source, example_id=raw.example_id, text=raw.text,
                      text_template=raw.text_template, tasks=tasks, checkpoint=raw.checkpoint,
                      max_seq_length=raw.max_seq_length,
                      bucket_boundaries=tuple(raw.bucket_boundaries),
                      class_weighting=raw.class_weighting, epochs=raw.epochs,
                      validation=raw.validation,
                      gate=raw.gate)


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
