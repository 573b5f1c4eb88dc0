"""Declarative, validated description of a CTR feature set: which raw columns to read, how
each is transformed, the label, the example id, the evaluation slices.

Why: pointing the pipeline at other click logs must be one config file, not code edits.
The same `FeatureConfig` drives validation (raw columns and types), preprocessing (the
tf.Transform `preprocessing_fn` built by `components.ctr.transform.make_preprocessing_fn`),
training (tables and dense inputs) and serving (the raw inputs of the exported signature).
The generated demo logs are one such config (`feature_configs/generated.yaml`, `default()`),
and `components.ctr.features` derives its constants from it. The Beam job writes the config
it used into its output dir (`feature_config.json`); the trainer reads it back from there
(`for_preprocess_dir`), so a model is always trained on the features it was given, and
writes it into the exported SavedModel (`assets.extra/feature_config.json`,
`for_model_dir`), so evaluation and serving checks know the raw inputs a model takes.

Stdlib + PyYAML only, so DAG files can import it.

Errors name, never echo (rule 22): a problem names the file, a key or a place
(`features[2] 'country'`), the rule and the expected type; a wrong value is shown only if it
is a number out of its bounds or a short word where the config takes a name or a choice
(`unknown kind 'numerical'`); a syntax error gives the line and column, not the text
(`retrain.common.run_inputs`: read_config_file, key_text, word_text, what).

Kinds and transforms (raw column type in brackets, as `raw_columns()` reports it):

- numeric [float, null allowed -> NaN]: `zscore`, `log_zscore` (log1p of max(x, 0), then
  z-score; both output `<name>_xf` float, 0 when missing, plus the 0/1 indicator
  `<name>_missing_xf`), `bucketize` (`buckets`: quantile buckets of the analysis window;
  output a categorical id in [0, buckets), a missing value gets the extra id `buckets`, so
  the table has buckets + 1 rows).
- categorical [str, or int with `dtype: int`]: `vocabulary` (`top_k`, optional
  `frequency_threshold`, `oov_buckets` >= 1, default 1; table top_k + oov_buckets),
  `hash` (`hash_buckets`), `identity` (int ids in [0, `size`); out-of-range values are
  clipped into it).
- multi_categorical [str_list, variable length] and text [str, lower-cased and split on
  anything that is not a letter or digit, in the graph]: `vocabulary` or `hash` as above,
  plus `max_values`. PADDING CONVENTION: the output `<name>_xf` is int64 of fixed shape
  [max_values]; the first max_values values (tokens) in their original order get their ids,
  the remaining slots hold -1. Empty strings are not values (they are dropped, which is what
  lets serving pad lists with ""). The table size does not include padding; consumers mask
  ids < 0 (the model takes the masked mean of the present values' embeddings; none present
  gives zeros).
- crosses of two or more `categorical` features: the raw values hashed together
  (`tf.sparse.cross_hashed`) into `hash_buckets`; output `<cross name>_xf`, a single id.

All transformed outputs are fixed-length, so the training data parses densely.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Mapping

from retrain.common import record_limits
from retrain.common.errors import ConfigError
from retrain.common.run_inputs import (is_word, key_text, number_text,
                                          parse_config_text, read_config_file, what,
                                          word_text, words_text)

FEATURE_CONFIG_FILE = "feature_config.json"   # in the preprocess output dir
# Inside an exported SavedModel (TF Serving's folder for extra files), so the config
# travels with the model into the registry: the raw inputs its signature takes.
MODEL_CONFIG_PATH = f"assets.extra/{FEATURE_CONFIG_FILE}"
PACKAGED_DIR = Path(__file__).resolve().parent / "feature_configs"
DEFAULT_CONFIG = PACKAGED_DIR / "generated.yaml"

KINDS: dict[str, tuple[str, ...]] = {
    "numeric": ("zscore", "log_zscore", "bucketize"),
    "categorical": ("vocabulary", "hash", "identity"),
    "multi_categorical": ("vocabulary", "hash"),
    "text": ("vocabulary", "hash"),
}
# Parameters each transform takes: name -> required?
_TRANSFORM_PARAMS: dict[str, dict[str, bool]] = {
    "zscore": {},
    "log_zscore": {},
    "bucketize": {"buckets": True},
    "vocabulary": {"top_k": True, "frequency_threshold": False, "oov_buckets": False},
    "hash": {"hash_buckets": True},
    "identity": {"size": True},
}
_PARAM_MIN = {"buckets": 2, "top_k": 1, "frequency_threshold": 1, "oov_buckets": 1,
              "hash_buckets": 1, "size": 1, "max_values": 1}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RAW_TYPES = ("str", "int", "float", "str_list")


def transformed_name(key: str) -> str:
    """Name of a feature after tf.Transform (the TFX `_xf` convention)."""
    return f"{key}_xf"


def missing_name(key: str) -> str:
    """Name of the 0/1 missing-value indicator of a z-scored numeric feature."""
    return f"{key}_missing_xf"


@dataclasses.dataclass(frozen=True)
class Feature:
    """One raw column and its transform. `name` is the raw column's name."""
    name: str
    kind: str
    transform: str
    dtype: str | None = None            # categorical only: "str" (default) or "int"
    top_k: int | None = None            # vocabulary
    frequency_threshold: int | None = None  # vocabulary (optional)
    oov_buckets: int | None = None      # vocabulary (default 1)
    hash_buckets: int | None = None     # hash
    size: int | None = None             # identity
    buckets: int | None = None          # bucketize
    max_values: int | None = None       # multi_categorical, text: fixed padded length
    description: str = ""

    @property
    def raw_type(self) -> str:
        if self.kind == "numeric":
            return "float"
        if self.kind == "multi_categorical":
            return "str_list"
        if self.kind == "text":
            return "str"
        return self.dtype or "str"

    @property
    def output(self) -> str:
        return transformed_name(self.name)

    @property
    def is_categorical_output(self) -> bool:
        """Does the transform produce ids (a table lookup) rather than floats?"""
        return self.kind != "numeric" or self.transform == "bucketize"

    @property
    def table_size(self) -> int | None:
        """Rows an embedding table of this feature's ids needs (None: not categorical)."""
        if self.transform == "vocabulary":
            return self.top_k + self.oov_buckets
        if self.transform == "hash":
            return self.hash_buckets
        if self.transform == "identity":
            return self.size
        if self.transform == "bucketize":
            return self.buckets + 1          # the last id is "missing"
        return None


