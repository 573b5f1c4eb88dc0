"""A starting CTR feature config from a profile of the user's days (`retrain config
suggest`): the 0/1 label, the id, one feature per other column, and the `validation:`
bounds fitted to the days read, each value with a comment saying where it came from.

Why a module of the family: which kinds, transforms and thresholds exist is
`feature_config`'s contract, so the suggester lives beside it and its output is checked
with `feature_config.load` (by the command) before it is written. The profile comes from
`retrain.config_suggest.profile` (duck-typed here: this module imports nothing of it).

The bounds must hold on every day read, judged as validation judges them: the label
rate with `validation_rules.label_rate_off` (a day too small to tell is not judged), so a
quiet feed's one-row days neither fail the config nor widen its bounds to [0, 1]. A
column read as the event time (`Column.event_time`) is declared, never a feature; a
column whose name cannot be a feature's is declared too. The standard library and the config models (pydantic) only.
"""
from __future__ import annotations

import math

from components.ctr.feature_config import _NAME, THRESHOLDS, load  # noqa: F401  (the loader)
from components.ctr.rawformat import PARQUET_SUFFIXES, PART_SUFFIXES  # noqa: F401  (read by
# retrain.config_suggest: the parts a CTR day may hold)
from components.ctr.validation_rules import label_rate_off

LABEL_NAMES = ("clicked", "click", "clicks", "label", "liked", "converted", "conversion",
               "purchased", "target", "y")
VOCAB_MAX = 1000          # distinct values up to which a vocabulary is suggested
HASH_CAP = 1 << 22        # largest suggested hash table
FEW_INTS = 50             # distinct integers up to which an int column is categorical
ALLOWED_MAX = 20          # distinct values up to which allowed_values are written
_ARROW = {"str": "string", "int": "int64", "float": "double"}
FIT_ROWS = 100            # days from which the label rate bounds start (then widened)


def _n(x) -> str:
    return f"{x:,}"


def _pct(x: float) -> str:
    return f"{x:.2%}"


def _up(x: float, digits: int = 4) -> float:
    return min(1.0, math.ceil(x * 10 ** digits) / 10 ** digits)


def _down(x: float, digits: int = 4) -> float:
    return max(0.0, math.floor(x * 10 ** digits) / 10 ** digits)


def _pow2(n: int) -> int:
    return min(HASH_CAP, 1 << max(4, math.ceil(math.log2(max(1, 4 * n)))))


def _p95(values: list) -> int:
    return sorted(values)[int(0.95 * (len(values) - 1))] if values else 0


def _binary(col) -> bool:
    return col.kind in ("int", "bool") and col.values is not None \
        and 0 < len(col.values) <= 2 and set(col.values) <= {0, 1}


def _named(col) -> bool:
    """Whether the column's name can be a feature's, the label's or the id's."""
    return isinstance(col.name, str) and bool(_NAME.match(col.name))


def claim(prof) -> str | None:
    """Why the data looks like click logs (a 0/1 column), or None."""
    labels = [c for c in prof.columns.values() if _binary(c)]
    return f"column {labels[0].name!r} holds only 0 and 1: a click label" if labels else None


def _label(prof, given: str | None) -> str:
    if given:
        if not _binary(prof.columns[given]):
            raise ValueError(f"--label {given}: the label must hold only 0 and 1 (integers) "
                             "in every row read")
        if not _named(prof.columns[given]):
            raise ValueError(f"--label: a CTR label's column name must match "
                             f"{_NAME.pattern}: rename the column upstream")
        return given
    labels = [c.name for c in prof.columns.values() if _binary(c) and _named(c)]
    if not labels:
        raise ValueError(f"no column under {prof.raw_root} holds only 0 and 1: a CTR config "
                         "needs a 0/1 label (give --label, or --family text)")
    named = [n for n in LABEL_NAMES for c in labels if c.lower() == n]
    return (named or labels)[0]


def _id_like(col) -> bool:
    name = col.name.lower()
    return name == "id" or name.endswith(("_id", "id", "uuid", "_key"))


def _unique(col) -> bool:
    """A per-row id: unique over the days read, never null, no whitespace."""
    return col.unique and not col.nulls and (
        (col.kind == "str" and not col.spaced) or (col.kind == "int" and _id_like(col)))


