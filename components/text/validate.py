"""Data validation gate for one day of labelled text (great-expectations 1.x).

A broken text span (empty or truncated texts, mojibake from a wrong encoding, a label the
model has no head for, an export that duplicated every row, a day with one class only)
must stop the DAG before fine-tuning spends an hour on it, and the task log must say what
broke. The suite is built from the family's config file (`task_config.py`: the columns, the
tasks and their labels, and the dataset's bounds under `validation:`):

- the config's raw columns present; row count within bounds; ids unique (when the config
  names an id column: derived ids repeat exactly where records do);
- text: never null, never empty after stripping, length (characters) within bounds,
  median length within bounds (the length distribution), no control characters or
  U+FFFD replacement characters (the encoding);
- labels: every task's labels in its configured set (null = unlabelled is allowed up to
  `max_unlabelled_rate`);
- class balance: each task's largest class holds at most `max_class_share` of its
  labelled rows;
- duplicates: the share of rows whose normalized text repeats another's is at most
  `max_duplicate_rate`;
- the checkpoint can read the text: the share of its tokenizer's pieces that are [UNK] on a
  sample of the span warns above `unknown_token_warn` and fails above `unknown_token_fail`
  (an English vocabulary on Chinese text turns most of it into [UNK], silently).

A failed gate quarantines the span (`retrain.common.quarantine`); `override_reason`
lets a person pass it on purpose, recorded in the summary.

GX 1.x has no expectation for "share of the largest class" or "duplicate share", so
those two are derived columns (`_majority_*`, `_is_duplicate`: 0/1 per row) checked with
`ExpectColumnMeanToBeBetween`; the report names them like any other expectation.

Errors name, never echo (rule 22): a failed rule says its count and share against the
configured bound (and the bound's key), the file and lines of its first rows (`_part`,
`_line`) and the config file, never a text, label or id; the values stay in
gx_result.json, the report.

Reads `<span_dir>/part-*` (Parquet, JSONL, JSONL.gz; requires `_SUCCESS`). Writes
`<out_dir>/validation.json` and `gx_result.json`, pass or fail; raises `ValidationFailed`
naming every failure.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import sys
import time
from pathlib import Path

from retrain.common import quarantine
from retrain.common.rawfiles import PROGRESS_SECONDS
from retrain.common.atomic import atomic_dir, write_json
from retrain.common.errors import BadData, ValidationFailed
from retrain.common.jsonable import jsonable as _jsonable
from retrain.common.run_inputs import key_text, what, words_text
from retrain.common.step import main
from retrain.common.verdict import check_override, decide
from components.gx_session import GxSession, import_gx
from components.text import rawdata
from components.text import task_config as T

log = logging.getLogger("retrain.text.validate")

SUITE_NAME = "text_raw_labelled"
SUITE_VERSION = 2
SUMMARY_FILE = "validation.json"
GX_RESULT_FILE = "gx_result.json"
BAD_CHARS_REGEX = rawdata.BAD_CHARS_REGEX


@dataclasses.dataclass
class TextValidateSpec:
    span_dir: str
    out_dir: str
    text_config: str = ""                # the family config file; "": the bundled reviews
    run_id: str | None = None
    quarantine_dir: str | None = None    # <home>/quarantine/text
    override_reason: str | None = None   # pass a failing span on purpose (recorded)
    # With override_reason: the rule ids it lets through ("<expectation>:<column>", e.g.
    # "unknown_token_rate:text", as the report names them); None: every failed rule.
    override_rules: list[str] | None = None
    require_success_marker: bool = True


def derived_columns(df, cfg: T.TextConfig):
    """Add the 0/1 helper columns the balance and duplicate expectations read."""
    import re

    norm = df["text"].fillna("").astype(str).map(
        lambda s: re.sub(r"\s+", " ", s).strip().casefold())
    out = df.assign(_is_duplicate=norm.duplicated(keep="first").astype("int64"),
                    _text_chars=df["text"].fillna("").astype(str).str.strip().str.len())
    for task in (t.name for t in cfg.tasks):
        labelled = df[task].dropna() if task in df.columns else []
        if len(labelled):
            top = labelled.value_counts().idxmax()
            col = (df[task] == top).astype("float64").where(df[task].notna())
        else:
            col = df["text"].map(lambda _: float("nan"))
        out[f"_majority_{task}"] = col
    return out


def _read_span(parts: list[Path], cfg: T.TextConfig):
    """The span as canonical rows (id, text, one label column per task, and each row's
    place: `_part`, `_line`), the raw columns it lacks, the parts whose columns differ from
    the first's, and the text columns that hold other values than strings ({column:
    [count, its first place, the types seen]}: a number is not a text, though it would
    print as one). A label the config does not know is kept as its raw text, so the in-set
    expectation counts it (and gx_result.json, the report, shows it)."""
    import pandas as pd

    rows, diffs, cols, not_text = [], [], None, {}
    t0 = last = time.perf_counter()
    for n, part in enumerate(parts, 1):
        if time.perf_counter() - last > PROGRESS_SECONDS:   # a long read says where it is
            last = time.perf_counter()
            log.info("read %d of %d parts (%d rows) in %.0f s", n - 1, len(parts), len(rows),
                     last - t0)
        raw = rawdata.read_numbered(part, cfg.validation.record_limits())
        part_cols = sorted(rawdata.columns_of([r for _, r in raw]), key=str)
        if cols is None:
            cols = part_cols
        elif raw and part_cols != cols:
            # a JSONL key is the user's text too: named only if it is a short word
            diffs.append(f"{part.name} has columns [{', '.join(map(key_text, part_cols))}]")
        for line, r in raw:
            for c in cfg.text_columns():
                v = r.get(c)
                if v is not None and not isinstance(v, str):
                    seen = not_text.setdefault(c, [0, f"{part.name} line {line}", set()])
                    seen[0] += 1
                    seen[2].add(type(v).__name__)
            try:
                rows.append({**_canonical(r, cfg), "_part": part.name, "_line": line})
            except ValueError as e:  # an id that is no id (a float): the part is refused
                raise BadData(f"{part} line {line}: {e}") from None
    missing = [c for c in cfg.raw_columns() if c not in set(cols or ())] if rows else []
    frame = pd.DataFrame(rows, columns=["example_id", "text", *(t.name for t in cfg.tasks),
                                        *PLACE_COLUMNS])
    return frame, missing, diffs, not_text


def _canonical(row: dict, cfg: T.TextConfig) -> dict:
    out = {"example_id": cfg.id_of(row), "text": cfg.text_of(row)}
    for task in cfg.tasks:
        raw = row.get(task.label_column)
        try:
            out[task.name] = task.label_of(raw)
        except ValueError:
            out[task.name] = str(raw)
    return out


# Each row's place (file name, line of a JSONL file or row of a Parquet file): a failed
# row rule names where its first rows are, never what they hold (rule 22).
PLACE_COLUMNS = ("_part", "_line")
RESULT_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": 5,
                 "unexpected_index_column_names": list(PLACE_COLUMNS)}


def places(index_list, limit: int = 5) -> str:
    """`part-0.jsonl line 12, 40; part-1.jsonl line 3` from GX's partial index list."""
    by_part: dict[str, list[str]] = {}
    for item in (index_list or [])[:limit]:
        if isinstance(item, dict) and "_part" in item:
            by_part.setdefault(str(item["_part"]), []).append(str(item.get("_line")))
    return "; ".join(f"{part} line {', '.join(lines)}" for part, lines in by_part.items())