@dataclasses.dataclass(frozen=True)
class Cross:
    """Hashed cross of the raw values of two or more categorical features."""
    name: str
    features: tuple[str, ...]
    hash_buckets: int
    description: str = ""

    @property
    def output(self) -> str:
        return transformed_name(self.name)


@dataclasses.dataclass(frozen=True)
class ModelDefaults:
    """Training defaults that depend on the feature names (a train spec may override them).

    deep_fields: categorical fields (features or crosses) that also get an embedding in the
    MLP; count_features: single-valued fields whose window popularity is a dense input;
    id_l2: per-field prior strength of the first-order bias (others use the spec's l2);
    fm_fields: single-valued fields whose factor vectors are crossed pairwise (a
    factorization machine: user x item and user x category tastes)."""
    deep_fields: tuple[str, ...] = ()
    count_features: tuple[str, ...] = ()
    id_l2: tuple[tuple[str, float], ...] = ()
    fm_fields: tuple[str, ...] = ()

    def id_l2_dict(self) -> dict[str, float]:
        return dict(self.id_l2)


@dataclasses.dataclass(frozen=True)
class Validation:
    """Data-validation rules beyond what the feature list implies (columns, types, nulls,
    label domain, drift of every feature): `components.ctr.validation_rules.rules_for`.

    extra_columns: (name, kind) of columns the logs carry that no feature reads (they
    must be present with that type); ranges: (column, min or None, max or None);
    allowed_values: (column, values); patterns: (string column, regex, checked on a
    sample, warning); drift: (feature, metric js|linf|psi|ks, max, severity) overriding
    the default rule (categorical: JS <= 0.3, numeric: PSI <= 0.25, both warnings);
    thresholds: (name, value) of the span-level bounds (THRESHOLDS: rows, label rate,
    null rates, duplicates, recent-average ratio), each overriding the built-in default."""
    extra_columns: tuple[tuple[str, str], ...] = ()
    ranges: tuple[tuple[str, float | None, float | None], ...] = ()
    allowed_values: tuple[tuple[str, tuple], ...] = ()
    patterns: tuple[tuple[str, str], ...] = ()
    drift: tuple[tuple[str, str, float, str], ...] = ()
    thresholds: tuple[tuple[str, float], ...] = ()

    def threshold(self, name: str) -> float:
        """A span-level bound: the config's value, else the built-in default."""
        return dict(self.thresholds).get(name, THRESHOLDS[name])

    def record_limits(self) -> record_limits.RecordLimits:
        """The part and record limits the readers enforce."""
        return record_limits.RecordLimits(
            *(int(self.threshold(n)) for n in ("max_part_bytes", "max_value_bytes",
                                               "max_depth", "max_parts_per_day")))

    def to_dict(self) -> dict:
        out = {"thresholds": dict(self.thresholds),
               "extra_columns": dict(self.extra_columns),
               "ranges": {c: [lo, hi] for c, lo, hi in self.ranges},
               "allowed_values": {c: list(v) for c, v in self.allowed_values},
               "patterns": dict(self.patterns),
               "drift": {f: {"metric": m, "max": x, "severity": sev}
                         for f, m, x, sev in self.drift}}
        return {k: v for k, v in out.items() if v}


@dataclasses.dataclass(frozen=True)
class GateDefaults:
    """The evidence the evaluation gate needs before it may bless a model of this dataset
    (design rule 21): held-out rows of the window, and clicks among them. Below either, no
    blessing, and the reason says so. The run's params `min_eval_rows` /
    `min_eval_positives` override these for one run. The defaults pass a real daily feed
    of ~330 rows a day with 5 % clicks and a 30-day window (about 2,000 held-out rows, 100
    clicks), and refuse a span's 60 rows with 3 clicks."""
    min_eval_rows: int = 200
    min_eval_positives: int = 20