def _id(prof, given: str | None, label: str):
    """(id column or None, why)."""
    if given:
        if not prof.columns[given].unique or prof.columns[given].nulls:
            raise ValueError(f"--id {given}: the id must be unique and never null over the "
                             "days read")
        return given, "--id"
    ids = [c for c in prof.columns.values() if c.name != label and _unique(c) and _named(c)
           and not c.event_time]
    ids.sort(key=lambda c: (not _id_like(c), c.kind != "str"))
    return (ids[0].name, "unique over the days read") if ids else (None, "")


def _categorical(col, rows: int) -> dict:
    n = col.distinct
    if col.kind == "int" and n <= FEW_INTS and col.min >= 0 and col.max <= 255:
        return {"kind": "categorical", "transform": "identity", "size": (
            col.max + 1, f"integer ids 0..{col.max} in the days read ({n} distinct)")}
    dtype = {"dtype": "int"} if col.kind == "int" else {}
    if n <= VOCAB_MAX:
        return {"kind": "categorical", "transform": "vocabulary", **dtype, "top_k": (
            math.ceil(n * 1.25), f"{_n(n)} distinct values in the days read, plus a "
                                 "quarter for new ones"), "oov_buckets": 1}
    return {"kind": "categorical", "transform": "hash", **dtype, "hash_buckets": (
        _pow2(n), f"{'at least ' if n >= 2_000_000 else ''}{_n(n)} distinct values in "
                  f"the days read; a power of two >= 4x that (at most {_n(HASH_CAP)})")}


def _skew(xs: list) -> float:
    """Sample skewness (third standardized moment)."""
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / n
    return sum((x - mean) ** 3 for x in xs) / n / var ** 1.5 if var > 0 else 0.0


def _numeric(col) -> dict:
    skew = _skew(col.numbers)
    if col.min >= 0 and skew > 1:
        return {"kind": "numeric", "transform": (
            "log_zscore", f"never negative and right-skewed (skewness {skew:.1f} > 1 on a "
                          "sample of the days read)")}
    why = "has negative values" if col.min < 0 else f"skewness {skew:.1f} <= 1"
    return {"kind": "numeric", "transform": ("zscore", why)}


def _multi(col, kind: str) -> dict:
    if kind == "text":
        n, lengths, what = len(col.tokens), col.token_counts, "tokens"
    else:
        n, lengths, what = len(col.element_hashes), col.list_lengths, "values"
    width = min(64 if kind == "text" else 32, max(1, _p95(lengths)))
    out = {"kind": kind}
    if kind == "multi_categorical" and col.elements is not None and n <= VOCAB_MAX:
        out.update(transform="vocabulary", top_k=(
            math.ceil(n * 1.25), f"{_n(n)} distinct values in the days read, plus a quarter"),
            oov_buckets=1)
    else:
        out.update(transform="hash", hash_buckets=(
            _pow2(n), f"{_n(n)} distinct {what} in the days read; a power of two >= 4x that"))
    out["max_values"] = (width, f"95% of the rows read have at most {width} {what}")
    return out


