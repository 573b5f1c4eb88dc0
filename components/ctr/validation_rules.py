"""The CTR span validation rules, declared in code and versioned with the feature list.

Validation never loads a span: it runs great-expectations suites over three small tables
built from the span's one-pass statistics (`beam_jobs.span_stats`):

- `stats`: one wide row of per-span figures (row count, click rate, per-column null
  rate / type / min / max, duplicate measures, drift distances to the previous span, row
  count against the recent average). Expectations bound those figures.
- `domains`: the distinct values of low-cardinality columns (exact: Misra-Gries with no
  decrement), checked against allowed sets.
- `sample`: the uniform reservoir sample of raw rows: schema, pandas types, patterns.

Every expectation carries a rule id and a severity in `meta` (also GX's own `severity`
and a `description` that Data Docs shows): `error` stops the run, `warning` is reported.
The click rate is judged on evidence (`label_rate_off`): a day too small to tell its rate
from the bounds' is not failed for it (a one-row day's rate is 0 or 1 whatever the feed's).
Drift distances are computed here from the statistics (Jensen-Shannon distance and
L-infinity on categorical top-k + "other", PSI and KS on numeric quantiles) and bounded
by expectations, so they appear in the same report as every other rule.

Stdlib + numpy at module level; great_expectations is imported inside the functions.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

ERROR, WARNING = "error", "warning"
SEVERITIES = (ERROR, WARNING)

LABEL_VALUES = (0, 1)
# Drift rule of a feature the config's `validation.drift` does not name.
DEFAULT_DRIFT: dict[str, dict[str, Any]] = {
    "categorical": {"metric": "js", "max": 0.3, "severity": WARNING},
    "numeric": {"metric": "psi", "max": 0.25, "severity": WARNING},
}
_ARROW = {"str": "string", "int": "int64", "float": "double"}
_PANDAS = {"str": "str", "int": "int64", "float": "float64"}


@dataclasses.dataclass(frozen=True)
class Rules:
    """What a span of one feature config's logs must look like, from its `validation`
    section (ranges, allowed values, patterns, drift thresholds, extra columns) plus what
    the feature list implies (columns, types, nulls, label domain, drift of every feature)."""
    example_id: str
    label: str
    expected_columns: tuple[str, ...]
    never_null: tuple[str, ...]
    numeric: tuple[str, ...]
    floats: tuple[str, ...]     # columns read as numbers: +-inf is an error there
    arrow_types: dict
    pandas_types: dict
    ranges: dict
    allowed_values: dict
    patterns: dict
    drift: dict
    # The config's (min_label_rate, max_label_rate): what `stats_row` weighs a day's click
    # rate against (see `judged_label_rate`). None: the plain rate is judged.
    label_rate_bounds: tuple | None = None


def rules_for(fc=None) -> Rules:
    """The rules of a feature config (default: the generated logs')."""
    from components.ctr import feature_config
    fc = fc or feature_config.default()
    v = fc.validation
    kinds = {**fc.raw_columns(), **dict(v.extra_columns)}
    drift = {f.name: DEFAULT_DRIFT["numeric" if f.kind == "numeric" else "categorical"]
             for f in fc.features if f.kind in ("numeric", "categorical")}
    drift.update({name: {"metric": m, "max": x, "severity": sev} for name, m, x, sev in v.drift})
    return Rules(
        example_id=fc.example_id, label=fc.label, expected_columns=tuple(kinds),
        never_null=tuple(k for k, t in kinds.items() if t in ("str", "int")),
        numeric=tuple(fc.numeric_features()),
        floats=tuple(k for k, t in kinds.items() if t == "float"),
        arrow_types={k: _ARROW[t] for k, t in kinds.items() if t != "str_list"},
        pandas_types={k: _PANDAS[t] for k, t in kinds.items() if t in _PANDAS},
        ranges={c: (lo, hi) for c, lo, hi in v.ranges},
        allowed_values={c: list(vals) for c, vals in v.allowed_values},
        patterns=dict(v.patterns), drift=drift,
        label_rate_bounds=(v.threshold("min_label_rate"), v.threshold("max_label_rate")))


# --------------------------------------------------------------------------- click rate

# How unlikely a day's click rate must be under the nearest configured bound before the
# click_rate rule fails it: below 1 in 1,000 (design rule 21: a verdict needs evidence).
RATE_EVIDENCE = 0.001


def _rate_tail(rows: int, rate: float, bound: float) -> float:
    """Chernoff bound exp(-n KL(rate || bound)) on the chance that `rows` rows drawn at the
    bound's rate show a rate at least as far out as `rate` (exact when no row or every row
    is positive; otherwise never below the exact binomial tail)."""
    def term(a: float, b: float) -> float:
        if a == 0:
            return 0.0
        return math.inf if b == 0 else a * math.log(a / b)
    kl = term(rate, bound) + term(1 - rate, 1 - bound)
    return 0.0 if kl == math.inf else math.exp(-rows * kl)


def label_rate_off(rows: int, rate: float | None, lo: float, hi: float,
                   evidence: float = RATE_EVIDENCE) -> bool:
    """Whether a day's click rate lies outside [lo, hi] *with evidence*: outside, and a
    day of its rows at the nearest bound would show a rate that far out with a chance
    below `evidence`.

    Why: a rate is a ratio of counts, and a small day's rate is mostly noise. A day of
    one row has a click rate of 0 or 1 whatever the feed's true rate, so with plain bounds
    such a day (allowed by `min_rows: 1`, as a quiet real feed needs) was quarantined for
    "click rate 0". Now a day is failed for its rate only when its rows are enough to
    tell: with min_label_rate 0.005, a day with no click fails from 1,379 rows on
    (0.995^1379 < 0.001), a one-row day never; a day far outside its bounds fails with a
    few rows (with max_label_rate 0.2, ten clicks in ten rows: 0.2^10 = 1e-7). The row
    count itself is the row_count rule's business. `retrain config suggest` fits its
    bounds with this same test, so its config passes every day it read."""
    if rate is None or rows <= 0 or lo <= rate <= hi:
        return False
    return _rate_tail(rows, rate, lo if rate < lo else hi) < evidence


def judged_label_rate(rows: int, rate: float | None, bounds: tuple | None):
    """The click rate the click_rate rule judges: the day's own rate, unless it lies
    outside the bounds without evidence (`label_rate_off`), then the nearest bound, so
    the rule passes; the day's real rate stays in the `click_rate` column."""
    if rate is None or bounds is None:
        return rate
    lo, hi = bounds
    if lo <= rate <= hi or label_rate_off(rows, rate, lo, hi):
        return rate
    return min(max(rate, lo), hi)


STATS_SUITE, DOMAINS_SUITE, SAMPLE_SUITE = "ctr_span_stats", "ctr_span_domains", "ctr_span_sample"
SUITE_VERSION = 2


# --------------------------------------------------------------------------- drift math


def _top_dist(col: dict) -> dict:
    return {(type(v).__name__, v): float(freq) for v, _, freq in col.get("top") or []
            if freq is not None}


def categorical_distance(cur: dict, prev: dict) -> dict | None:
    """Jensen-Shannon distance (base 2, in [0, 1]) and L-infinity between the top-k
    distributions of two spans, the mass outside both top-k lists pooled as 'other'."""
    p, q = _top_dist(cur), _top_dist(prev)
    if not p or not q:
        return None
    keys = sorted(set(p) | set(q), key=repr)
    pv = [p.get(k, 0.0) for k in keys] + [max(0.0, 1.0 - sum(p.values()))]
    qv = [q.get(k, 0.0) for k in keys] + [max(0.0, 1.0 - sum(q.values()))]
    m = [(a + b) / 2 for a, b in zip(pv, qv)]

    def kl(x, y):
        return sum(a * math.log2(a / b) for a, b in zip(x, y) if a > 0 and b > 0)

    js = math.sqrt(max(0.0, (kl(pv, m) + kl(qv, m)) / 2))
    return {"js": js, "linf": max(abs(a - b) for a, b in zip(pv, qv))}


def numeric_distance(cur: dict, prev: dict, bins: int = 10) -> dict | None:
    """PSI over the previous span's decile bins and the KS statistic, both from the
    spans' quantile summaries (CDFs interpolated between the 101 stored quantiles)."""
    import numpy as np

    qc, qp = (cur.get("numeric") or {}).get("quantiles"), \
        (prev.get("numeric") or {}).get("quantiles")
    if not qc or not qp:
        return None
    qc, qp = np.asarray(qc, float), np.asarray(qp, float)
    levels = np.linspace(0, 1, len(qp))

    def cdf(q, x):
        lv = np.linspace(0, 1, len(q))
        return (np.interp(x, q, lv, left=0.0, right=1.0) if q[-1] > q[0]
                else (x >= q[0]).astype(float))

    edges = np.unique(np.interp(np.linspace(0, 1, bins + 1)[1:-1], levels, qp))
    fp = np.diff(np.concatenate([[0.0], cdf(qp, edges), [1.0]]))
    fc = np.diff(np.concatenate([[0.0], cdf(qc, edges), [1.0]]))
    eps = 1e-4
    fp, fc = np.clip(fp, eps, None), np.clip(fc, eps, None)
    psi = float(np.sum((fc - fp) * np.log(fc / fp)))
    grid = np.union1d(qc, qp)
    ks = float(np.max(np.abs(cdf(qc, grid) - cdf(qp, grid))))
    return {"psi": psi, "ks": ks}


def drift(stats: dict, previous: dict | None, rules: Rules | None = None) -> dict:
    """Per-feature distances to the previous span (empty without one)."""
    rules = rules or rules_for()
    out: dict[str, dict] = {}
    if not previous:
        return out
    for feature, cfg in rules.drift.items():
        cur, prev = stats["columns"].get(feature), previous["columns"].get(feature)
        if not cur or not prev:
            continue
        d = (categorical_distance(cur, prev) if cfg["metric"] in ("js", "linf")
             else numeric_distance(cur, prev))
        if d is not None:
            out[feature] = d
    return out


# --------------------------------------------------------------------------- tables


def stats_row(stats: dict, previous: dict | None, history: list[dict],
              overlap: float | None, rules: Rules | None = None) -> dict[str, Any]:
    """The one-row statistics table the `stats` suite runs on."""
    rules = rules or rules_for()
    row: dict[str, Any] = {"rows": stats["rows"], "click_rate": stats.get("label_rate")}
    row["click_rate_judged"] = judged_label_rate(stats["rows"], row["click_rate"],
                                                 rules.label_rate_bounds)
    rejected = stats.get("rejected_rows", 0)
    records = stats["rows"] + rejected
    row["rejected_rate"] = rejected / records if records else 0.0
    for name, col in stats["columns"].items():
        row[f"{name}__null_rate"] = col["null_rate"]
        row[f"{name}__type"] = "|".join(col["types"])
        row[f"{name}__nonfinite"] = col.get("nonfinite", 0)
        num = col.get("numeric")
        if num:
            row[f"{name}__min"], row[f"{name}__max"] = num["min"], num["max"]
        before = (previous or {}).get("columns", {}).get(name, {}).get("null_rate")
        if name in rules.numeric and before is not None and col["null_rate"] is not None:
            row[f"{name}__null_rate_increase"] = col["null_rate"] - before
    ex = stats["columns"].get(rules.example_id)
    if ex and ex.get("count"):
        row["example_id__duplicate_rate"] = max(0.0, 1.0 - ex["distinct"] / ex["count"])
    seen, dup = set(), 0
    for p in stats["parts"]:
        key = (p["rows"], p["fingerprint"])
        dup += key in seen
        seen.add(key)
    row["duplicated_parts"] = dup
    if overlap is not None:
        row["overlap_with_previous"] = overlap
    if history:
        avg = sum(h["rows"] for h in history) / len(history)
        row["rows_vs_recent_average"] = stats["rows"] / avg if avg else None
    for feature, d in drift(stats, previous, rules).items():
        for metric, value in d.items():
            row[f"{feature}__{metric}_previous"] = value
    return row


def domains_table(stats: dict, rules: Rules | None = None) -> dict[str, list]:
    """Distinct values of the columns with an allowed set (top values if not exact)."""
    rules = rules or rules_for()
    out = {}
    for name in (*rules.allowed_values, rules.label):
        col = stats["columns"].get(name)
        if col is not None:
            out[name] = col.get("domain") or [v for v, _, _ in col.get("top") or []]
    width = max([len(v) for v in out.values()] or [0]) or 1
    return {k: v + [None] * (width - len(v)) for k, v in out.items()}


# --------------------------------------------------------------------------- suites


def _exp(cls, rule: str, severity: str, text: str, **kwargs):
    assert severity in SEVERITIES, severity
    return cls(**kwargs, severity="critical" if severity == ERROR else "warning",
               description=f"[{severity}] {rule}: {text}",
               meta={"rule": rule, "severity": severity, "text": text})


# The spec's bounds that build_suites reads (ValidateSpec leaves them None until resolved).
THRESHOLD_FIELDS = ("min_rows", "max_rows", "min_click_rate", "max_click_rate", "max_null_rate",
                     "max_null_rate_increase", "max_duplicate_rate", "max_previous_overlap",
                     "max_rejected_rate", "max_row_ratio", "history_days")


def build_suites(spec, previous: dict | None, history: list[dict], rules: Rules | None = None):
    """{suite name: ExpectationSuite} for a span. `spec` carries the thresholds, already
    resolved against its feature config (components.ctr.validate.with_thresholds: resolved
    once, by the step); previous/history only decide which comparative rules exist (no
    previous span: no drift rules; no history: no recent-average rule)."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    unset = [f.name for f in dataclasses.fields(spec) if getattr(spec, f.name) is None
             and f.name in THRESHOLD_FIELDS]
    if unset:
        raise ValueError(f"build_suites needs resolved thresholds; unset: {unset} "
                         "(pass the spec through validate.with_thresholds first)")
    rules = rules or rules_for()

    def between(rule, severity, text, column, lo=None, hi=None):
        return _exp(gxe.ExpectColumnMaxToBeBetween, rule, severity, text, column=column,
                    min_value=lo, max_value=hi)

    # The click rate is judged on evidence (judged_label_rate) against the config's bounds;
    # a spec that overrides them (a test, a one-off) is judged on the plain rate.
    evidence = rules.label_rate_bounds == (spec.min_click_rate, spec.max_click_rate)
    s: list = [
        between("row_count", ERROR, f"rows in [{spec.min_rows}, {spec.max_rows}]", "rows",
                spec.min_rows, spec.max_rows),
        between("click_rate", ERROR,
                f"click rate in [{spec.min_click_rate}, {spec.max_click_rate}]",
                "click_rate_judged" if evidence else "click_rate", spec.min_click_rate,
                spec.max_click_rate),
        between("duplicates:example_id", ERROR,
                f"share of duplicated example ids at most {spec.max_duplicate_rate}",
                "example_id__duplicate_rate", None, spec.max_duplicate_rate),
        between("duplicates:parts", ERROR, "no two parts with the same content",
                "duplicated_parts", None, 0),
        between("parse:rejected", ERROR, f"share of records the reader cannot use at most "
                f"{spec.max_rejected_rate}", "rejected_rate", None, spec.max_rejected_rate),
    ]
    for c in rules.floats:
        s.append(between(f"finite:{c}", ERROR, f"{c} has no infinite values",
                         f"{c}__nonfinite", None, 0))
    for c, t in rules.arrow_types.items():
        # an integer id column reaches the stats as its text (beam_jobs.span_stats)
        also = " (or integer)" if c == rules.example_id else ""
        s.append(_exp(gxe.ExpectColumnValuesToBeInSet, f"type:{c}", ERROR,
                      f"Arrow type of {c} is {t}{also} in every part",
                      column=f"{c}__type", value_set=[t]))
    for c in rules.never_null:
        s.append(between(f"null_rate:{c}", ERROR, f"{c} is never null",
                         f"{c}__null_rate", None, 0))
    for c in rules.numeric:
        s.append(between(f"null_rate:{c}", ERROR, f"null rate of {c} at most "
                         f"{spec.max_null_rate}", f"{c}__null_rate", None, spec.max_null_rate))
    for c, (lo, hi) in rules.ranges.items():
        if lo is not None:
            s.append(between(f"range:{c}", ERROR, f"min of {c} at least {lo}",
                             f"{c}__min", lo, None))
        if hi is not None:
            s.append(between(f"range:{c}", ERROR, f"max of {c} at most {hi}",
                             f"{c}__max", None, hi))
    if previous:
        s.append(between("duplicates:previous_span", ERROR,
                         f"share of example ids also in the previous span at most "
                         f"{spec.max_previous_overlap}", "overlap_with_previous", None,
                         spec.max_previous_overlap))
        for c in rules.numeric:
            s.append(between(f"null_rate_increase:{c}", ERROR,
                             f"null rate of {c} up at most {spec.max_null_rate_increase} "
                             f"on the previous span", f"{c}__null_rate_increase", None,
                             spec.max_null_rate_increase))
        thresholds = {**rules.drift, **(spec.drift_thresholds or {})}
        for feature, cfg in thresholds.items():
            s.append(between(f"drift:{feature}", cfg["severity"],
                             f"{cfg['metric'].upper()} of {feature} vs previous span at "
                             f"most {cfg['max']}", f"{feature}__{cfg['metric']}_previous",
                             None, cfg["max"]))
    if history:
        r = spec.max_row_ratio
        s.append(between("row_count:recent_average", ERROR,
                         f"rows within {r:g}x of the average of the last {len(history)} "
                         f"span(s)", "rows_vs_recent_average", 1.0 / r, r))

    d = [_exp(gxe.ExpectColumnValuesToBeInSet, f"allowed_values:{c}", ERROR,
              f"{c} in {values}", column=c, value_set=values)
         for c, values in rules.allowed_values.items()]
    d.append(_exp(gxe.ExpectColumnValuesToBeInSet, f"allowed_values:{rules.label}", ERROR,
                  f"{rules.label} in {list(LABEL_VALUES)}", column=rules.label,
                  value_set=list(LABEL_VALUES)))

    sm: list = [_exp(gxe.ExpectTableColumnsToMatchSet, "schema:columns", ERROR,
                     "exactly the columns of the feature config",
                     column_set=list(rules.expected_columns), exact_match=True)]
    sm += [_exp(gxe.ExpectColumnValuesToBeOfType, f"type:{c}", ERROR,
                f"sample values of {c} are {t}", column=c, type_=t)
           for c, t in rules.pandas_types.items()]
    sm += [_exp(gxe.ExpectColumnValuesToMatchRegex, f"pattern:{c}", WARNING,
                f"{c} matches {p}", column=c, regex=p) for c, p in rules.patterns.items()]
    meta = {"suite_version": SUITE_VERSION}
    return {STATS_SUITE: gx.ExpectationSuite(name=STATS_SUITE, expectations=s, meta=meta),
            DOMAINS_SUITE: gx.ExpectationSuite(name=DOMAINS_SUITE, expectations=d, meta=meta),
            SAMPLE_SUITE: gx.ExpectationSuite(name=SAMPLE_SUITE, expectations=sm, meta=meta)}
