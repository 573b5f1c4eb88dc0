"""Data validation gate for one day of labelled text (great-expectations 1.x).

A broken text span (empty or truncated texts, mojibake from a wrong encoding, a label the
model has no head for, an export that duplicated every row, a day with one class only)
must stop the DAG before fine-tuning spends an hour on it, and the task log must say what
broke. The suite is built in code next to the label lists it checks (`config.py`):

- columns exactly as config.RAW_COLUMNS; row count within bounds; ids unique;
- text: never null, never empty after stripping, length (characters) within bounds,
  median length within bounds (the length distribution), no control characters or
  U+FFFD replacement characters (the encoding);
- labels: sentiment and topic in the configured sets (null = unlabelled is allowed up to
  `max_unlabelled_rate`);
- class balance: the largest sentiment / topic class holds at most `max_class_share`
  of the labelled rows;
- duplicates: the share of rows whose normalized text repeats another's is at most
  `max_duplicate_rate`.

GX 1.x has no expectation for "share of the largest class" or "duplicate share", so
those two are derived columns (`_majority_*`, `_is_duplicate`: 0/1 per row) checked with
`ExpectColumnMeanToBeBetween`; the report names them like any other expectation.

Reads `<span_dir>/part-*.parquet` (requires `_SUCCESS`). Writes `<out_dir>/validation.json`
and `gx_result.json`, pass or fail; raises `ValidationFailed` naming every failure.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import sys
import time
from pathlib import Path

from components.common.atomic import atomic_dir, write_json
from components.common.step import main
from components.text import config as C
from components.validate import ValidationFailed  # one gate exception for every family

log = logging.getLogger("retrain.text.validate")

SUITE_NAME = "text_raw_labelled"
SUITE_VERSION = 1
SUMMARY_FILE = "validation.json"
GX_RESULT_FILE = "gx_result.json"
BAD_CHARS_REGEX = r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffd]"


@dataclasses.dataclass
class TextValidateSpec:
    span_dir: str
    out_dir: str
    min_rows: int = 50
    max_rows: int = 10_000_000
    min_chars: int = 2
    max_chars: int = 20_000
    min_median_chars: int = 10
    max_median_chars: int = 5_000
    max_unlabelled_rate: float = 0.5
    max_class_share: float = 0.95
    max_duplicate_rate: float = 0.2
    require_success_marker: bool = True


def derived_columns(df):
    """Add the 0/1 helper columns the balance and duplicate expectations read."""
    import re

    norm = df[C.TEXT].fillna("").astype(str).map(
        lambda s: re.sub(r"\s+", " ", s).strip().casefold())
    out = df.assign(_is_duplicate=norm.duplicated(keep="first").astype("int64"),
                    _text_chars=df[C.TEXT].fillna("").astype(str).str.strip().str.len())
    for task in C.TASKS:
        labelled = df[task].dropna() if task in df.columns else []
        if len(labelled):
            top = labelled.value_counts().idxmax()
            col = (df[task] == top).astype("float64").where(df[task].notna())
        else:
            col = df[C.TEXT].map(lambda _: float("nan")) if C.TEXT in df.columns else []
        out[f"_majority_{task}"] = col
    return out


def _import_gx() -> None:
    # GX logs hundreds of INFO lines at import; our own messages say what happened.
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations  # noqa: F401
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)


def _find_parts(span_dir: Path, require_marker: bool) -> list[Path]:
    if not span_dir.is_dir():
        raise FileNotFoundError(f"span directory does not exist: {span_dir}")
    if require_marker and not (span_dir / "_SUCCESS").exists():
        raise FileNotFoundError(f"span {span_dir} has no _SUCCESS marker: refusing to "
                                f"validate a partial span")
    parts = sorted(span_dir.glob("part-*.parquet"))
    if not parts:
        raise FileNotFoundError(f"span {span_dir} has no part-*.parquet files")
    return parts


def _read_parts(parts: list[Path]):
    import pandas as pd
    import pyarrow.parquet as pq

    frames = []
    for part in parts:
        try:
            frames.append(pq.read_table(part).to_pandas())
        except Exception as e:  # noqa: BLE001 - any unreadable part fails the span
            raise ValueError(f"cannot read parquet part {part}: {e}") from e
    cols = [tuple(f.columns) for f in frames]
    diffs = [f"{p.name} has columns {list(c)}" for p, c in zip(parts[1:], cols[1:])
             if c != cols[0]]
    return pd.concat(frames, ignore_index=True), diffs


def _run_suite(suite, df):
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False,
                                                         metric_calculations=False)
    batch_def = (context.data_sources.add_pandas("text_span").add_dataframe_asset("texts")
                 .add_batch_definition_whole_dataframe("whole_span"))
    suite = context.suites.add(suite)
    vd = context.validation_definitions.add(gx.ValidationDefinition(
        name=f"{SUITE_NAME}_v{SUITE_VERSION}", data=batch_def, suite=suite))
    return vd.run(batch_parameters={"dataframe": df},
                  result_format={"result_format": "SUMMARY", "partial_unexpected_count": 5})


def _compact(r) -> dict:
    cfg = r.expectation_config
    kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
    res = dict(r.result or {})
    observed = None
    if not r.success:
        bits = []
        if "observed_value" in res:
            bits.append(f"observed {_jsonable(res['observed_value'])!r}")
        if res.get("unexpected_count"):
            bits.append(f"{res['unexpected_count']} unexpected "
                        f"({res.get('unexpected_percent', 0):.1f}%)")
        examples = res.get("partial_unexpected_list") or []
        if examples:
            bits.append(f"e.g. {examples[:3]!r}")
        info = r.exception_info or {}
        if info.get("raised_exception"):
            bits.append(f"error {info.get('exception_message')}")
        limits = {k: kwargs[k] for k in ("min_value", "max_value", "value_set", "regex")
                  if k in kwargs}
        observed = ", ".join(bits) + (f" (expected {limits})" if limits else "")
    return {"expectation": cfg.type, "column": kwargs.get("column"),
            "success": bool(r.success), "observed": observed,
            "details": {"expected": kwargs, **{k: res[k] for k in (
                "observed_value", "unexpected_count", "unexpected_percent", "element_count")
                if k in res}}}


def _jsonable(obj):
    import math
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return _jsonable(item())
        except (TypeError, ValueError):
            pass
    return str(obj)


def build_suite(spec: TextValidateSpec):
    _import_gx()
    import great_expectations as gx
    import great_expectations.expectations as gxe

    label_mostly = 1.0 - float(spec.max_unlabelled_rate)
    exps = [
        gxe.ExpectTableColumnsToMatchSet(
            column_set=list(C.RAW_COLUMNS) + ["_is_duplicate", "_text_chars"]
            + [f"_majority_{t}" for t in C.TASKS], exact_match=True),
        gxe.ExpectTableRowCountToBeBetween(min_value=spec.min_rows, max_value=spec.max_rows),
        gxe.ExpectColumnValuesToBeUnique(column=C.EXAMPLE_ID),
        gxe.ExpectColumnValuesToNotBeNull(column=C.EXAMPLE_ID),
        gxe.ExpectColumnValuesToNotBeNull(column=C.TEXT),
        gxe.ExpectColumnValuesToBeBetween(column="_text_chars", min_value=spec.min_chars,
                                          max_value=spec.max_chars),
        gxe.ExpectColumnMedianToBeBetween(column="_text_chars",
                                          min_value=spec.min_median_chars,
                                          max_value=spec.max_median_chars),
        gxe.ExpectColumnValuesToNotMatchRegex(column=C.TEXT, regex=BAD_CHARS_REGEX),
        gxe.ExpectColumnMeanToBeBetween(column="_is_duplicate", min_value=0.0,
                                        max_value=spec.max_duplicate_rate),
    ]
    for task, labels in C.TASKS.items():
        exps += [
            gxe.ExpectColumnValuesToBeInSet(column=task, value_set=list(labels)),
            gxe.ExpectColumnValuesToNotBeNull(column=task, mostly=label_mostly),
            gxe.ExpectColumnMeanToBeBetween(column=f"_majority_{task}", min_value=0.0,
                                            max_value=spec.max_class_share),
        ]
    return gx.ExpectationSuite(name=SUITE_NAME, expectations=exps,
                               meta={"suite_version": SUITE_VERSION})


def run(spec: TextValidateSpec) -> dict:
    """Validate one labelled text span; write the report; raise ValidationFailed if bad."""
    span_dir = Path(spec.span_dir)
    parts = _find_parts(span_dir, spec.require_success_marker)
    t0 = time.perf_counter()
    _import_gx()
    df, schema_diffs = _read_parts(parts)
    missing = [c for c in C.RAW_COLUMNS if c not in df.columns]
    for c in missing:  # reported by the column-set expectation; filled so the rest runs
        df[c] = None
    df = derived_columns(df)
    suite = build_suite(spec)
    fingerprint = hashlib.sha256("\n".join(sorted(
        json.dumps([e.expectation_type, _jsonable(e.configuration.kwargs)], sort_keys=True)
        for e in suite.expectations)).encode()).hexdigest()[:16]
    gx_result = _run_suite(suite, df)
    compact = [_compact(r) for r in gx_result.results]
    failed = [{k: c[k] for k in ("expectation", "column", "observed", "details")}
              for c in compact if not c["success"]]
    label_counts = {t: {str(k): int(v) for k, v in df[t].value_counts().items()}
                    for t in C.TASKS}
    summary = _jsonable({
        "span_dir": str(span_dir), "span": span_dir.name, "parts": [p.name for p in parts],
        "rows": int(len(df)), "success": bool(gx_result.success) and not failed
        and not schema_diffs, "parts_schema_diffs": schema_diffs,
        "n_expectations": len(compact), "n_failed": len(failed), "failed": failed,
        "results": compact, "label_counts": label_counts,
        "duplicate_rate": float(df["_is_duplicate"].mean()) if len(df) else None,
        "median_chars": float(df["_text_chars"].median()) if len(df) else None,
        "suite_name": SUITE_NAME, "suite_version": SUITE_VERSION,
        "suite_fingerprint": fingerprint, "seconds": round(time.perf_counter() - t0, 2),
        "spec": dataclasses.asdict(spec)})
    out_dir = Path(spec.out_dir)
    with atomic_dir(out_dir) as tmp:
        write_json(tmp / SUMMARY_FILE, summary)
        write_json(tmp / GX_RESULT_FILE, _jsonable(gx_result.to_json_dict()))
    report = out_dir / SUMMARY_FILE
    result = {"success": summary["success"], "rows": summary["rows"],
              "n_failed": summary["n_failed"], "n_expectations": summary["n_expectations"],
              "label_counts": label_counts, "report": str(report), "uri": str(out_dir)}
    if not summary["success"]:
        items = "; ".join(f"{f['expectation']}({f['column'] or 'table'}): {f['observed']}"
                          for f in failed)
        msg = (f"span {span_dir.name} failed {len(failed)} of {len(compact)} expectations"
               + (f": {items}" if items else "")
               + (f"; parts differ in schema: {'; '.join(schema_diffs)}" if schema_diffs else ""))
        log.error("%s; report %s", msg, report)
        raise ValidationFailed(msg, summary)
    log.info("span %s passed %d expectations: %d rows; report %s", span_dir.name,
             len(compact), summary["rows"], report)
    return result


if __name__ == "__main__":
    sys.exit(main(TextValidateSpec, run))