def _features(prof, label: str, id_col: str | None, notes: list):
    """(features, extra_columns): one feature per usable column, the rest declared."""
    features, extra = [], {}
    rows = sum(d.rows for d in prof.days)
    parquet = "parquet" in prof.formats
    for col in prof.columns.values():
        if col.name in (label, id_col):
            continue
        k = col.kind
        if col.event_time or not _named(col):
            why = (f"the event time ({col.event_time}): never a feature (a CTR config has "
                   "no event-time setting; it is declared so validation expects it)"
                   if col.event_time else f"its name is not a feature name ({_NAME.pattern})"
                   "; declared so validation expects it (rename it upstream to use it)")
            if k in ("str", "int", "float"):
                extra[col.name] = (k, why)
                if not col.event_time:
                    notes.append(f"column {col.name!r}: {why}")
            else:
                notes.append(f"column {col.name!r} ({k} values) is {why.split(':')[0]}, and "
                             "a CTR config declares only str, int and float columns: "
                             "validation's schema rule will name it until it is written as "
                             "epoch seconds (int) or ISO text")
        elif k == "null":
            extra[col.name] = ("float", "always null in the days read")
        elif _unique(col):
            extra[col.name] = (k, "unique per row: no signal as a feature")
        elif k == "str" and col.mean_chars >= 20 and col.spaced >= 0.5 * (col.count - col.nulls):
            features.append({"name": (col.name, f"free text: {col.mean_chars:.0f} characters "
                                                 "on average"), **_multi(col, "text")})
        elif k == "str":
            features.append({"name": (col.name, f"strings, {_n(col.distinct)} distinct"),
                             **_categorical(col, rows)})
        elif k == "str_list":
            features.append({"name": (col.name, "lists of strings"),
                             **_multi(col, "multi_categorical")})
        elif k == "int" and col.distinct <= FEW_INTS:
            features.append({"name": (col.name, "integers, few distinct"),
                             **_categorical(col, rows)})
        elif k == "int" and parquet:
            features.append({"name": (col.name, "integers, many distinct: hashed, since "
                                                 "Parquet int64 is not the double a numeric "
                                                 "feature takes (cast it to make it numeric)"),
                             **_categorical(col, rows)})
        elif k in ("int", "float"):
            features.append({"name": (col.name, f"numbers, {_n(col.distinct)}+ distinct"
                                                 if k == "int" else "numbers"), **_numeric(col)})
        elif k == "bool":
            features.append({"name": (col.name, "true/false: write it as 0/1"),
                             "kind": "categorical", "transform": "identity", "size": 2})
            notes.append(f"column {col.name!r} holds true/false: the CTR reader takes 0/1 "
                         "integers, so validation will reject its rows until it is 0/1")
        else:
            notes.append(f"column {col.name!r} ({k} values) has no kind in a feature config: "
                         "left out, so validation's schema rule will name it")
    return features, extra


def _raw_type(f: dict) -> str:
    kind = f["kind"]
    return {"numeric": "float", "multi_categorical": "str_list", "text": "str"}.get(
        kind, f.get("dtype", "int" if f["transform"] == "identity" else "str"))


def _check_types(prof, columns: dict, notes: list) -> None:
    """Warn where the days read break a rule the config implies (nulls, Parquet types)."""
    for name, raw in columns.items():
        col = prof.columns[name]
        if raw in ("str", "int") and col.nulls:
            notes.append(f"column {name!r} is null in {_n(col.nulls)} row(s): the CTR reader "
                         f"takes no null {raw}; validation rule null_rate:{name} will fail")
        want = _ARROW.get(raw)
        if want and col.arrow and col.arrow != {want}:
            notes.append(f"column {name!r} is {'/'.join(sorted(col.arrow))} in the Parquet "
                         f"files; validation rule type:{name} expects {want}: cast it "
                         "upstream")


def _rate_bounds(prof, label: str):
    """min/max_label_rate: half the lowest and 1.5x the highest rate of the days of at
    least FIT_ROWS rows (all days if none has), then widened the same way for any other
    day whose rate validation would judge outside them (`label_rate_off`), so the config
    passes every day read and a handful of rows never sets the bounds."""
    rates = [(d.name, d.rows, dc.values.get(1, 0) / dc.rows) for d, (_, dc) in
             zip(prof.days, prof.day_values(label)) if dc.rows and dc.values is not None]
    fit = [r for r in rates if r[1] >= FIT_ROWS] or rates
    (lo_day, _, lo), (hi_day, _, hi) = min(fit, key=lambda r: r[2]), max(fit, key=lambda r: r[2])
    low, high = _down(lo / 2), max(_up(min(1.0, hi * 1.5)), _down(lo / 2))
    for name, rows, rate in sorted(rates, key=lambda r: r[2]):
        if label_rate_off(rows, rate, low, high) and rate < low:
            (lo_day, lo), low = (name, rate), _down(rate / 2)
    for name, rows, rate in sorted(rates, key=lambda r: -r[2]):
        if label_rate_off(rows, rate, low, high) and rate > high:
            (hi_day, hi), high = (name, rate), _up(min(1.0, rate * 1.5))
    small = len(rates) - len(fit)
    judged = (f" (days of at least {FIT_ROWS} rows; {small} smaller day(s) within them "
              "as validation judges a small day's rate)") if small else ""
    return {"min_label_rate": (low, f"lowest day read: {_pct(lo)} positive ({lo_day}); "
                                    f"half of it{judged}"),
            "max_label_rate": (high, f"highest day read: {_pct(hi)} positive ({hi_day}); "
                                     f"1.5x it{judged}")}


