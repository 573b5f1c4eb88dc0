"""What a CTR span's validation says in words: each GX result compacted for the report,
what a failed rule observed (counts, the column and the bound; never a value of the
user's records, design rule 22), the failure message that names every failed rule, a
reader's reject detail as a message may show it, and the parquet parts' schema
differences. Stdlib only.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from retrain.common.run_inputs import HIDDEN_KEY, is_word, key_text
from components.ctr.validation_rules import DOMAINS_SUITE, ERROR, SAMPLE_SUITE, STATS_SUITE


def _compact(r, suite: str, table) -> dict:
    cfg = r.expectation_config
    meta = cfg.meta or {}
    kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
    column = kwargs.get("column")
    res = dict(r.result or {})
    error = _exception_message(r.exception_info)
    out = {"rule": meta.get("rule", cfg.type), "severity": meta.get("severity", ERROR),
           "text": meta.get("text", ""), "suite": suite, "expectation": cfg.type,
           "column": column, "success": bool(r.success)}
    if not r.success:
        out["observed"] = _observed_text(cfg.type, kwargs, res, error, column, table, suite)
        out["expected"] = {k: v for k, v in kwargs.items()
                           if k in ("min_value", "max_value", "value_set", "type_", "regex",
                                    "column_set")}
    elif "observed_value" in res:
        out["observed_value"] = res["observed_value"]
    return out


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


# What one unexpected item of a suite's table is (the domains table holds a column's
# distinct values, the sample suite sampled rows of the span).
_UNEXPECTED_UNIT = {DOMAINS_SUITE: "distinct value(s)", SAMPLE_SUITE: "sampled row(s)"}


def _observed_text(etype: str, kwargs: dict, res: dict, error: str | None,
                   column: str | None, table, suite: str = STATS_SUITE) -> str:
    """What a failed rule found, for the report, the task log and the refusal: counts,
    the column and the bound, never a value of the user's records (rule 22: a categorical
    value or a sampled text is the user's data; the Data Docs and gx_result.json, the
    report, list them). Only the statistics suite's own figures are shown."""
    if column is not None and column not in table.columns:
        return "column missing"
    if error:
        # GX's message can quote the value it choked on: the error's kind only
        return f"could not be evaluated ({error.split(':', 1)[0][:60]})"
    if etype == "expect_table_columns_to_match_set":
        mismatched = (res.get("details") or {}).get("mismatched") or {}
        bits = []
        if mismatched.get("missing"):
            bits.append(f"missing {sorted(mismatched['missing'])}")
        if mismatched.get("unexpected"):
            # a JSONL field is named only if it is a short word (it is the user's text)
            shown = sorted(repr(c) if is_word(c) else HIDDEN_KEY for c in mismatched["unexpected"])
            bits.append(f"unexpected [{', '.join(shown)}]")
        return "; ".join(bits) or f"observed {_fmt(res.get('observed_value'))}"
    if etype == "expect_column_values_to_be_of_type":
        return f"observed type {res.get('observed_value') or table[column].dtype}, " \
               f"expected {kwargs.get('type_')}"
    if "unexpected_count" in res:
        if suite == STATS_SUITE and etype == "expect_column_values_to_be_in_set" \
                and len(table) == 1:     # one row of the step's own figures (an Arrow type)
            values = [c["value"] for c in res.get("partial_unexpected_counts") or []] \
                or list(res.get("partial_unexpected_list") or [])
            return f"observed {', '.join(dict.fromkeys(_fmt(v) for v in values))}"
        unit = _UNEXPECTED_UNIT.get(suite, "row(s)")
        return (f"{res['unexpected_count']} of {res.get('element_count', len(table))} "
                f"{unit} of {column} unexpected (values not shown: see the report's Data "
                "Docs or gx_result.json)")
    observed = res.get("observed_value")
    lo, hi = kwargs.get("min_value"), kwargs.get("max_value")
    if lo is not None or hi is not None:
        exp = (f"[{_fmt(lo)}, {_fmt(hi)}]" if lo is not None and hi is not None
               else f">= {_fmt(lo)}" if lo is not None else f"<= {_fmt(hi)}")
        return f"observed {_fmt(observed)}, expected {exp}"
    return f"observed {_fmt(observed)}"


