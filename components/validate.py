"""Data validation gate for one day of raw CTR click logs (great-expectations 1.x).

A bad day (renamed column, a producer that writes hour as text, no clicks logged, a
truncated export) must stop the DAG before preprocessing and training spend hours on it,
and the person on call must see from the task log alone *what* broke. So this step runs
one expectation suite, kept in code next to the feature list it checks (`build_suite`,
versioned with the repo), over the whole span and raises `ValidationFailed` naming every
failed expectation with its column and observed value.

Reads  `<span_dir>/part-*.parquet` (requires `_SUCCESS`; `_truth.parquet` is ignored).
Writes `<out_dir>/validation.json` (compact summary) and `<out_dir>/gx_result.json` (the
full GX result), atomically, pass or fail: a failed span leaves its report behind.

Module top level is stdlib only, so a DAG file can import `ValidateSpec`; pandas, pyarrow
and great_expectations (about 9 s to import here) load inside `run`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

from components.common.atomic import atomic_dir, write_json
from components.common.step import main
from components.ctr import features as F

log = logging.getLogger("retrain.validate")

SUITE_NAME = "ctr_raw_clicks"
# Bump when the suite's meaning changes (not for threshold changes: those are in the spec
# and in the suite fingerprint recorded with every report).
SUITE_VERSION = 1

SUCCESS_MARKER = "_SUCCESS"
PART_GLOB = "part-*.parquet"
SUMMARY_FILE = "validation.json"
GX_RESULT_FILE = "gx_result.json"

# Device values the serving side sends. Not in features.py on purpose (that module lists
# feature *names*); a new device type should fail validation until someone looks at it.
ALLOWED_DEVICES: tuple[str, ...] = ("ios", "android", "web", "tablet", "other")

HOUR_RANGE = (0, 23)
POSITION_RANGE = (1, 31)
LABEL_VALUES = (0, 1)
# Columns that must never be null: ids, label, context. Numeric features may be missing.
NEVER_NULL_COLUMNS: list[str] = [*F.RAW_STRING_COLUMNS, *F.RAW_INT_COLUMNS]
NON_NEGATIVE_COLUMNS: list[str] = list(F.NUMERIC_FEATURES)  # price, past clicks, age
EXPECTED_COLUMNS: list[str] = [*F.RAW_STRING_COLUMNS, *F.RAW_INT_COLUMNS,
                               *F.RAW_FLOAT_COLUMNS]
# GX type names for the pandas engine. "str" matches both pandas 3's default string
# dtype (dtype.type is str) and pandas 2's object columns (checked value by value).
COLUMN_TYPES: dict[str, str] = {
    **{c: "str" for c in F.RAW_STRING_COLUMNS},
    **{c: "int64" for c in F.RAW_INT_COLUMNS},
    **{c: "float64" for c in F.RAW_FLOAT_COLUMNS},
}
PARTIAL_UNEXPECTED = 10  # example values kept per failed expectation


@dataclasses.dataclass
class ValidateSpec:
    span_dir: str  # <root>/raw/ctr/dt=YYYY-MM-DD
    out_dir: str  # validation artifact dir (owned by this step; replaced atomically)
    min_rows: int = 1000
    max_rows: int = 50_000_000
    min_click_rate: float = 0.005
    max_click_rate: float = 0.2
    max_null_rate: float = 0.2  # per numeric feature
    require_success_marker: bool = True


class ValidationFailed(RuntimeError):
    """The span was read but broke at least one expectation (the report is written)."""

    def __init__(self, message: str, summary: dict | None = None):
        super().__init__(message)
        self.summary = summary or {}


# --------------------------------------------------------------------------- the suite


def build_suite(spec: ValidateSpec):
    """The expectation suite for a raw CTR span, built in code (not stored in a GX
    project), so it is reviewed and versioned with the feature list it checks."""
    _import_libs()
    import great_expectations as gx
    import great_expectations.expectations as gxe

    null_mostly = 1.0 - float(spec.max_null_rate)
    exps: list = [
        gxe.ExpectTableColumnsToMatchSet(column_set=list(EXPECTED_COLUMNS), exact_match=True),
        gxe.ExpectTableRowCountToBeBetween(min_value=spec.min_rows, max_value=spec.max_rows),
    ]
    exps += [gxe.ExpectColumnValuesToBeOfType(column=c, type_=t)
             for c, t in COLUMN_TYPES.items()]
    exps += [gxe.ExpectColumnValuesToNotBeNull(column=c) for c in NEVER_NULL_COLUMNS]
    exps += [gxe.ExpectColumnValuesToNotBeNull(column=c, mostly=null_mostly)
             for c in F.NUMERIC_FEATURES]
    exps += [
        gxe.ExpectColumnValuesToBeBetween(column="hour", min_value=HOUR_RANGE[0],
                                          max_value=HOUR_RANGE[1]),
        gxe.ExpectColumnValuesToBeBetween(column="position", min_value=POSITION_RANGE[0],
                                          max_value=POSITION_RANGE[1]),
    ]
    exps += [gxe.ExpectColumnValuesToBeBetween(column=c, min_value=0)
             for c in NON_NEGATIVE_COLUMNS]
    exps += [
        gxe.ExpectColumnValuesToBeInSet(column=F.LABEL_KEY, value_set=list(LABEL_VALUES)),
        gxe.ExpectColumnMeanToBeBetween(column=F.LABEL_KEY, min_value=spec.min_click_rate,
                                        max_value=spec.max_click_rate),
        gxe.ExpectColumnValuesToBeUnique(column=F.EXAMPLE_ID_KEY),
        gxe.ExpectColumnValuesToBeInSet(column="device", value_set=list(ALLOWED_DEVICES)),
    ]
    return gx.ExpectationSuite(name=SUITE_NAME, expectations=exps,
                               meta={"suite_version": SUITE_VERSION})


def suite_fingerprint(suite) -> str:
    """Content hash of the suite's expectations (types + kwargs), for lineage."""
    items = sorted(json.dumps([e.expectation_type, _jsonable(e.configuration.kwargs)],
                              sort_keys=True) for e in suite.expectations)
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- the step


