"""The CTR feature config file's shape as pydantic models: what each key takes (types,
bounds, choices), per-entry rules (a transform's parameters), and the rules between
sections (a cross, a slice, a model option or a validation rule names a feature that
exists and has the right kind; no two outputs share a name).

`components.ctr.feature_config` validates a parsed file with `FeatureConfigFile` and builds
its runtime dataclasses from the result; docs/reference/feature-config.schema.json is this
model's JSON schema. The rules between sections run even when some entries are invalid
(on the entries that are valid), so one pass reports every problem of a file, each at its
place (`crosses[0] 'country_x_device'.features`), never quoting a value (rule 22,
`components.config_errors`). Stdlib + pydantic: DAG files can import it.
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError,
                      WithJsonSchema, field_validator, model_validator)

from components.config_errors import fail, rule
from retrain.common import record_limits
from retrain.common.run_inputs import number_text, what, word_text, words_text

# A seen-id filter (components/ctr/seen_filter.py) is a constant of the transform graph:
# 2^32 bits is 512 MB, well under protobuf's 2 GB limit on a graph.
SEEN_FILTER_MAX_BITS = 1 << 32
SEEN_FILTER_MIN_BITS = 1024
SEEN_FILTER_BITS_PER_ROW = 16


def default_seen_filter_bits(table_rows: int) -> int:
    """Filter bits for a field whose table has `table_rows` rows (before the new-id row):
    16 per row, whole bytes, within [1024, 2^32]. With as many ids as rows that is a
    false-positive rate of about 0.24 % (4 hashes); with 4x the ids about 16 %."""
    bits = -(-table_rows * SEEN_FILTER_BITS_PER_ROW // 8) * 8
    return min(SEEN_FILTER_MAX_BITS, max(SEEN_FILTER_MIN_BITS, bits))


KINDS: dict[str, tuple[str, ...]] = {
    "numeric": ("zscore", "log_zscore", "bucketize"),
    "categorical": ("vocabulary", "hash", "identity"),
    "multi_categorical": ("vocabulary", "hash"),
    "text": ("vocabulary", "hash"),
}
# Parameters each transform takes: name -> required?
TRANSFORM_PARAMS: dict[str, dict[str, bool]] = {
    "zscore": {},
    "log_zscore": {},
    "bucketize": {"buckets": True},
    "vocabulary": {"top_k": True, "frequency_threshold": False, "oov_buckets": False,
                   "new_id_row": False, "seen_filter_bits": False},
    "hash": {"hash_buckets": True, "new_id_row": False, "seen_filter_bits": False},
    "identity": {"size": True},
}
PARAM_MIN = {"buckets": 2, "top_k": 1, "frequency_threshold": 1, "oov_buckets": 1,
             "hash_buckets": 1, "size": 1, "max_values": 1,
             "seen_filter_bits": SEEN_FILTER_MIN_BITS}
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RAW_TYPES = ("str", "int", "float", "str_list")
# The id column of logs that have none: the config leaves `example_id` out, and readers
# add this column, a hash of the row's configured columns (`derived_ids`).
DERIVED_ID = "example_id"
# Span-level bounds of the validation gate and their defaults (the generated ad-click logs'
# values, also written out in feature_configs/generated.yaml). A rating log has a label
# rate of 0.5 and a few hundred rows a day: its config says so, no override needed.
THRESHOLDS = {
    "min_rows": 1000, "max_rows": 50_000_000,        # rows of the span
    "min_label_rate": 0.005, "max_label_rate": 0.2,  # share of positive labels
    "max_null_rate": 0.2,                            # per numeric feature
    "max_null_rate_increase": 0.05,                  # per numeric feature, vs previous span
    "max_duplicate_rate": 0.02,                      # share of duplicated example ids
    "max_rejected_rate": 0.001,                      # JSONL records the reader cannot use
    "max_previous_overlap": 0.01,                    # ids also in the previous span
    "max_row_ratio": 3.0,                            # rows within [avg / r, avg * r] of
    "history_days": 7,                               # ... the last history_days spans
    # What one part and one record may hold (retrain.common.record_limits): past
    # these a part is refused or a record rejected, as bad data, in bounded memory.
    "max_part_bytes": record_limits.DEFAULT_MAX_PART_BYTES,   # decompressed, per part
    "max_value_bytes": record_limits.DEFAULT_MAX_VALUE_BYTES,  # per string value
    "max_depth": record_limits.DEFAULT_MAX_DEPTH,              # nesting of a record
    "max_parts_per_day": record_limits.DEFAULT_MAX_PARTS_PER_DAY,  # part files of a day
}
INT_THRESHOLDS = ("min_rows", "max_rows", "history_days", "max_part_bytes",
                  "max_value_bytes", "max_depth", "max_parts_per_day")
SHARE_THRESHOLDS = ("min_label_rate", "max_label_rate", "max_null_rate",
                    "max_null_rate_increase", "max_duplicate_rate", "max_previous_overlap",
                    "max_rejected_rate")
DRIFT_METRICS = {"categorical": ("js", "linf"), "numeric": ("psi", "ks")}
MULTI_VALUED = ("multi_categorical", "text")


# ------------------------------------------------------------------------ value types

def _column(value):
    if not isinstance(value, str) or not NAME.match(value):
        raise rule(f"must be a column name matching {NAME.pattern}, got {word_text(value)}")
    return value


def _entry_name(value):
    if not isinstance(value, str) or not NAME.match(value):
        raise rule(f"must match {NAME.pattern}, got {word_text(value)}")
    return value


def _choice(what: str, choices):
    def check(value):
        if not isinstance(value, str) or value not in choices:
            raise rule(f"unknown {what} {word_text(value)} ({what}s: {', '.join(choices)})",
                       up=what in ("kind", "transform"))
        return value
    return BeforeValidator(check)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _amount(low: float, high: float | None = None, *, whole: bool = False,
            nullable: bool = False):
    """A number kept as written (an int stays an int: the fingerprint is of the file's
    values), within [low, high]."""
    words = ("a whole number" if whole else "a number") + (
        f" in [{low}, {high}]" if high is not None else f" >= {low}")
    words += " or null" if nullable else ""

    def check(value):
        if value is None and nullable:
            return value
        ok = isinstance(value, int) if whole else _number(value)
        if not ok or isinstance(value, bool) or value < low \
                or (high is not None and value > high):
            raise rule(f"must be {words}, got {number_text(value)}")
        return value
    schema: dict[str, Any] = {"type": "integer" if whole else "number", "minimum": low}
    if high is not None:
        schema["maximum"] = high
    if nullable:
        schema = {"anyOf": [schema, {"type": "null"}]}
    return Annotated[Any, BeforeValidator(check), WithJsonSchema(schema)]


def _empty(default):
    """A section left empty (`crosses:` with nothing after it) is its default."""
    return BeforeValidator(lambda value: default if value is None else value)


Column = Annotated[str, BeforeValidator(_column)]
EntryName = Annotated[str, BeforeValidator(_entry_name)]
Names = Annotated[list[Annotated[str, Field(strict=True)]], _empty([])]
Text = Annotated[str, Field(strict=True)]


def _param(key: str):
    return Annotated[int, Field(strict=True, ge=PARAM_MIN[key])] | None


_ENTRY = ConfigDict(extra="forbid", frozen=True)


# ------------------------------------------------------------------------ entries

class FeatureFile(BaseModel):
    """One raw column and its transform (the parameters it takes depend on both)."""
    model_config = _ENTRY

    name: EntryName
    kind: Annotated[Literal[tuple(KINDS)], _choice("kind", tuple(KINDS))]
    transform: Annotated[Literal[tuple(TRANSFORM_PARAMS)],
                         _choice("transform", tuple(TRANSFORM_PARAMS))]
    dtype: Literal["str", "int"] | None = Field(None, description="categorical only")
    top_k: _param("top_k") = None
    frequency_threshold: _param("frequency_threshold") = None
    oov_buckets: _param("oov_buckets") = None
    hash_buckets: _param("hash_buckets") = None
    size: _param("size") = None
    buckets: _param("buckets") = None
    max_values: _param("max_values") = Field(None, description="multi_categorical, text: "
                                             "the fixed padded length")
    new_id_row: bool | None = Field(None, strict=True, description="hash, vocabulary: ids "
                                    "the analysis window never saw take one row of their own")
    seen_filter_bits: _param("seen_filter_bits") = Field(
        None, description="with new_id_row: bits of the filter of the window's ids (a "
        "multiple of 8; default 16 per table row)")
    description: Text = ""

    @model_validator(mode="after")
    def _params(self):
        kind, transform = self.kind, self.transform
        if transform not in KINDS[kind]:
            fail("feature", [((), f"transform {transform!r} is not allowed for kind {kind!r} "
                                   f"(allowed: {', '.join(KINDS[kind])})")])
        params = dict(TRANSFORM_PARAMS[transform])
        if kind in MULTI_VALUED:
            params["max_values"] = True
        if kind == "categorical":
            params["dtype"] = False
        given = {k for k in self.model_fields_set if getattr(self, k) is not None} \
            - {"name", "kind", "transform", "description"}
        found = [((), f"unknown parameter {key!r} for {kind}/{transform} (allowed: "
                      f"{', '.join(sorted(params)) or 'none'})") for key in sorted(given - set(params))]
        found += [((), f"missing required parameter {key!r} for {transform}")
                  for key, required in params.items() if required and key not in given]
        if self.seen_filter_bits is not None and not self.new_id_row:
            found.append(((), "seen_filter_bits needs new_id_row: true"))
        if self.seen_filter_bits is not None and self.seen_filter_bits % 8:
            found.append(((), f"seen_filter_bits must be a multiple of 8, got "
                              f"{self.seen_filter_bits}"))
        if self.seen_filter_bits is not None and self.seen_filter_bits > SEEN_FILTER_MAX_BITS:
            found.append(((), f"seen_filter_bits must be at most {SEEN_FILTER_MAX_BITS} (the "
                              f"filter is a constant of the transform graph), got "
                              f"{self.seen_filter_bits}"))
        if self.new_id_row and kind != "categorical":
            found.append(((), f"new_id_row is for single-valued categorical features, not "
                              f"{kind}"))
        if transform == "identity" and self.dtype not in (None, "int"):
            found.append(((), "identity needs integer ids (dtype: int)"))
        fail("feature", found)
        return self


class CrossFile(BaseModel):
    """Hashed cross of the raw values of two or more categorical features."""
    model_config = _ENTRY

    name: EntryName
    features: Names = Field(description="two or more categorical features")
    hash_buckets: Annotated[int, Field(strict=True, ge=1)]
    description: Text = ""

    @field_validator("features")
    @classmethod
    def _members(cls, members):
        if len(members) < 2:
            raise rule(f"a cross needs at least 2 features, got {words_text(members)}")
        if len(set(members)) != len(members):
            raise rule(f"lists a feature twice: {words_text(members)}")
        return members


class EmbeddingFile(BaseModel):
    """One field's embedding into the MLP: width, initializer and prior strength (None:
    the trainer's embedding_init / embedding_l2)."""
    model_config = _ENTRY

    dim: _amount(1, 1024, whole=True)
    init: Literal["normal", "zeros"] | None = None
    l2: _amount(0, nullable=True) = None