def _compact(r, total_rows: int | None = None) -> dict:
    """One expectation's outcome for the report and the refusal. What a failed rule says
    is counts, shares, the configured bound and the places of its first rows: never a
    value of the data (a text, a label, an id), which stays in gx_result.json."""
    cfg = r.expectation_config
    meta = cfg.meta or {}
    kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
    res = dict(r.result or {})
    observed = None
    if not r.success:
        bits = []
        if "unexpected_count" in res:
            n = int(res.get("unexpected_count") or 0)
            of = res.get("element_count") or total_rows
            share = n / of if of else 0.0
            bits.append(f"{n} of {of} row(s) ({share:.2%}) "
                        f"{meta.get('unexpected', 'break the rule')}")
            if "mostly" in kwargs and kwargs["mostly"] is not None:
                bits.append(f"tolerance {1 - float(kwargs['mostly']):.2%}"
                            + (f" (validation.{meta['tolerance']})"
                               if meta.get("tolerance") else ""))
            at = places(res.get("partial_unexpected_index_list"))
            if at:
                bits.append(f"first at {at}")
        elif "observed_value" in res:
            bits.append(f"observed {_number(res['observed_value'])}")
        info = r.exception_info or {}
        if info.get("raised_exception"):
            # a GX error can quote a value it choked on: its type and the rule only
            bits.append(f"could not be evaluated ({_exception_kind(info)})")
        limits = {k: kwargs[k] for k in ("min_value", "max_value") if kwargs.get(k) is not None}
        if "value_set" in kwargs:
            limits["labels"] = words_text(kwargs["value_set"])
        observed = ", ".join(bits) + (
            f" (expected {', '.join(f'{k} {v}' for k, v in limits.items())})" if limits else "")
    return {"expectation": cfg.type, "column": kwargs.get("column"),
            "success": bool(r.success), "observed": observed,
            "details": {"expected": kwargs, **{k: res[k] for k in (
                "observed_value", "unexpected_count", "unexpected_percent", "element_count")
                if k in res}, **({"first_at": [  # GX adds the row's value: left out
                    {c: str(item.get(c)) for c in PLACE_COLUMNS}
                    for item in res["partial_unexpected_index_list"] if isinstance(item, dict)]}
                    if res.get("partial_unexpected_index_list") else {})}}


