"""The CTR family's raw log format: which part files a span folder may hold, what a record
must be, and the bounds a reader holds to.

One home for what validation, preprocessing, `retrain config suggest` and the benches
accept, so they never disagree about a folder (issue 47, design rule 26): the part
suffixes, the record layout a feature config implies (`RawLayout`), the record check and
the reasons a record is refused. The readers that apply them to bytes are
`components.ctr.rawread`. Stdlib only.
"""
from __future__ import annotations

import dataclasses
import math

from retrain.common.record_limits import RecordLimits

# Input formats, chosen by file extension.
PARQUET_SUFFIXES = (".parquet",)
JSONL_SUFFIXES = (".jsonl.gz", ".json.gz", ".jsonl", ".json")
PART_SUFFIXES = PARQUET_SUFFIXES + JSONL_SUFFIXES

# Why a record was routed to the dead-letter output (the summary counts each).
REJECT_REASONS = ("bad_json", "non_utf8", "truncated_record", "oversize_line", "not_an_object",
                  "missing_field", "wrong_type", "bad_value", "oversize_value", "too_deep",
                  "invalid_text")
# A JSONL line longer than this is rejected as oversize (never held whole).
DEFAULT_MAX_LINE_BYTES = 1 << 20
SAMPLE_CHARS = 2048   # a rejected record's text is kept up to this length

# The kind of the example id column in a layout: text, or an integer read as its decimal
# text (42 -> "42"). Producers write ids either way; read as one text form, the row gets
# the same eval bucket, sample value and duplicate count whichever they chose. A float is
# never an id (1.0 and 1 would be one id, 1.5 something made up).
ID_KIND = "id"
KIND_TEXT = {ID_KIND: "str or int (the example id)"}


@dataclasses.dataclass(frozen=True)
class RawLayout:
    """The raw columns the readers read, from the feature config (any other field of a
    record is ignored): kind "str", "int", "float" (null allowed: becomes NaN) or
    "str_list" (a JSON array of strings; null or missing: no values); the example id
    column is kind `ID_KIND` however the layout was built."""
    columns: tuple[tuple[str, str], ...]
    label: str
    example_id: str
    limits: RecordLimits = RecordLimits()
    # The logs have no id column: `columns` leaves it out and `read_batches` adds it,
    # derived from the row (features.derived_ids).
    derived_id: bool = False

    def __post_init__(self):
        object.__setattr__(self, "columns", tuple(
            (k, ID_KIND if k == self.example_id else kind) for k, kind in self.columns))

    @classmethod
    def of(cls, cfg) -> "RawLayout":
        return cls(tuple(cfg.input_columns().items()), cfg.label, cfg.example_id,
                   cfg.validation.record_limits(), cfg.derived_id)

    @property
    def kinds(self) -> dict[str, str]:
        return dict(self.columns)


def default_layout() -> RawLayout:
    from components.ctr import feature_config
    return RawLayout.of(feature_config.default())


def check_record(obj, layout: RawLayout | None = None) -> tuple[str, str] | None:
    """(reason, detail) if a decoded JSON record cannot be a training row, else None.

    Strict on purpose: a string where a number belongs (or the reverse) is a producer bug
    that should be seen in the dead-letter output, not silently coerced.
    """
    layout = layout or default_layout()
    if not isinstance(obj, dict):
        return "not_an_object", f"a JSON {type(obj).__name__}, not an object"
    for key, kind in layout.columns:
        value = obj.get(key)
        if value is None:
            if kind in ("float", "str_list"):
                continue
            return "missing_field", f"{key} is missing or null"
        if kind == "str":
            ok = isinstance(value, str)
        elif kind == ID_KIND:
            ok = isinstance(value, str) or type(value) is int
        elif kind == "int":
            ok = type(value) is int and -2**63 <= value < 2**63
        elif kind == "str_list":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        else:
            ok = type(value) in (int, float)
            if ok and not math.isfinite(value):
                return "bad_value", f"{key}: {value!r} is not a finite number"
        if not ok:
            return "wrong_type", (f"{key}: expected {KIND_TEXT.get(kind, kind)}, got "
                                  f"{type(value).__name__} {value!r:.40}")
    if obj[layout.label] not in (0, 1):
        return "bad_value", f"{layout.label} must be 0 or 1, got {obj[layout.label]!r:.40}"
    return None