class ModelFile(BaseModel):
    """Training defaults that name fields (categorical features or crosses)."""
    model_config = _ENTRY

    deep_fields: Names = []
    count_features: Names = []
    id_l2: Annotated[dict[str, _amount(0)], _empty({})] = {}
    fm_fields: Names = []
    embeddings: Annotated[dict[str, EmbeddingFile], _empty({})] = {}

    @field_validator("fm_fields")
    @classmethod
    def _pairs(cls, fm):
        if len(fm) == 1:
            raise rule(f"crosses pairs of fields: name two or more, got {words_text(fm)}")
        return fm


class DriftFile(BaseModel):
    model_config = _ENTRY

    metric: Literal["js", "linf", "psi", "ks"]
    max: _amount(0)
    severity: Literal["error", "warning"] = "warning"


def _range(bounds):
    if not isinstance(bounds, (list, tuple)) or len(bounds) != 2 \
            or not all(b is None or _number(b) for b in bounds) or list(bounds) == [None, None]:
        raise rule(f"must be [min, max] (numbers, one may be null), got {what(bounds)}")
    return list(bounds)


def _regex(value):
    if not isinstance(value, str):
        raise rule(f"must be a regular expression (a string), got {what(value)}")
    try:
        re.compile(value)
    except re.error as e:
        at = f" (error at position {e.pos})" if e.pos is not None else ""
        raise rule(f"is not a regular expression{at}") from None
    return value