def _number(value) -> str:
    """An observed figure (a count, a median length) as text; anything else only by type."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"<{what(value)}>"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _exception_kind(info: dict) -> str:
    message = str(info.get("exception_message") or "")
    return message.split(":", 1)[0][:60] if message else "an error"


def _label_counts(column, labels: list[str]) -> dict[str, int]:
    """Rows per configured label; any other value of the column is counted under
    OTHER_LABELS, never named (it is the user's data, and the result goes to XCom)."""
    counts = {str(k): int(v) for k, v in column.value_counts().items()}
    out = {label: counts.pop(label) for label in labels if label in counts}
    if counts:
        out[OTHER_LABELS] = sum(counts.values())
    return out


OTHER_LABELS = "<not a configured label>"


def build_suite(cfg: T.TextConfig):
    import_gx()
    import great_expectations as gx
    import great_expectations.expectations as gxe

    spec = cfg.validation
    label_mostly = 1.0 - float(spec.max_unlabelled_rate)
    exps = [
        gxe.ExpectTableRowCountToBeBetween(min_value=spec.min_rows, max_value=spec.max_rows),
        # Derived ids (no example_id column) are equal exactly for repeated records,
        # which the duplicate-rate rule below counts and preprocessing drops.
        *([gxe.ExpectColumnValuesToBeUnique(column="example_id",
                                            meta={"unexpected": "repeat another row's id"})]
          if cfg.example_id else []),
        gxe.ExpectColumnValuesToNotBeNull(column="example_id",
                                          meta={"unexpected": "have no id"}),
        gxe.ExpectColumnValuesToNotBeNull(column="text", meta={"unexpected": "have no text"}),
        gxe.ExpectColumnValuesToBeBetween(
            column="_text_chars", min_value=spec.min_chars, max_value=spec.max_chars,
            meta={"unexpected": "have a text length (characters, stripped) out of "
                                "validation.min_chars..max_chars"}),
        gxe.ExpectColumnMedianToBeBetween(column="_text_chars",
                                          min_value=spec.min_median_chars,
                                          max_value=spec.max_median_chars),
        gxe.ExpectColumnValuesToNotMatchRegex(
            column="text", regex=BAD_CHARS_REGEX, mostly=1.0 - float(spec.max_bad_encoding_rate),
            meta={"unexpected": "hold control characters or U+FFFD replacement characters "
                                "(bytes that were not UTF-8)",
                  "tolerance": "max_bad_encoding_rate"}),
        gxe.ExpectColumnMeanToBeBetween(column="_is_duplicate", min_value=0.0,
                                        max_value=spec.max_duplicate_rate),
    ]
    for task, labels in cfg.task_labels.items():
        exps += [
            gxe.ExpectColumnValuesToBeInSet(
                column=task, value_set=list(labels),
                meta={"unexpected": f"have a label that is not one of tasks.{task}.labels"}),
            gxe.ExpectColumnValuesToNotBeNull(
                column=task, mostly=label_mostly,
                meta={"unexpected": f"have no {task} label",
                      "tolerance": "max_unlabelled_rate"}),
            gxe.ExpectColumnMeanToBeBetween(column=f"_majority_{task}", min_value=0.0,
                                            max_value=spec.max_class_share),
        ]
    return gx.ExpectationSuite(name=SUITE_NAME, expectations=exps,
                               meta={"suite_version": SUITE_VERSION})


def unknown_token_check(cfg: T.TextConfig, texts: list[str]) -> dict:
    """How much of the span the checkpoint's vocabulary cannot read, and the verdict."""
    from components.text.tokens import unknown_token_rate

    v = cfg.validation
    measured = unknown_token_rate(cfg.checkpoint, texts, max_texts=v.unknown_token_sample)
    rate = measured["rate"]
    level = ("fail" if rate > v.unknown_token_fail else
             "warn" if rate > v.unknown_token_warn else "ok")
    return {**measured, "level": level, "warn_above": v.unknown_token_warn,
            "fail_above": v.unknown_token_fail,
            "observed": f"{rate:.1%} of {measured['pieces']} word pieces are [UNK] for "
                        f"checkpoint {measured['checkpoint']} (warn above "
                        f"{v.unknown_token_warn:.0%}, fail above {v.unknown_token_fail:.0%})"}


def run(spec: TextValidateSpec, session: GxSession | None = None) -> dict:
    """Validate one labelled text span; write the report; raise ValidationFailed if bad.
    `session`: a GX context shared by a window pass (components.text.validate_window)."""
    check_override(spec.override_reason)
    cfg = T.load_for(spec.text_config)
    span_dir = Path(spec.span_dir)
    t0 = time.perf_counter()
    try:
        # Refused before any read: no part, too many, a FIFO, a link out of the root.
        parts = rawdata.span_parts(span_dir, spec.require_success_marker,
                                   cfg.validation.record_limits())
        import_gx()
        df, missing, schema_diffs, not_text = _read_span(parts, cfg)
    except BadData as e:   # a part the reader refused (limits, broken JSON): no retry mends it
        quarantine.refuse_unreadable(spec.quarantine_dir, span_dir, spec.run_id, e)
        raise
    df = derived_columns(df, cfg)
    suite = build_suite(cfg)
    fingerprint = hashlib.sha256("\n".join(sorted(
        json.dumps([e.expectation_type, _jsonable(e.configuration.kwargs)], sort_keys=True)
        for e in suite.expectations)).encode()).hexdigest()[:16]
    gx_result = (session or GxSession("text_span")).validate("texts", suite, df, RESULT_FORMAT)
    compact = [_compact(r, len(df)) for r in gx_result.results]
    failed = [{k: c[k] for k in ("expectation", "column", "observed", "details")}
              for c in compact if not c["success"]]
    if missing:
        failed.insert(0, {"expectation": "required_columns", "column": None,
                          "observed": f"missing {missing} (the config names them)",
                          "details": {"required": cfg.raw_columns()}})
    for column, (count, first, types) in sorted(not_text.items()):
        failed.insert(0, {"expectation": "text_type", "column": column,
                          "observed": f"{count} value(s) are not text but "
                                      f"{', '.join(sorted(types))}, first at {first}",
                          "details": {"rows": count, "first_at": first,
                                      "types": sorted(types)}})
    unk = unknown_token_check(cfg, df["text"].astype(str).tolist()) if len(df) else None
    if unk and unk["level"] == "fail":
        failed.append({"expectation": "unknown_token_rate", "column": "text",
                       "observed": unk["observed"], "details": unk})
    elif unk and unk["level"] == "warn":
        log.warning("unknown-token rate: %s", unk["observed"])
    label_counts = {t: _label_counts(df[t], labels) for t, labels in cfg.task_labels.items()}
    for f in failed:
        f["rule"] = f"{f['expectation']}:{f['column']}" if f["column"] else f["expectation"]
    success = not failed and not schema_diffs
    verdict = decide(success, [f["rule"] for f in failed], spec.override_reason,
                     spec.override_rules)
    gate, not_named = verdict.gate, verdict.not_overridden
    summary = _jsonable({
        "span_dir": str(span_dir), "span": span_dir.name, "parts": [p.name for p in parts],
        "rows": int(len(df)), "success": success, "gate": gate,
        "override_reason": verdict.override_reason,
        "not_overridden": not_named, "parts_schema_diffs": schema_diffs,
        "n_expectations": len(compact) + 1, "n_failed": len(failed), "failed": failed,
        "results": compact, "label_counts": label_counts, "unknown_tokens": unk,
        "duplicate_rate": float(df["_is_duplicate"].mean()) if len(df) else None,
        "median_chars": float(df["_text_chars"].median()) if len(df) else None,
        "suite_name": SUITE_NAME, "suite_version": SUITE_VERSION,
        "suite_fingerprint": fingerprint, "seconds": round(time.perf_counter() - t0, 2),
        "config": T.resolved(cfg), "spec": dataclasses.asdict(spec)})
    out_dir = Path(spec.out_dir)
    report = out_dir / SUMMARY_FILE
    items = "; ".join(f"{f['expectation']}({f['column'] or 'table'}): {f['observed']}"
                      for f in failed)
    summary["quarantine"] = quarantine.settle(
        spec.quarantine_dir, span=span_dir.name, span_dir=str(span_dir), gate=gate,
        run_id=spec.run_id, failed=[items] if items else [], report=str(report),
        override_reason=summary["override_reason"])
    with atomic_dir(out_dir) as tmp:
        write_json(tmp / SUMMARY_FILE, summary)
        write_json(tmp / GX_RESULT_FILE, _jsonable(gx_result.to_json_dict()))
    result = {"success": success, "gate": gate, "rows": summary["rows"],
              "n_failed": summary["n_failed"], "n_expectations": summary["n_expectations"],
              "override_reason": summary["override_reason"],
              "unknown_token_rate": unk and unk["rate"], "label_counts": label_counts,
              "report": str(report), "uri": str(out_dir)}
    if not success:
        msg = (f"span {span_dir.name} failed {len(failed)} of {summary['n_expectations']} "
               "expectations" + (f": {items}" if items else "")
               + (f"; parts differ in schema: {'; '.join(schema_diffs)}" if schema_diffs else "")
               + (f"; the override names other rules, not {not_named} "
                  "(override_validation_rules)" if not_named else "")
               + f"; bounds from text config {cfg.source or 'the bundled reviews config'}")
        if gate == "failed":
            log.error("%s; report %s; quarantined: %s", msg, report,
                      (summary["quarantine"] or {}).get("marker"))
            raise ValidationFailed(msg, summary)
        log.warning("%s; passed by override (%r)", msg, spec.override_reason)
        return result
    log.info("span %s passed %d expectations: %d rows; report %s", span_dir.name,
             summary["n_expectations"], summary["rows"], report)
    return result


if __name__ == "__main__":
    sys.exit(main(TextValidateSpec, run))