# The id column of logs that have none: the config leaves `example_id` out, and readers
# add this column, a hash of the row's configured columns (`derived_ids`).
DERIVED_ID = "example_id"


@dataclasses.dataclass(frozen=True)
class FeatureConfig:
    label: str
    example_id: str           # the id column; DERIVED_ID (derived_id) when the logs have none
    features: tuple[Feature, ...]
    crosses: tuple[Cross, ...] = ()
    slices: tuple[str, ...] = ()
    model: ModelDefaults = ModelDefaults()
    name: str = ""
    description: str = ""
    validation: Validation = Validation()
    gate: GateDefaults = GateDefaults()
    derived_id: bool = False  # no id column: each row's id is a hash of its columns

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FeatureConfig":
        return from_dict(d)

    def to_dict(self) -> dict:
        """Plain JSON-able form; `from_dict(cfg.to_dict()) == cfg`."""
        def feature(f: Feature) -> dict:
            out = {"name": f.name, "kind": f.kind, "transform": f.transform}
            for field in dataclasses.fields(Feature)[3:]:
                value = getattr(f, field.name)
                if value not in (None, ""):
                    out[field.name] = value
            return out
        out: dict[str, Any] = {}
        if self.name:
            out["name"] = self.name
        if self.description:
            out["description"] = self.description
        out["label"] = self.label
        if not self.derived_id:      # left out when derived, as the user's file leaves it
            out["example_id"] = self.example_id
        out.update({
            "features": [feature(f) for f in self.features],
            "crosses": [{"name": c.name, "features": list(c.features),
                         "hash_buckets": c.hash_buckets,
                         **({"description": c.description} if c.description else {})}
                        for c in self.crosses],
            "slices": list(self.slices),
            "model": {"deep_fields": list(self.model.deep_fields),
                      "count_features": list(self.model.count_features),
                      "id_l2": dict(self.model.id_l2),
                      # only when set, so configs without it keep their fingerprint
                      **({"fm_fields": list(self.model.fm_fields)}
                         if self.model.fm_fields else {})},
        })
        if self.validation.to_dict():
            out["validation"] = self.validation.to_dict()
        if self.gate != GateDefaults():   # only when set: other configs keep their fingerprint
            out["gate"] = dataclasses.asdict(self.gate)
        return out

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON form (sorted keys, no whitespace)."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    # -- what the pipeline stages ask ----------------------------------------------------
    def feature(self, name: str) -> Feature:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(f"no feature {name!r} in the feature config "
                       f"(features: {[f.name for f in self.features]})")

    def raw_columns(self) -> dict[str, str]:
        """Every raw column the pipeline reads -> "str" | "int" | "float" | "str_list".

        Order: example id, label, then the features. The label is "int" with values 0/1;
        "float" columns may hold nulls (read as NaN); the others may not. The id is "str"
        as the pipeline sees it: the readers take an integer id column as its decimal text."""
        out = {self.example_id: "str", self.label: "int"}
        out.update({f.name: f.raw_type for f in self.features})
        return out

    def input_columns(self) -> dict[str, str]:
        """The raw columns a reader takes from the files: `raw_columns()` less a derived id
        (which the reader adds, `derived_ids`)."""
        cols = self.raw_columns()
        if self.derived_id:
            del cols[self.example_id]
        return cols

    def numeric_features(self) -> list[str]:
        """Raw numeric (float, nullable) columns, whatever their transform."""
        return [f.name for f in self.features if f.kind == "numeric"]

    def dense_features(self) -> list[str]:
        """Numeric features that stay numbers (zscore, log_zscore): each gives the model
        `<name>_xf` and `<name>_missing_xf`."""
        return [f.name for f in self.features
                if f.kind == "numeric" and f.transform != "bucketize"]

    def dense_outputs(self) -> list[str]:
        """Transformed float outputs, in model order: value, missing indicator per feature."""
        return [n for k in self.dense_features() for n in (transformed_name(k), missing_name(k))]

    def categorical_fields(self) -> list[str]:
        """Names (features, then crosses) of every id-valued output, in model order."""
        return [f.name for f in self.features if f.is_categorical_output] + \
            [c.name for c in self.crosses]

    def categorical_size(self, name: str) -> int:
        """Table rows a categorical field (feature or cross name) needs."""
        for f in self.features:
            if f.name == name and f.is_categorical_output:
                return f.table_size
        for c in self.crosses:
            if c.name == name:
                return c.hash_buckets
        raise KeyError(f"{name!r} is not a categorical field of the feature config "
                       f"(categorical fields: {self.categorical_fields()})")

    def max_values(self, name: str) -> int | None:
        """Padded length of a multi-valued field (multi_categorical, text); None if single."""
        for f in self.features:
            if f.name == name:
                return f.max_values if f.kind in ("multi_categorical", "text") else None
        return None

    def categorical_outputs(self) -> dict[str, int]:
        """Transformed name -> table size, for every id-valued output (bucketized numerics,
        categorical, multi-valued, text, crosses)."""
        return {transformed_name(k): self.categorical_size(k) for k in self.categorical_fields()}

    def multi_valued_outputs(self) -> dict[str, int]:
        """Transformed name -> max_values for the fixed-length padded id outputs."""
        return {f.output: f.max_values for f in self.features
                if f.kind in ("multi_categorical", "text")}

    def transformed_outputs(self) -> list[str]:
        """Every output of the preprocessing_fn, label last."""
        return [*self.categorical_outputs(), *self.dense_outputs(), self.label]

    def check_fields(self, what: str, names, *, single_valued: bool = False) -> None:
        """Raise a clear ValueError if `names` (a trainer's per-field option) are not
        categorical fields of this config (or, with single_valued, are multi-valued)."""
        fields = self.categorical_fields()
        unknown = [n for n in names if n not in fields]
        if unknown:
            raise ValueError(
                f"{what}: {unknown} are not categorical features of the feature config "
                f"{self.name or '(unnamed)'}; its categorical fields are {fields}")
        if single_valued:
            multi = [n for n in names if self.max_values(n)]
            if multi:
                raise ValueError(f"{what}: {multi} are multi-valued; only single-valued "
                                 f"categorical fields are allowed here")