def _values(value):
    if not isinstance(value, (list, tuple)) or not value:
        raise rule("must be a non-empty list")
    return list(value)


Range = Annotated[Any, BeforeValidator(_range), WithJsonSchema({
    "type": "array", "minItems": 2, "maxItems": 2,
    "items": {"anyOf": [{"type": "number"}, {"type": "null"}]}})]


class ThresholdsFile(BaseModel):
    """Span-level bounds, each overriding its default (THRESHOLDS)."""
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=False)

    min_rows: _amount(0, whole=True) = None
    max_rows: _amount(0, whole=True) = None
    min_label_rate: _amount(0, 1) = None
    max_label_rate: _amount(0, 1) = None
    max_null_rate: _amount(0, 1) = None
    max_null_rate_increase: _amount(0, 1) = None
    max_duplicate_rate: _amount(0, 1) = None
    max_rejected_rate: _amount(0, 1) = None
    max_previous_overlap: _amount(0, 1) = None
    max_row_ratio: _amount(1) = None
    history_days: _amount(1, whole=True) = None
    max_part_bytes: _amount(1, whole=True) = None
    max_value_bytes: _amount(1, whole=True) = None
    max_depth: _amount(1, whole=True) = None
    max_parts_per_day: _amount(1, whole=True) = None

    @model_validator(mode="wrap")
    @classmethod
    def _order(cls, data, handler):
        """A min_ above its max_ (given or default), beside any other problem."""
        errors: list[dict] = []
        try:
            out = handler(data)
        except ValidationError as e:
            errors, out = e.errors(), None
        given = data if isinstance(data, dict) else {}
        bad = {e["loc"][0] for e in errors if e["loc"]}
        merged = {k: given[k] if _number(given.get(k)) and k not in bad else v
                  for k, v in THRESHOLDS.items()}
        fail("thresholds", [((lo,), f"{merged[lo]} is above {hi} {merged[hi]}")
                            for lo, hi in (("min_rows", "max_rows"),
                                           ("min_label_rate", "max_label_rate"))
                            if merged[lo] > merged[hi]], errors)
        return out

    def given(self) -> dict:
        return {k: getattr(self, k) for k in self.model_fields_set
                if getattr(self, k) is not None}