def run(spec: ValidateSpec) -> dict:
    """Validate one raw CTR span; write the report; raise ValidationFailed if it fails."""
    _check_spec(spec)
    span_dir = Path(spec.span_dir)
    parts = _find_parts(span_dir, spec.require_success_marker)  # fail fast, before imports
    t0 = time.perf_counter()
    _import_libs()
    t_import = time.perf_counter()
    df, schema_diffs = _read_parts(parts)
    t_read = time.perf_counter()

    suite = build_suite(spec)
    fingerprint = suite_fingerprint(suite)
    gx_result = _run_suite(suite, df)
    t_gx = time.perf_counter()

    summary = _summarize(spec, suite, gx_result, df, parts, schema_diffs)
    summary.update(suite_name=SUITE_NAME, suite_version=SUITE_VERSION,
                   suite_fingerprint=fingerprint,
                   seconds={"import": round(t_import - t0, 3),
                            "read": round(t_read - t_import, 3),
                            "validate": round(t_gx - t_read, 3)})
    out_dir = Path(spec.out_dir)
    with atomic_dir(out_dir) as tmp:
        write_json(tmp / SUMMARY_FILE, summary)
        write_json(tmp / GX_RESULT_FILE, _jsonable(gx_result.to_json_dict()))
    report = out_dir / SUMMARY_FILE

    result = {"success": summary["success"], "rows": summary["rows"],
              "click_rate": summary["click_rate"], "n_failed": summary["n_failed"],
              "n_expectations": summary["n_expectations"], "report": str(report),
              "uri": str(out_dir)}
    if not summary["success"]:
        log.error("span %s failed %d of %d expectations; report %s", summary["span"],
                  summary["n_failed"], summary["n_expectations"], report)
        raise ValidationFailed(failure_message(summary), summary)
    log.info("span %s passed %d expectations: %d rows, click rate %.4f (import %.1fs, "
             "read %.2fs, validate %.2fs); report %s", summary["span"],
             summary["n_expectations"], summary["rows"], summary["click_rate"],
             t_import - t0, t_read - t_import, t_gx - t_read, report)
    return result