# ------------------------------------------------------------------------ parsing


class _Problems:
    def __init__(self):
        self.items: list[str] = []

    def add(self, where: str, what: str) -> None:
        self.items.append(f"{where}: {what}")


def _where(section: str, i: int, name) -> str:
    """`features[3] 'age'`: the place of a list entry, with its name if that is a short
    word (a name that is not one is reported, never shown)."""
    return f"{section}[{i}] {word_text(name)}" if is_word(name) else f"{section}[{i}]"


def _quoted(key) -> str:
    """A parameter name as `unknown parameter 'topk'` shows it (see key_text)."""
    return repr(key) if is_word(key) else key_text(key)


def _int_param(value, where: str, key: str, problems: _Problems) -> int | None:
    low = _PARAM_MIN[key]
    if isinstance(value, bool) or not isinstance(value, int):
        problems.add(where, f"{key} must be an integer >= {low}, got {what(value)}")
        return None
    if value < low:
        problems.add(where, f"{key} must be an integer >= {low}, got {value}")
        return None
    return value


def _str_list(value, where: str, problems: _Problems) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        problems.add(where, f"must be a list of names, got {what(value)}")
        return ()
    return tuple(value)


def _parse_feature(i: int, raw, problems: _Problems) -> Feature | None:
    if not isinstance(raw, Mapping):
        problems.add(f"features[{i}]", f"must be a mapping, got {what(raw)}")
        return None
    name = raw.get("name")
    where = _where("features", i, name)
    ok = True
    if not isinstance(name, str) or not _NAME.match(name):
        problems.add(where, f"name must match {_NAME.pattern}, got {word_text(name)}")
        ok = False
    kind, transform = raw.get("kind"), raw.get("transform")
    if not isinstance(kind, str) or kind not in KINDS:
        problems.add(where, f"unknown kind {word_text(kind)} (kinds: {', '.join(KINDS)})")
        return None
    if not isinstance(transform, str) or transform not in _TRANSFORM_PARAMS:
        problems.add(where, f"unknown transform {word_text(transform)} (transforms of {kind}: "
                            f"{', '.join(KINDS[kind])})")
        return None
    if transform not in KINDS[kind]:
        problems.add(where, f"transform {transform!r} is not allowed for kind {kind!r} "
                            f"(allowed: {', '.join(KINDS[kind])})")
        return None
    params = dict(_TRANSFORM_PARAMS[transform])
    if kind in ("multi_categorical", "text"):
        params["max_values"] = True
    if kind == "categorical":
        params["dtype"] = False
    values: dict[str, Any] = {}
    for key in sorted(set(raw) - {"name", "kind", "transform", "description"}, key=str):
        if key not in params:
            allowed = ", ".join(sorted(params)) or "none"
            problems.add(where, f"unknown parameter {_quoted(key)} for {kind}/{transform} "
                                f"(allowed: {allowed})")
            ok = False
    for key, required in params.items():
        if key not in raw or raw[key] is None:
            if required:
                problems.add(where, f"missing required parameter {key!r} for {transform}")
                ok = False
            continue
        if key == "dtype":
            if raw[key] not in ("str", "int"):
                problems.add(where, f"dtype must be 'str' or 'int', got {word_text(raw[key])}")
                ok = False
            else:
                values[key] = raw[key]
            continue
        value = _int_param(raw[key], where, key, problems)
        if value is None:
            ok = False
        values[key] = value
    if kind == "categorical":
        dtype = values.get("dtype") or ("int" if transform == "identity" else "str")
        if transform == "identity" and dtype != "int":
            problems.add(where, "identity needs integer ids (dtype: int)")
            ok = False
        values["dtype"] = dtype
    if transform == "vocabulary" and values.get("oov_buckets") is None:
        values["oov_buckets"] = 1
    description = raw.get("description", "")
    if not isinstance(description, str):
        problems.add(where, f"description must be a string, got {what(description)}")
        ok = False
    if not ok:
        return None
    return Feature(name=name, kind=kind, transform=transform, description=description,
                   **values)