class ValidationFile(BaseModel):
    """Data-validation rules beyond what the feature list implies (see Validation)."""
    model_config = _ENTRY

    thresholds: Annotated[ThresholdsFile, _empty({})] = ThresholdsFile()
    extra_columns: Annotated[dict[str, Literal["str", "int", "float"]], _empty({})] = {}
    ranges: Annotated[dict[str, Range], _empty({})] = {}
    allowed_values: Annotated[dict[str, Annotated[list, BeforeValidator(_values)]],
                              _empty({})] = {}
    patterns: Annotated[dict[str, Annotated[str, BeforeValidator(_regex)]], _empty({})] = {}
    drift: Annotated[dict[str, DriftFile], _empty({})] = {}


class GateFile(BaseModel):
    """The evidence the gate needs before it may bless, and whether it refuses a candidate
    confidently worse than the published model (GateDefaults)."""
    model_config = _ENTRY

    min_eval_rows: Annotated[int, Field(strict=True, ge=0)] = 200
    min_eval_positives: Annotated[int, Field(strict=True, ge=0)] = 20
    refuse_confidently_worse: bool = Field(
        True, strict=True, description="never bless a candidate whose paired 95 % interval "
        "of AUC or log loss lies wholly on the worse side of the published model, whatever "
        "the allowances (rules not_worse_auc / not_worse_log_loss); false leaves the "
        "change against the published model to max_auc_drop and max_log_loss_increase")


# ------------------------------------------------------------------------ the file

