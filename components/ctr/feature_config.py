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

The file's shape, its per-entry rules and the rules between its sections are pydantic
models (`components.ctr.feature_config_model`; their JSON schema is in the manual,
docs/reference/feature-config.schema.json); the dataclasses here are what the stages use.
Stdlib + PyYAML + pydantic, so DAG files can import it.

Errors name, never echo (rule 22): a problem names the file, a key or a place
(`features[2] 'country'.top_k`), the rule and the expected type; a wrong value is shown
only if it is a number out of its bounds or a short word where the config takes a name or
a choice (`unknown kind 'numerical'`); a syntax error gives the line and column, not the
text (`retrain.common.run_inputs`, `components.config_errors`).

Kinds and transforms (raw column type in brackets, as `raw_columns()` reports it):

- numeric [float, null allowed -> NaN]: `zscore`, `log_zscore` (log1p of max(x, 0), then
  z-score; both output `<name>_xf` float, 0 when missing, plus the 0/1 indicator
  `<name>_missing_xf`), `bucketize` (`buckets`: quantile buckets of the analysis window;
  output a categorical id in [0, buckets), a missing value gets the extra id `buckets`, so
  the table has buckets + 1 rows).
- categorical [str, or int with `dtype: int`]: `vocabulary` (`top_k`, optional
  `frequency_threshold`, `oov_buckets` >= 1, default 1; table top_k + oov_buckets),
  `hash` (`hash_buckets`), `identity` (int ids in [0, `size`); out-of-range values are
  clipped into it and counted: preprocessing's `identity_out_of_range`). `vocabulary` and
  `hash` take `new_id_row: true`: an id the analysis window never saw takes one extra row,
  the table's last (a Bloom filter of the window's ids, `seen_filter_bits`, default 16
  per row; components/ctr/seen_filter.py), instead of an OOV bucket or a hashed row.
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
from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from components.config_errors import place_in, problems
from components.ctr.feature_config_model import (  # noqa: F401  (re-exported)
    DERIVED_ID, DRIFT_METRICS, INT_THRESHOLDS, KINDS, NAME, PARAM_MIN, RAW_TYPES,
    SHARE_THRESHOLDS, THRESHOLDS, TRANSFORM_PARAMS, FeatureConfigFile,
    default_seen_filter_bits, raw_type)
from retrain.common import record_limits
from retrain.common.errors import ConfigError
from retrain.common.run_inputs import parse_config_text, read_config_file

FEATURE_CONFIG_FILE = "feature_config.json"   # in the preprocess output dir
# Inside an exported SavedModel (TF Serving's folder for extra files), so the config
# travels with the model into the registry: the raw inputs its signature takes.
MODEL_CONFIG_PATH = f"assets.extra/{FEATURE_CONFIG_FILE}"
PACKAGED_DIR = Path(__file__).resolve().parent / "feature_configs"
DEFAULT_CONFIG = PACKAGED_DIR / "generated.yaml"