def _item(f: dict) -> str:
    return f"[{f['rule']}] {f['text']}: {f['observed']}"


def failure_message(summary: dict) -> str:
    """One readable paragraph naming every failed error rule with its observed value. A
    span with no usable row says so first; the rules that only found its columns empty
    are counted, not listed."""
    failed = summary["failed"]
    if summary.get("rows") == 0:
        failed = [f for f in failed if f["observed"] != "column missing"]
    items = "; ".join(_item(f) for f in failed)
    msg = (f"span {summary['span']} failed {summary['n_failed']} error rule(s) of "
           f"{summary['n_expectations']} expectations" + (f": {items}" if items else ""))
    rejected = summary.get("rejected") or {}
    why = ""
    if rejected.get("rows"):
        ex = (rejected.get("examples") or [{}])[0]
        why = (f"{rejected['rows']} record(s) the reader cannot use "
               f"({', '.join(f'{r} {n}' for r, n in rejected['by_reason'].items())}"
               + (f"; e.g. {Path(ex['source']).name} line {ex['line']}: "
                  f"{reject_detail(ex.get('reason'), ex.get('detail'))}" if ex else "") + ")")
    if summary.get("rows") == 0:
        msg = (f"span {summary['span']} has no usable rows" + (f": {why}" if why else "")
               + f"; {msg} (the others found its columns empty)")
    elif why:
        msg += f"; {why}"
    diffs = summary.get("parts_schema_diffs")
    if diffs:
        msg += f"; parquet parts differ in schema: {'; '.join(diffs)}"
    if summary.get("not_overridden"):
        msg += (f"; the override names other rules, not {summary['not_overridden']} "
                "(override_validation_rules)")
    if summary.get("data_docs"):
        msg += f" (Data Docs: {summary['data_docs']})"
    return msg


# Reject reasons whose detail starts with the record's key (`price: ...`).
_KEYED_REASONS = ("too_deep", "oversize_value", "invalid_text", "wrong_type", "bad_value")


def reject_detail(reason: str | None, detail: str | None) -> str:
    """A reader's reject detail as a message may show it: the key only if it is a short
    word, and no value of the record (`wrong_type`: the type it held; a `got ...` tail is
    cut). A non-finite number is shown (`price: inf is not a finite number`): it can only
    be inf or nan."""
    detail = str(detail or reason or "")
    if reason == "wrong_type":
        detail = re.sub(r"(, got \w+) .*", r"\1", detail, flags=re.S)
    else:
        detail = re.sub(r", got .*", "", detail, flags=re.S)
    if reason == "bad_value" and not detail.endswith("is not a finite number"):
        detail = re.sub(r": .*", ": a value out of its set (not shown)", detail, flags=re.S)
    key, sep, rest = detail.partition(": ")
    if sep and reason in _KEYED_REASONS and not is_word(key):
        detail = f"{HIDDEN_KEY}: {rest}"
    return detail


def _parts_schema_diffs(stats: dict) -> list[str]:
    parts = stats["parts"]
    if len(parts) < 2:
        return []
    ref = parts[0]
    out = []
    for p in parts[1:]:
        a, b = ref["schema"], p["schema"]
        out += [f"{p['file']} lacks {key_text(c)}" for c in sorted(a.keys() - b.keys())]
        out += [f"{p['file']} has extra column {key_text(c)}"
                for c in sorted(b.keys() - a.keys())]
        out += [f"{p['file']} has {key_text(c)}: {b[c]} ({ref['file']}: {a[c]})"
                for c in sorted(a.keys() & b.keys()) if a[c] != b[c]]
    return out


def _fmt(v) -> str:
    if v is None:
        return "None"
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else f"{v:.4g}"
    if isinstance(v, str):
        return repr(v)
    return str(v)