class FeatureConfigFile(BaseModel):
    """A CTR feature config file as written (YAML or JSON): the schema the manual shows."""
    model_config = ConfigDict(extra="forbid", frozen=True,
                              title="CTR feature config (feature_config.yaml)")

    name: Text = ""
    description: Text = ""
    label: Column = Field(description="the 0/1 label column")
    example_id: Column | None = Field(None, description="the id column; left out: each "
                                      f"row's id is a hash of its columns ({DERIVED_ID})")
    features: list[FeatureFile] = Field(description="the raw columns and their transforms")
    crosses: Annotated[list[CrossFile], _empty([])] = []
    slices: Names = Field([], description="categorical features evaluation is sliced by")
    model: Annotated[ModelFile, _empty({})] = ModelFile()
    validation: Annotated[ValidationFile, _empty({})] = ValidationFile()
    gate: Annotated[GateFile, _empty({})] = GateFile()

    @field_validator("features", mode="before")
    @classmethod
    def _some(cls, value):
        if not isinstance(value, list) or not value:
            raise rule("must be a non-empty list of features")
        return value

    @model_validator(mode="wrap")
    @classmethod
    def _everything(cls, data, handler):
        """The field checks, then the rules between sections on whatever entries are
        valid, all reported at once."""
        errors: list[dict] = []
        try:
            out = handler(data)
        except ValidationError as e:
            errors, out = e.errors(), None
        found = _references(data) if isinstance(data, dict) else []
        fail("feature config", found, errors)
        return out


def _valid(model, raw):
    try:
        return model.model_validate(raw)
    except (ValidationError, TypeError):
        return None


def _references(d: dict) -> list[tuple[tuple, str]]:
    """The rules between sections. An entry that is itself invalid is skipped where it is
    named elsewhere: its own problem is reported by the field checks."""
    found: list[tuple[tuple, str]] = []
    label, example_id = d.get("label"), d.get("example_id")
    example_id = DERIVED_ID if example_id is None else example_id
    if isinstance(label, str) and label == example_id:
        found.append((("example_id",), f"is the same column as the label "
                                       f"({word_text(label)})"))
    raw_features = d.get("features") if isinstance(d.get("features"), list) else []
    features = [(i, f) for i, r in enumerate(raw_features)
                if (f := _valid(FeatureFile, r)) is not None]
    by_name = {f.name: f for _, f in features}
    raw_names = {r.get("name") for r in raw_features
                 if isinstance(r, dict) and isinstance(r.get("name"), str)}
    seen: dict[str, str] = {}
    for i, raw in enumerate(raw_features):
        name = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(name, str):
            continue
        if name in seen:
            found.append((("features", i), f"duplicate name (also {seen[name]})"))
        elif name in (label, example_id):
            found.append((("features", i), f"clashes with the "
                                           f"{'label' if name == label else 'example_id'} column"))
        seen.setdefault(name, f"features[{i}]")

    raw_crosses = d.get("crosses") if isinstance(d.get("crosses"), list) else []
    crosses = []
    for i, raw in enumerate(raw_crosses):
        cross = _valid(CrossFile, raw)
        if cross is None:
            continue
        ok = True
        if cross.name in seen or cross.name in (label, example_id):
            found.append((("crosses", i), f"duplicate name (also "
                                          f"{seen.get(cross.name, 'label/example_id')})"))
            ok = False
        else:
            seen[cross.name] = f"crosses[{i}]"
        for m in cross.features:
            where = ("crosses", i, "features")
            if m in by_name:
                if by_name[m].kind != "categorical":
                    found.append((where, f"{word_text(m)} is {by_name[m].kind}, only "
                                         f"categorical features can be crossed"))
                    ok = False
            elif m in raw_names:
                ok = False      # the feature itself is invalid and reported
            elif seen.get(m, "").startswith("crosses"):
                found.append((where, f"{word_text(m)} is a cross; only categorical features "
                                     f"can be crossed"))
                ok = False
            else:
                found.append((where, f"unknown feature {word_text(m)}"))
                ok = False
        if ok:
            crosses.append((i, cross))

    slices = d.get("slices") if isinstance(d.get("slices"), list) else []
    for i, s in enumerate(slices):
        if not isinstance(s, str):
            continue                    # not a name: the field checks say so
        f = by_name.get(s)
        if f is None:
            if s not in raw_names:
                found.append((("slices", i), f"unknown column {word_text(s)} (slices must be "
                                             f"categorical feature columns)"))
        elif f.kind != "categorical":
            found.append((("slices", i), f"{word_text(s)} is {f.kind}; slices must be "
                                         f"categorical feature columns"))

    # Output names must not collide (e.g. a feature "price_missing" vs price's indicator).
    outputs: dict[str, str] = {}
    for i, f in features:
        categorical_output = f.kind != "numeric" or f.transform == "bucketize"
        for n in [f"{f.name}_xf"] + ([] if categorical_output else [f"{f.name}_missing_xf"]):
            if n in outputs:
                found.append((("features", i), f"output name {word_text(n)} collides with "
                                               f"{outputs[n]}"))
            outputs[n] = f"feature {word_text(f.name)}"
    for i, c in crosses:
        if f"{c.name}_xf" in outputs:
            found.append((("crosses", i), f"output name {word_text(c.name + '_xf')} collides "
                                          f"with {outputs[c.name + '_xf']}"))
    if isinstance(label, str) and label in outputs:
        found.append((("label",), f"{word_text(label)} collides with the output of "
                                  f"{outputs[label]}"))

    categorical = [f.name for _, f in features
                   if f.kind != "numeric" or f.transform == "bucketize"] + \
        [c.name for _, c in crosses]
    declared = raw_names | {r.get("name") for r in raw_crosses
                            if isinstance(r, dict) and isinstance(r.get("name"), str)}
    multi = {f.name for _, f in features if f.kind in MULTI_VALUED}
    model = ModelFile() if d.get("model") is None else _valid(ModelFile, d["model"])
    if model is not None:
        for key in ("deep_fields", "count_features", "id_l2", "fm_fields", "embeddings"):
            for n in getattr(model, key):
                if n not in categorical and n in declared and n not in by_name:
                    continue    # an invalid feature or cross, reported
                if n not in categorical:
                    found.append((("model", key), f"{word_text(n)} is not a categorical "
                                                  f"feature or cross"))
                elif key == "count_features" and n in multi:
                    found.append((("model", key), f"{word_text(n)} is multi-valued; {key} "
                                                  f"need single-valued fields"))
    if isinstance(d.get("validation"), dict):
        found += _validation_references(d["validation"], [f for _, f in features], label,
                                        example_id, declared)
    return found