# The vocabulary of the file (kinds, transforms and their parameters, span thresholds) lives
# with the file's pydantic model and is re-exported here (config suggest imports _NAME).
_NAME = NAME


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
    new_id_row: bool = False            # hash, vocabulary: never-seen ids get the last row
    seen_filter_bits: int | None = None  # with new_id_row (default: 16 per row)
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
    def ids_size(self) -> int | None:
        """Rows of a vocabulary or hash field before its new-id row (None: other transforms)."""
        if self.transform == "vocabulary":
            return self.top_k + self.oov_buckets
        if self.transform == "hash":
            return self.hash_buckets
        return None

    @property
    def new_id_index(self) -> int | None:
        """The new-id row (the table's last), or None without one."""
        return self.ids_size if self.new_id_row else None

    @property
    def filter_bits(self) -> int | None:
        """Bits of the window's seen-id filter, or None without a new-id row."""
        if not self.new_id_row:
            return None
        if self.seen_filter_bits:
            return self.seen_filter_bits
        return default_seen_filter_bits(self.ids_size)

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
        if self.transform in ("vocabulary", "hash"):
            return self.ids_size + (1 if self.new_id_row else 0)
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
    factorization machine: user x item and user x category tastes); embeddings: per
    field (name, dim, init or None, l2 or None): an embedding into the MLP of that width,
    initializer and prior strength (the field joins deep_fields)."""
    deep_fields: tuple[str, ...] = ()
    count_features: tuple[str, ...] = ()
    id_l2: tuple[tuple[str, float], ...] = ()
    fm_fields: tuple[str, ...] = ()
    embeddings: tuple[tuple[str, int, str | None, float | None], ...] = ()

    def id_l2_dict(self) -> dict[str, float]:
        return dict(self.id_l2)

    def embedding_dict(self) -> dict[str, dict]:
        """{field: {"dim", "init", "l2"}}, None where the trainer's default applies."""
        return {k: {"dim": d, "init": i, "l2": l2} for k, d, i, l2 in self.embeddings}


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
    clicks), and refuse a span's 60 rows with 3 clicks. `refuse_confidently_worse` keeps
    the rules that never bless a candidate confidently worse than the published model."""
    min_eval_rows: int = 200
    min_eval_positives: int = 20
    # Off: a candidate confidently (if slightly) worse than the published model may still
    # be blessed within the change allowances (a small feed whose trainings differ more
    # than the eval rows can resolve).
    refuse_confidently_worse: bool = True


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
                if value is not None and value != "" and value is not False:  # defaults left
                    out[field.name] = value                                  # out: fingerprint
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
                         if self.model.fm_fields else {}),
                      **({"embeddings": {k: {x: v for x, v in e.items() if v is not None}
                                         for k, e in self.model.embedding_dict().items()}}
                         if self.model.embeddings else {})},
        })
        if self.validation.to_dict():
            out["validation"] = self.validation.to_dict()
        if self.gate != GateDefaults():   # only when set: other configs keep their fingerprint
            gate = dataclasses.asdict(self.gate)
            if gate["refuse_confidently_worse"]:   # the default: configs keep their fingerprint
                del gate["refuse_confidently_worse"]
            out["gate"] = gate
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

    def identity_sizes(self) -> dict[str, int]:
        """Identity features and their sizes: values outside [0, size) are clipped by the
        transform and counted by preprocessing."""
        return {f.name: f.size for f in self.features if f.transform == "identity"}

    def new_id_rows(self) -> dict[str, int]:
        """Fields with a new-id row and its index (the table's last row)."""
        return {f.name: f.new_id_index for f in self.features if f.new_id_row}

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


def from_dict(d: Mapping[str, Any], source: str = "") -> FeatureConfig:
    """Validate (FeatureConfigFile) and build a FeatureConfig; every problem is reported in
    one ConfigError, each with its place, the rule and the expected type."""
    if not isinstance(d, Mapping):
        raise ConfigError(f"feature config{' ' + source if source else ''} must be a mapping "
                          f"at the top level, got {type(d).__name__}")
    d = dict(d)
    try:
        raw = FeatureConfigFile.model_validate(d)
    except ValidationError as e:
        found = problems(e, FeatureConfigFile, place_in(d, ("features", "crosses")))
        head = f"invalid feature config{' ' + source if source else ''}"
        raise ConfigError(f"{head}: {len(found)} problem(s):\n  - "
                          + "\n  - ".join(found)) from None
    features = []
    for f in raw.features:
        params = {k: getattr(f, k) for k in ("top_k", "frequency_threshold", "oov_buckets",
                                             "hash_buckets", "size", "buckets", "max_values",
                                             "seen_filter_bits")}
        params["new_id_row"] = bool(f.new_id_row)
        if f.transform == "vocabulary" and params["oov_buckets"] is None:
            params["oov_buckets"] = 1
        features.append(Feature(
            name=f.name, kind=f.kind, transform=f.transform, description=f.description,
            dtype=raw_type(f.kind, f.dtype, f.transform) if f.kind == "categorical" else None,
            **params))
    v = raw.validation

    def by_column(entries):
        return tuple(sorted(entries, key=lambda e: e[0]))
    validation = Validation(
        extra_columns=by_column(v.extra_columns.items()),
        ranges=by_column((c, lo, hi) for c, (lo, hi) in v.ranges.items()),
        allowed_values=by_column((c, tuple(x)) for c, x in v.allowed_values.items()),
        patterns=by_column(v.patterns.items()),
        drift=by_column((n, r.metric, float(r.max), r.severity) for n, r in v.drift.items()),
        thresholds=by_column(v.thresholds.given().items()))
    m = raw.model
    return FeatureConfig(
        label=raw.label, example_id=raw.example_id or DERIVED_ID, features=tuple(features),
        crosses=tuple(Cross(name=c.name, features=tuple(c.features),
                            hash_buckets=c.hash_buckets, description=c.description)
                      for c in raw.crosses),
        slices=tuple(raw.slices),
        model=ModelDefaults(deep_fields=tuple(m.deep_fields),
                            count_features=tuple(m.count_features),
                            id_l2=tuple((k, float(x)) for k, x in m.id_l2.items()),
                            fm_fields=tuple(m.fm_fields),
                            embeddings=tuple((k, e.dim, e.init, e.l2)
                                             for k, e in sorted(m.embeddings.items()))),
        name=raw.name, description=raw.description, validation=validation,
        gate=GateDefaults(raw.gate.min_eval_rows, raw.gate.min_eval_positives,
                          raw.gate.refuse_confidently_worse),
        derived_id=raw.example_id is None)


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