def _thresholds(prof, label: str, id_col: str | None, numeric: list) -> dict:
    days = [d for d in prof.days if d.rows]
    small, large = min(days, key=lambda d: d.rows), max(days, key=lambda d: d.rows)
    out = {"min_rows": (small.rows // 2, f"smallest day read: {_n(small.rows)} rows "
                                         f"({small.name}); half of it"),
           "max_rows": (large.rows * 2, f"largest day read: {_n(large.rows)} rows "
                                        f"({large.name}); twice it"),
           **_rate_bounds(prof, label)}
    if numeric:
        worst = max(((d, n, dc.nulls / dc.rows) for n in numeric
                     for d, (_, dc) in zip(prof.days, prof.day_values(n)) if dc.rows),
                    key=lambda x: x[2])
        out["max_null_rate"] = (_up(min(1.0, worst[2] * 1.5 + 0.01)),
                                f"most nulls in a numeric column: {_pct(worst[2])} "
                                f"({worst[1]}, {worst[0].name}); 1.5x it plus 1%")
        rises = [(b.name, n, b.columns[n].nulls / b.rows - a.columns[n].nulls / a.rows)
                 for n in numeric for a, b in zip(days, days[1:])
                 if n in a.columns and n in b.columns]
        rise = max(rises, key=lambda x: x[2], default=None)
        out["max_null_rate_increase"] = (
            _up(max(0.02, 2 * rise[2])) if rise else THRESHOLDS["max_null_rate_increase"],
            f"largest rise of a numeric column's null rate from one day to the next: "
            f"{_pct(max(0.0, rise[2]))} ({rise[1]}, {rise[0]}); twice it, at least 2%"
            if rise else "one day read: the default")
    dup = max(days, key=lambda d: d.duplicate_rows / d.rows)
    dup_rate = 0.0 if id_col else dup.duplicate_rows / dup.rows
    out["max_duplicate_rate"] = (
        _up(max(0.005, 2 * dup_rate)),
        f"{id_col} is unique over the days read; at least 0.5%" if id_col else
        f"most repeated rows in a day (ids are derived from the row): {_pct(dup_rate)} "
        f"({dup.name}); twice it, at least 0.5%")
    over = max(days, key=lambda d: d.overlap_previous)
    rate = 0.0 if id_col else over.overlap_previous
    out["max_previous_overlap"] = (
        _up(max(0.005, 2 * rate)),
        f"{id_col} is unique over the days read; at least 0.5%" if id_col else
        f"most rows repeated from the day before: {_pct(rate)} ({over.name}); twice it, "
        "at least 0.5%")
    rej = max(days, key=lambda d: d.rejected / (d.rows + d.rejected))
    rej_rate = rej.rejected / (rej.rows + rej.rejected)
    out["max_rejected_rate"] = (_up(max(0.001, 2 * rej_rate), 6),
                                f"most unreadable lines in a day: {_pct(rej_rate)} "
                                f"({rej.name}); twice it, at least 0.1%")
    ratios = []
    for i, d in enumerate(days[1:], 1):
        before = days[max(0, i - int(THRESHOLDS["history_days"])):i]
        avg = sum(b.rows for b in before) / len(before)
        ratios.append((d.name, max(d.rows / avg, avg / d.rows)))
    if ratios:
        name, r = max(ratios, key=lambda x: x[1])
        out["max_row_ratio"] = (max(2.0, math.ceil(r * 15) / 10),
                                f"a day's rows at most {r:.2f}x off the average of the days "
                                f"before it ({name}); 1.5x that, at least 2")
    return out


def _validation(prof, features: list, extra: dict, thresholds: dict) -> dict:
    ranges, allowed = {}, {}
    for f in features:
        name, kind = f["name"][0], f["kind"]
        col = prof.columns[name]
        if kind == "numeric":
            spread = col.max - col.min
            lo = 0 if col.min >= 0 else col.min - spread
            hi = col.max + spread
            ranges[name] = ([lo, hi], f"seen {col.min:g}..{col.max:g}; " + (
                "never negative, " if col.min >= 0 else "minus the spread, ") +
                "max plus the spread")
        elif kind == "categorical" and col.kind != "bool" and col.values is not None \
                and 2 <= len(col.values) <= ALLOWED_MAX:
            allowed[name] = (sorted(col.values), f"every value seen ({len(col.values)}); a "
                                                 f"new one fails rule allowed_values:{name}")
    out = {"thresholds": thresholds}
    if extra:
        out["extra_columns"] = extra
    if ranges:
        out["ranges"] = ranges
    if allowed:
        out["allowed_values"] = allowed
    return out