def _check_spec(spec: ValidateSpec) -> None:
    if not spec.span_dir or not spec.out_dir:
        raise ValueError("span_dir and out_dir must be set")
    if not 0 <= spec.min_rows <= spec.max_rows:
        raise ValueError(f"need 0 <= min_rows <= max_rows, got {spec.min_rows}, "
                         f"{spec.max_rows}")
    if not 0 <= spec.min_click_rate <= spec.max_click_rate <= 1:
        raise ValueError(f"need 0 <= min_click_rate <= max_click_rate <= 1, got "
                         f"{spec.min_click_rate}, {spec.max_click_rate}")
    if not 0 <= spec.max_null_rate <= 1:
        raise ValueError(f"max_null_rate must be in [0, 1], got {spec.max_null_rate}")


def _find_parts(span_dir: Path, require_marker: bool) -> list[Path]:
    if not span_dir.is_dir():
        raise FileNotFoundError(f"span directory does not exist: {span_dir}")
    if require_marker and not (span_dir / SUCCESS_MARKER).exists():
        raise FileNotFoundError(
            f"span {span_dir} has no {SUCCESS_MARKER} marker: the producer has not finished "
            f"writing it (or failed); refusing to validate a partial span")
    parts = sorted(span_dir.glob(PART_GLOB))
    if not parts:
        present = sorted(p.name for p in span_dir.iterdir())
        raise FileNotFoundError(
            f"span {span_dir} has no {PART_GLOB} files (found: {present or 'nothing'})")
    return parts


def _read_parts(parts: list[Path]):
    """All parts as one pandas DataFrame, plus the parts' schema differences (if any).

    Parts with different schemas are not an I/O error but a data problem: the span
    fails, and the parts are still concatenated in pandas (a type clash becomes an
    object column, a missing column becomes nulls) so the suite reports what it can.
    """
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for part in parts:
        try:
            tables.append(pq.read_table(part))
        except (OSError, pa.ArrowException) as e:
            raise ValueError(f"cannot read parquet part {part}: {e}") from e
    first = tables[0].schema
    if all(t.schema.equals(first, check_metadata=False) for t in tables[1:]):
        return pa.concat_tables(tables).to_pandas(), []
    diffs = [d for part, t in zip(parts[1:], tables[1:])
             for d in _schema_diff(parts[0].name, first, part.name, t.schema)]
    if diffs:
        log.warning("parts differ in schema: %s; concatenating in pandas", "; ".join(diffs))
    return pd.concat([t.to_pandas() for t in tables], ignore_index=True), diffs


def _type_name(t) -> str:
    # string and large_string (what pyarrow writes from a pandas 3 `str` column) are the
    # same column to every reader here; so are binary and large_binary.
    name = str(t)
    return {"large_string": "string", "string_view": "string", "large_binary": "binary",
            "binary_view": "binary"}.get(name, name)


def _schema_diff(ref_name: str, ref, name: str, schema) -> list[str]:
    out = []
    ref_types = {f.name: _type_name(f.type) for f in ref}
    types = {f.name: _type_name(f.type) for f in schema}
    for col in ref_types.keys() - types.keys():
        out.append(f"{name} lacks {col}")
    for col in types.keys() - ref_types.keys():
        out.append(f"{name} has extra column {col}")
    for col in sorted(ref_types.keys() & types.keys()):
        if ref_types[col] != types[col]:
            out.append(f"{name} has {col}: {types[col]} ({ref_name}: {ref_types[col]})")
    return sorted(out)


def _import_libs() -> None:
    """Import pandas, pyarrow and GX (about 9 s for GX here) with GX's logging quietened.

    Importing great_expectations logs a few hundred INFO lines from its docs decorators
    ("Skipping registering function ...") and every ephemeral context one more ("Created
    temporary directory ... for ephemeral docs site"): under step.main's INFO root logger
    they would bury the task log. Our own messages say what happened.
    """
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    # This module sets its own logger to INFO at import (GX 1.24, types/base.py:78).
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)