def _section(raw: dict, key: str) -> dict:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def _validation_references(v: dict, features, label, example_id,
                           declared: set) -> list[tuple[tuple, str]]:
    """The columns the validation rules name: each section's keys are checked whatever
    their values (a value's own problem is the field checks')."""
    found: list[tuple[tuple, str]] = []
    kinds = {k: t for k, t in ((example_id, "str"), (label, "int")) if isinstance(k, str)}
    kinds.update({f.name: raw_type(f.kind, f.dtype, f.transform) for f in features})
    extra = {}
    for name, kind in _section(v, "extra_columns").items():
        if name in kinds:
            found.append((("validation", "extra_columns", name),
                          "is already a column of the config"))
        elif kind in ("str", "int", "float"):
            extra[name] = kind
    kinds.update(extra)
    for section, allowed in (("ranges", ("int", "float")), ("allowed_values", ("str", "int")),
                             ("patterns", ("str",))):
        for column in _section(v, section):
            if column not in kinds and column in declared:
                continue                 # an invalid feature, reported
            if column not in kinds:
                found.append((("validation", section, column), "is not a column of the "
                              f"config (columns: {words_text(sorted(kinds, key=str))})"))
            elif kinds[column] not in allowed:
                found.append((("validation", section, column), f"needs a "
                              f"{' or '.join(allowed)} column, it is {kinds[column]}"))
    by_name = {f.name: f for f in features}
    for name, raw in _section(v, "drift").items():
        f = by_name.get(name)
        if f is None and name in declared:
            continue
        drift = _valid(DriftFile, raw)
        if f is None or f.kind not in DRIFT_METRICS:
            found.append((("validation", "drift", name),
                          "drift is measured on numeric and categorical features only"))
        elif drift is not None and drift.metric not in DRIFT_METRICS[f.kind]:
            found.append((("validation", "drift", name), f"metric of a {f.kind} feature must "
                          f"be one of {DRIFT_METRICS[f.kind]}, got {word_text(drift.metric)}"))
    return found


def raw_type(kind: str, dtype: str | None, transform: str) -> str:
    """The raw column type a feature reads ("str" | "int" | "float" | "str_list")."""
    if kind == "numeric":
        return "float"
    if kind == "multi_categorical":
        return "str_list"
    if kind == "text":
        return "str"
    return dtype or ("int" if transform == "identity" else "str")