def suggest(prof, *, label=None, text=None, id_column=None) -> tuple[dict, list[str]]:
    """(config document with (value, comment) leaves, notes for the user)."""
    if text:
        raise ValueError("--text is an option of the text family (--family text)")
    notes: list[str] = []
    label = _label(prof, label)
    if prof.columns[label].kind == "bool":
        notes.append(f"label {label!r} holds true/false: the CTR reader takes 0/1 integers, "
                     "so validation will reject its rows until it is written as 0/1")
    id_col, why = _id(prof, id_column, label)
    doc: dict = {"name": "suggested", "description": f"Suggested from {prof.raw_root}",
                 "label": (label, "only 0 and 1 in the days read")}
    id_kind = prof.columns[id_col].kind if id_col else None
    if id_col and id_kind not in ("str", "int"):
        notes.append(f"id column {id_col!r} holds {id_kind} values; CTR ids are strings or "
                     "integers, so it is declared under validation.extra_columns and ids "
                     "are derived")
        id_col = None
        doc["#id"] = (f"example_id left out: the id column holds {id_kind} values, ids are "
                      "derived.")
    elif id_col:
        doc["example_id"] = (id_col, why)
    else:
        doc["#id"] = ("example_id left out: no column is unique over the days read, so each "
                      "row's id is derived (a hash of its columns).")
        notes.append("no unique id column: ids are derived from each row's columns")
    features, extra = _features(prof, label, id_col, notes)
    if not features:
        raise ValueError(f"the days read under {prof.raw_root} hold no column to use as a "
                         "feature beside the label and the id")
    # an integer id of any width is read as its text: no type to check
    _check_types(prof, {label: "int", **({id_col: "str"} if id_kind == "str" else {}),
                        **{f["name"][0]: _raw_type(f) for f in features},
                        **{k: v[0] for k, v in extra.items()}}, notes)
    doc["features"] = features
    slices = [f["name"][0] for f in features if f["kind"] == "categorical"
              and prof.columns[f["name"][0]].values is not None
              and 2 <= len(prof.columns[f["name"][0]].values) <= ALLOWED_MAX][:2]
    if slices:
        doc["slices"] = (slices, "categorical columns with 2-20 values: metrics per value")
    categorical = [f["name"][0] for f in features
                   if f["kind"] != "numeric" or f["transform"] == "bucketize"]
    doc["model"] = {"deep_fields": (categorical, "every categorical field gets an embedding "
                                                 "in the MLP")}
    numeric = [f["name"][0] for f in features if f["kind"] == "numeric"]
    doc["validation"] = _validation(prof, features, extra, _thresholds(prof, label, id_col,
                                                                       numeric))
    notes.extend(_evidence_notes(prof, label))
    return doc, notes


def _evidence_notes(prof, label: str) -> list[str]:
    """A warning when the days read (the window a run would train on now) hold fewer
    held-out rows or positives than the gate needs before it may bless
    (feature_config.GateDefaults): said at config time, not after a whole training run. The
    minimums are not lowered here: they keep the gate from judging on noise (rule 21)."""
    from components.ctr.evaluate import EvaluateSpec
    from components.ctr.feature_config import GateDefaults

    counted = [(dc.rows, dc.values.get(1, 0)) for _, dc in prof.day_values(label)
               if dc.values is not None]
    share = EvaluateSpec.eval_percent / 100
    rows, clicks = sum(r for r, _ in counted) * share, sum(c for _, c in counted) * share
    need = GateDefaults()
    if not counted or (rows >= need.min_eval_rows and clicks >= need.min_eval_positives):
        return []
    return [f"WARNING: the {len(prof.days)} day(s) read hold about {rows:,.0f} held-out rows "
            f"and {clicks:,.0f} positives at eval_percent {EvaluateSpec.eval_percent}, below "
            f"the gate's minimums (min_eval_rows {need.min_eval_rows}, min_eval_positives "
            f"{need.min_eval_positives}): a run on them would not bless its model. More "
            "days in the window (window_days), a larger eval_percent, or lower minimums in "
            "the config's gate: section (judged on fewer rows) change that"]