def _run_suite(suite, df):
    """Run `suite` over `df` in a throwaway in-memory GX context (nothing on disk)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    # GX's own switch for its tqdm "Calculating Metrics" bars (Validator reads it from
    # the context; the TQDM_DISABLE env var would work too, but for every library).
    context.variables.progress_bars = ProgressBarsConfig(globally=False,
                                                         metric_calculations=False)
    batch_def = (context.data_sources.add_pandas("raw_span")
                 .add_dataframe_asset("clicks")
                 .add_batch_definition_whole_dataframe("whole_span"))
    suite = context.suites.add(suite)
    vd = context.validation_definitions.add(
        gx.ValidationDefinition(name=f"{SUITE_NAME}_v{SUITE_VERSION}", data=batch_def,
                                suite=suite))
    return vd.run(batch_parameters={"dataframe": df},
                  result_format={"result_format": "SUMMARY",
                                 "partial_unexpected_count": PARTIAL_UNEXPECTED})


# --------------------------------------------------------------------------- reporting


def _summarize(spec: ValidateSpec, suite, gx_result, df, parts: list[Path],
               schema_diffs: list[str] | None = None) -> dict:
    import pandas as pd

    columns = set(df.columns)
    dtypes = {c: str(df[c].dtype) for c in df.columns}
    order = {e.id: i for i, e in enumerate(suite.expectations)}
    results = sorted(gx_result.results,
                     key=lambda r: order.get(r.expectation_config.id, len(order)))
    compact = [_compact(r, dtypes) for r in results]
    failed = [{k: c[k] for k in ("expectation", "column", "observed", "details")}
              for c in compact if not c["success"]]

    click_rate = None
    if F.LABEL_KEY in columns and pd.api.types.is_numeric_dtype(df[F.LABEL_KEY]) \
            and len(df):
        click_rate = float(df[F.LABEL_KEY].mean())
    null_rates = ({c: round(float(df[c].isna().mean()), 6) for c in df.columns}
                  if len(df) else {c: None for c in df.columns})
    return _jsonable({
        "span_dir": str(Path(spec.span_dir)),
        "span": _span_label(Path(spec.span_dir)),
        "parts": [p.name for p in parts],
        "rows": int(len(df)),
        "success": bool(gx_result.success) and not failed and not schema_diffs,
        "parts_schema_diffs": schema_diffs or [],
        "n_expectations": len(compact),
        "n_failed": len(failed),
        "failed": failed,
        "results": compact,
        "click_rate": click_rate,
        "null_rates": null_rates,
        "dtypes": dtypes,
        "spec": dataclasses.asdict(spec),
    })


def _compact(r, dtypes: dict[str, str]) -> dict:
    cfg = r.expectation_config
    kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
    column = kwargs.get("column")
    res = dict(r.result or {})
    error = _exception_message(r.exception_info)
    details: dict[str, Any] = {"expected": kwargs}
    for key in ("observed_value", "unexpected_count", "unexpected_percent", "element_count",
                "missing_count"):
        if key in res:
            details[key] = res[key]
    examples = [] if cfg.type == "expect_column_values_to_not_be_null" else _examples(res)
    if examples:
        details["unexpected_examples"] = examples
    if res.get("details"):
        details["gx_details"] = res["details"]
    if error:
        details["error"] = error
    return {
        "expectation": cfg.type,
        "column": column,
        "success": bool(r.success),
        "observed": None if r.success else _observed_text(cfg.type, kwargs, res, error,
                                                          column, dtypes),
        "details": details,
    }


def _exception_message(info) -> str | None:
    """GX 1.x puts either {raised_exception, exception_message, ...} or, when a metric
    failed to resolve, {metric_id: {exception_message, ...}} in exception_info."""
    if not info:
        return None
    if "raised_exception" in info:
        return info.get("exception_message") if info.get("raised_exception") else None
    for value in info.values():
        if isinstance(value, dict) and value.get("exception_message"):
            return str(value["exception_message"])
    return None


def _examples(res: dict) -> list:
    """Distinct example values (GX lists each NaN on its own: NaN != NaN)."""
    values = [c["value"] for c in res.get("partial_unexpected_counts") or []] \
        or list(res.get("partial_unexpected_list") or [])
    seen, keys = [], set()
    for v in values:
        key = "NaN" if isinstance(v, float) and math.isnan(v) else repr(v)
        if key not in keys:
            keys.add(key)
            seen.append(v)
    return seen


def _observed_text(etype: str, kwargs: dict, res: dict, error: str | None,
                   column: str | None, dtypes: dict[str, str]) -> str:
    if column is not None and column not in dtypes:
        return "column missing"
    if error:
        return f"could not be evaluated ({error})"
    if etype == "expect_table_columns_to_match_set":
        mismatched = (res.get("details") or {}).get("mismatched") or {}
        bits = []
        if mismatched.get("missing"):
            bits.append(f"missing {sorted(mismatched['missing'])}")
        if mismatched.get("unexpected"):
            bits.append(f"unexpected {sorted(mismatched['unexpected'])}")
        return "; ".join(bits) or f"observed {res.get('observed_value')}"
    if "unexpected_count" in res:
        n = res["unexpected_count"]
        pct = res.get("unexpected_percent")
        notes = [f"{pct:.3g}% of rows"] if isinstance(pct, (int, float)) else []
        if etype == "expect_column_values_to_not_be_null":
            mostly = kwargs.get("mostly")
            if mostly is not None and mostly < 1:
                notes.append(f"allowed {(1 - mostly) * 100:.3g}%")
            what = "null" if n == 1 else "nulls"
        else:
            examples = ", ".join(_fmt(v) for v in _examples(res)[:5])
            if examples:
                notes.append(f"e.g. {examples}")
            if etype == "expect_column_values_to_be_of_type":
                notes.insert(0, f"column dtype {dtypes[column]}")
            what = {"expect_column_values_to_be_unique": "row(s) with a duplicated value",
                    "expect_column_values_to_be_of_type":
                        f"value(s) not of type {kwargs.get('type_')}",
                    }.get(etype, "unexpected value" if n == 1 else "unexpected values")
        return f"{n} {what}" + (f" ({'; '.join(notes)})" if notes else "")
    observed = res.get("observed_value")
    if etype == "expect_column_values_to_be_of_type":
        return f"observed type {observed}, expected {kwargs.get('type_')}"
    if "min_value" in kwargs or "max_value" in kwargs:
        return (f"observed {_fmt(observed)}, expected "
                f"[{_fmt(kwargs.get('min_value'))}, {_fmt(kwargs.get('max_value'))}]")
    return f"observed {_fmt(observed)}"


def failure_message(summary: dict) -> str:
    """One readable paragraph naming every failed expectation (and schema clash)."""
    items = "; ".join(f"{f['expectation']}({f['column'] or 'table'}): {f['observed']}"
                      for f in summary["failed"])
    msg = (f"span {summary['span']} failed {summary['n_failed']} of "
           f"{summary['n_expectations']} expectations" + (f": {items}" if items else ""))
    diffs = summary.get("parts_schema_diffs")
    if diffs:
        msg += f"; parquet parts differ in schema: {'; '.join(diffs)}"
    return msg


def _span_label(span_dir: Path) -> str:
    return span_dir.name or str(span_dir)


def _fmt(v) -> str:
    if v is None:
        return "None"
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else f"{v:.6g}"
    if isinstance(v, str):
        return repr(v)
    return str(v)


def _jsonable(obj):
    """Plain JSON values: numpy scalars to Python, NaN/inf to None, tuples to lists."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    item = getattr(obj, "item", None)  # numpy scalar
    if callable(item):
        try:
            return _jsonable(item())
        except (TypeError, ValueError):
            pass
    return str(obj)


if __name__ == "__main__":
    sys.exit(main(ValidateSpec, run))