_TOP_KEYS = {"name", "description", "label", "example_id", "features", "crosses", "slices",
             "validation",
             "model", "gate"}


def from_dict(d: Mapping[str, Any], source: str = "") -> FeatureConfig:
    """Validate and build a FeatureConfig; every problem is reported in one ValueError."""
    problems = _Problems()
    if not isinstance(d, Mapping):
        raise ConfigError(f"feature config{' ' + source if source else ''} must be a mapping "
                         f"at the top level, got {type(d).__name__}")
    for key in sorted(set(d) - _TOP_KEYS, key=str):
        problems.add(key_text(key), f"unknown key (allowed: {', '.join(sorted(_TOP_KEYS))})")
    cfg_name = d.get("name", "")
    for key in ("name", "description"):
        if not isinstance(d.get(key, ""), str):
            problems.add(key, f"must be a string, got {what(d.get(key))}")
    label, example_id = d.get("label"), d.get("example_id")
    derived_id = example_id is None
    if derived_id:
        example_id = DERIVED_ID
    for key, value in (("label", label), ("example_id", example_id)):
        if not isinstance(value, str) or not _NAME.match(value):
            problems.add(key, f"must be a column name matching {_NAME.pattern}, got "
                              f"{word_text(value)}")
    if isinstance(label, str) and label == example_id:
        problems.add("example_id", f"is the same column as the label ({word_text(label)})")

    raw_features = d.get("features")
    features: list[Feature] = []
    if not isinstance(raw_features, list) or not raw_features:
        problems.add("features", "must be a non-empty list of features")
        raw_features = []
    seen: dict[str, str] = {}
    for i, raw in enumerate(raw_features):
        f = _parse_feature(i, raw, problems)
        name = raw.get("name") if isinstance(raw, Mapping) else None
        if isinstance(name, str):
            where = _where("features", i, name)
            if name in seen:
                problems.add(where, f"duplicate name (also {seen[name]})")
            elif name in (label, example_id):
                problems.add(where, f"clashes with the "
                                    f"{'label' if name == label else 'example_id'} column")
            seen.setdefault(name, f"features[{i}]")
        if f is not None:
            features.append(f)
    by_name = {f.name: f for f in features}
    raw_names = {r.get("name") for r in raw_features
                 if isinstance(r, Mapping) and isinstance(r.get("name"), str)}

    crosses: list[Cross] = []
    raw_crosses = d.get("crosses") or []
    if not isinstance(raw_crosses, list):
        problems.add("crosses", f"must be a list, got {what(raw_crosses)}")
        raw_crosses = []
    for i, raw in enumerate(raw_crosses):
        if not isinstance(raw, Mapping):
            problems.add(f"crosses[{i}]", f"must be a mapping, got {what(raw)}")
            continue
        name = raw.get("name")
        where = _where("crosses", i, name)
        ok = True
        for key in sorted(set(raw) - {"name", "features", "hash_buckets", "description"},
                          key=str):
            problems.add(where, f"unknown parameter {_quoted(key)} (allowed: name, features, "
                                f"hash_buckets, description)")
            ok = False
        if not isinstance(name, str) or not _NAME.match(name):
            problems.add(where, f"name must match {_NAME.pattern}, got {word_text(name)}")
            ok = False
        elif name in seen or name in (label, example_id):
            problems.add(where, f"duplicate name (also {seen.get(name, 'label/example_id')})")
            ok = False
        else:
            seen[name] = f"crosses[{i}]"
        members = _str_list(raw.get("features"), f"{where}.features", problems)
        if len(members) < 2:
            problems.add(f"{where}.features", f"a cross needs at least 2 features, got "
                                              f"{words_text(members)}")
            ok = False
        if len(set(members)) != len(members):
            problems.add(f"{where}.features", f"lists a feature twice: {words_text(members)}")
            ok = False
        for m in members:
            if m in by_name:
                if by_name[m].kind != "categorical":
                    problems.add(f"{where}.features", f"{word_text(m)} is {by_name[m].kind}, only "
                                                      f"categorical features can be crossed")
                    ok = False
            elif m in raw_names:
                ok = False      # the feature itself is invalid and reported above
            elif seen.get(m, "").startswith("crosses"):
                problems.add(f"{where}.features", f"{word_text(m)} is a cross; only categorical "
                                                  f"features can be crossed")
                ok = False
            else:
                problems.add(f"{where}.features", f"unknown feature {word_text(m)}")
                ok = False
        buckets = raw.get("hash_buckets")
        if buckets is None:
            problems.add(where, "missing required parameter 'hash_buckets'")
            ok = False
        elif _int_param(buckets, where, "hash_buckets", problems) is None:
            ok = False
        description = raw.get("description", "")
        if ok:
            crosses.append(Cross(name=name, features=members, hash_buckets=buckets,
                                 description=description if isinstance(description, str)
                                 else ""))

    slices = _str_list(d.get("slices"), "slices", problems)
    for i, s in enumerate(slices):
        f = by_name.get(s)
        if f is None:
            if s not in raw_names:
                problems.add(f"slices[{i}]", f"unknown column {word_text(s)} (slices must be "
                                             f"categorical feature columns)")
        elif f.kind != "categorical":
            problems.add(f"slices[{i}]", f"{word_text(s)} is {f.kind}; slices must be categorical "
                                         f"feature columns")

    # Output names must not collide (e.g. a feature "price_missing" vs price's indicator).
    outputs: dict[str, str] = {}
    for f in features:
        names = [f.output] + ([missing_name(f.name)] if not f.is_categorical_output else [])
        for n in names:
            if n in outputs:
                problems.add(f"features {word_text(f.name)}",
                             f"output name {word_text(n)} collides with {outputs[n]}")
            outputs[n] = f"feature {word_text(f.name)}"
    for c in crosses:
        if c.output in outputs:
            problems.add(f"crosses {word_text(c.name)}", f"output name "
                         f"{word_text(c.output)} collides with {outputs[c.output]}")
    if isinstance(label, str) and label in outputs:
        problems.add("label", f"{word_text(label)} collides with the output of {outputs[label]}")

    model = ModelDefaults()
    raw_model = d.get("model") or {}
    if not isinstance(raw_model, Mapping):
        problems.add("model", f"must be a mapping, got {what(raw_model)}")
        raw_model = {}
    allowed = ("deep_fields", "count_features", "id_l2", "fm_fields")
    for key in sorted(set(raw_model) - set(allowed), key=str):
        problems.add(f"model.{key_text(key)}", f"unknown key (allowed: {', '.join(allowed)})")
    categorical = [f.name for f in features if f.is_categorical_output] + \
        [c.name for c in crosses]
    declared = raw_names | {r.get("name") for r in raw_crosses
                            if isinstance(r, Mapping) and isinstance(r.get("name"), str)}
    multi = {f.name for f in features if f.kind in ("multi_categorical", "text")}
    deep = _str_list(raw_model.get("deep_fields"), "model.deep_fields", problems)
    counts = _str_list(raw_model.get("count_features"), "model.count_features", problems)
    fm = _str_list(raw_model.get("fm_fields"), "model.fm_fields", problems)
    id_l2 = raw_model.get("id_l2") or {}
    if not isinstance(id_l2, Mapping) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
            and v >= 0 for k, v in id_l2.items()):
        problems.add("model.id_l2", f"must map field names to numbers >= 0, got {what(id_l2)}"
                                    if not isinstance(id_l2, Mapping) else
                                    "must map field names to numbers >= 0")
        id_l2 = {}
    for key, names in (("deep_fields", deep), ("count_features", counts),
                       ("id_l2", list(id_l2)), ("fm_fields", fm)):
        for n in names:
            if n not in categorical and n in declared and n not in by_name:
                continue    # an invalid feature or cross, reported above
            if n not in categorical:
                problems.add(f"model.{key}",
                             f"{word_text(n)} is not a categorical feature or cross")
            elif key in ("count_features", "fm_fields") and n in multi:
                problems.add(f"model.{key}", f"{word_text(n)} is multi-valued; {key} need "
                                             f"single-valued fields")
    if len(fm) == 1:
        problems.add("model.fm_fields", f"crosses pairs of fields: name two or more, got "
                                        f"{words_text(fm)}")
    model = ModelDefaults(deep_fields=deep, count_features=counts,
                          id_l2=tuple((k, float(v)) for k, v in id_l2.items()),
                          fm_fields=fm)

    validation = _parse_validation(d.get("validation"), features, label, example_id,
                                   raw_names, problems)
    gate = _parse_gate(d.get("gate"), problems)

    if problems.items:
        head = f"invalid feature config{' ' + source if source else ''}"
        raise ConfigError(f"{head}: {len(problems.items)} problem(s):\n  - "
                         + "\n  - ".join(problems.items))
    return FeatureConfig(label=label, example_id=example_id, features=tuple(features),
                         crosses=tuple(crosses), slices=slices, model=model,
                         name=cfg_name or "", description=d.get("description", "") or "",
                         validation=validation, gate=gate, derived_id=derived_id)


_VALIDATION_KEYS = ("thresholds", "extra_columns", "ranges", "allowed_values", "patterns",
                    "drift")
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
_INT_THRESHOLDS = ("min_rows", "max_rows", "history_days", "max_part_bytes",
                   "max_value_bytes", "max_depth", "max_parts_per_day")
_SHARE_THRESHOLDS = ("min_label_rate", "max_label_rate", "max_null_rate",
                     "max_null_rate_increase", "max_duplicate_rate", "max_previous_overlap",
                     "max_rejected_rate")
_DRIFT_METRICS = {"categorical": ("js", "linf"), "numeric": ("psi", "ks")}


def _number_or_none(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _parse_validation(raw, features, label, example_id, declared: set,
                      problems: _Problems) -> Validation:
    """The `validation` section, entries sorted by column (order carries no meaning). A
    rule on a feature that is itself invalid is skipped: that feature is reported."""
    if raw is None:
        return Validation()
    if not isinstance(raw, Mapping):
        problems.add("validation", f"must be a mapping, got {what(raw)}")
        return Validation()
    for key in sorted(set(raw) - set(_VALIDATION_KEYS), key=str):
        problems.add(f"validation.{key_text(key)}",
                     f"unknown key (allowed: {', '.join(_VALIDATION_KEYS)})")
    sections = {}
    for key in _VALIDATION_KEYS:
        value = raw.get(key) or {}
        if not isinstance(value, Mapping):
            problems.add(f"validation.{key}", f"must be a mapping, got {what(value)}")
            value = {}
        sections[key] = value
    thresholds = _parse_thresholds(sections["thresholds"], problems)
    kinds = {k: t for k, t in ((example_id, "str"), (label, "int")) if isinstance(k, str)}
    kinds.update({f.name: f.raw_type for f in features})
    extra = []
    for name, kind in sections["extra_columns"].items():
        where = f"validation.extra_columns.{key_text(name)}"
        if name in kinds:
            problems.add(where, "is already a column of the config")
        elif kind not in ("str", "int", "float"):
            problems.add(where, f"kind must be str, int or float, got {word_text(kind)}")
        else:
            extra.append((name, kind))
    kinds.update(dict(extra))

    def known(section: str, column: str, allowed_kinds=None) -> bool:
        if column not in kinds and column in declared:
            return False                 # an invalid feature, reported above
        if column not in kinds:
            problems.add(f"validation.{section}.{key_text(column)}", "is not a column of the "
                         f"config (columns: {words_text(sorted(kinds, key=str))})")
            return False
        if allowed_kinds and kinds[column] not in allowed_kinds:
            problems.add(f"validation.{section}.{key_text(column)}",
                         f"needs a {' or '.join(allowed_kinds)} column, it is {kinds[column]}")
            return False
        return True

    ranges = []
    for column, bounds in sections["ranges"].items():
        if not known("ranges", column, ("int", "float")):
            continue
        if (not isinstance(bounds, (list, tuple)) or len(bounds) != 2
                or not all(_number_or_none(b) for b in bounds) or bounds == [None, None]):
            problems.add(f"validation.ranges.{column}", "must be [min, max] (numbers, one "
                                                        f"may be null), got {what(bounds)}")
            continue
        ranges.append((column, bounds[0], bounds[1]))
    allowed = []
    for column, values in sections["allowed_values"].items():
        if not known("allowed_values", column, ("str", "int")):
            continue
        if not isinstance(values, (list, tuple)) or not values:
            problems.add(f"validation.allowed_values.{column}",
                         f"must be a non-empty list, got {what(values)}")
            continue
        allowed.append((column, tuple(values)))
    patterns = []
    for column, regex in sections["patterns"].items():
        if not known("patterns", column, ("str",)):
            continue
        try:
            re.compile(regex)
        except re.error as e:
            at = f" (error at position {e.pos})" if e.pos is not None else ""
            problems.add(f"validation.patterns.{column}", f"is not a regular expression{at}")
            continue
        except TypeError:
            problems.add(f"validation.patterns.{column}", f"must be a regular expression "
                                                          f"(a string), got {what(regex)}")
            continue
        patterns.append((column, regex))
    drift = []
    by_name = {f.name: f for f in features}
    for name, rule in sections["drift"].items():
        where = f"validation.drift.{key_text(name)}"
        f = by_name.get(name)
        if f is None and name in declared:
            continue                     # an invalid feature, reported above
        if f is None or f.kind not in _DRIFT_METRICS:
            problems.add(where, "drift is measured on numeric and categorical features only")
            continue
        if not isinstance(rule, Mapping) or set(rule) - {"metric", "max", "severity"}:
            problems.add(where, "must be {metric, max, severity}, got " + (
                what(rule) if not isinstance(rule, Mapping) else "unknown key(s) " + ", ".join(
                    key_text(k) for k in sorted(set(rule) - {"metric", "max", "severity"},
                                                key=str))))
            continue
        metric, limit = rule.get("metric"), rule.get("max")
        severity = rule.get("severity", "warning")
        if metric not in _DRIFT_METRICS[f.kind]:
            problems.add(where, f"metric of a {f.kind} feature must be one of "
                                f"{_DRIFT_METRICS[f.kind]}, got {word_text(metric)}")
        elif not _number_or_none(limit) or limit is None or limit < 0:
            problems.add(where, f"max must be a number >= 0, got {number_text(limit)}")
        elif severity not in ("error", "warning"):
            problems.add(where, f"severity must be error or warning, got {word_text(severity)}")
        else:
            drift.append((name, metric, float(limit), severity))
    return Validation(*(tuple(sorted(x, key=lambda e: e[0]))
                        for x in (extra, ranges, allowed, patterns, drift, thresholds)))


def _parse_gate(raw, problems: _Problems) -> GateDefaults:
    """The `gate` section: whole numbers >= 0 for the evidence minimums."""
    if raw is None:
        return GateDefaults()
    if not isinstance(raw, Mapping):
        problems.add("gate", f"must be a mapping, got {what(raw)}")
        return GateDefaults()
    allowed = [f.name for f in dataclasses.fields(GateDefaults)]
    values = {}
    for key, value in raw.items():
        if key not in allowed:
            problems.add(f"gate.{key_text(key)}", f"unknown key (allowed: {', '.join(allowed)})")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            problems.add(f"gate.{key}", f"must be a whole number >= 0, got {number_text(value)}"
                         if _number_or_none(value) else f"must be a whole number >= 0, got "
                         f"{what(value)}")
        else:
            values[key] = value
    return GateDefaults(**values)


def _parse_thresholds(raw: Mapping, problems: _Problems) -> list[tuple[str, float]]:
    out = []
    for name, value in raw.items():
        where = f"validation.thresholds.{key_text(name)}"
        if name not in THRESHOLDS:
            problems.add(where, f"unknown threshold (known: {', '.join(THRESHOLDS)})")
        elif name in _INT_THRESHOLDS and (isinstance(value, bool) or not isinstance(value, int)
                                          or value < (0 if name in ("min_rows", "max_rows") else 1)):
            problems.add(where, f"must be a whole number >= 0, got {number_text(value)}")
        elif name not in _INT_THRESHOLDS and (not _number_or_none(value) or value is None
                                              or value < 0 or (name in _SHARE_THRESHOLDS
                                                               and value > 1)):
            problems.add(where, f"must be a number in [0, 1], got {number_text(value)}"
                         if name in _SHARE_THRESHOLDS else f"must be a number >= 1, got "
                         f"{number_text(value)}")
        elif name == "max_row_ratio" and value < 1:
            problems.add(where, f"must be a number >= 1, got {number_text(value)}")
        else:
            out.append((name, value))
    merged = {**THRESHOLDS, **dict(out)}
    for lo, hi in (("min_rows", "max_rows"), ("min_label_rate", "max_label_rate")):
        if merged[lo] > merged[hi]:
            problems.add(f"validation.thresholds.{lo}", f"{merged[lo]} is above {hi} "
                                                        f"{merged[hi]}")
    return out


def _checked(data, source: str) -> FeatureConfig:
    """from_dict on parsed file data; a shape the checks did not foresee is refused as a
    ConfigError naming the file, never with a message that could quote it."""
    try:
        return from_dict(data if data is not None else {}, source=source)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - e.g. an unhashable name: refused, not echoed
        raise ConfigError(f"invalid feature config {source or '(text)'}: its structure "
                          f"cannot be checked ({type(e).__name__})") from None


def loads(text: str, source: str = "") -> FeatureConfig:
    """Parse YAML (JSON is a subset of it) and validate. A syntax error names the line
    and column, never the text (rule 22)."""
    return _checked(parse_config_text(text, source, "feature config"), source)


def load(path: str | Path) -> FeatureConfig:
    """Read a YAML (.yaml/.yml) or JSON (.json) feature config file and validate it.
    No error quotes the file: it names the file, a line and column, keys and places."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"feature config {p} does not exist")
    return _checked(read_config_file(p, "feature config"), str(p))


@functools.lru_cache(maxsize=1)
def default() -> FeatureConfig:
    """The packaged config of the generated CTR logs (today's features and transforms)."""
    return load(DEFAULT_CONFIG)


def load_for(path: str | Path | None) -> FeatureConfig:
    """The config at `path`, or the default one for None / ""."""
    return default() if path in (None, "") else load(path)


def for_preprocess_dir(directory: str | Path) -> FeatureConfig:
    """The config a preprocess run used (`<dir>/feature_config.json`, written by the Beam
    job); the default config for older artifacts that have none."""
    path = Path(directory) / FEATURE_CONFIG_FILE
    if not path.exists():
        return default()
    return load(path)


def write_model_config(saved_model_dir: str | Path, cfg: FeatureConfig) -> Path:
    """Store the config inside an exported SavedModel (see MODEL_CONFIG_PATH)."""
    path = Path(saved_model_dir) / MODEL_CONFIG_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg.to_dict(), indent=1, sort_keys=True), encoding="utf-8")
    return path


def for_model_dir(model_dir: str | Path) -> FeatureConfig:
    """The config an exported model was trained with: `<SavedModel>/assets.extra/
    feature_config.json` (a model artifact dir holding `serving_model/` works too); the
    default config for models exported before configs existed (all of them used it)."""
    d = Path(model_dir)
    for path in (d / MODEL_CONFIG_PATH, d / "serving_model" / MODEL_CONFIG_PATH):
        if path.exists():
            return load(path)
    return default()
