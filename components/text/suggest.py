"""A starting text config from a profile of the user's days (`retrain config suggest`):
the text column, one task per low-cardinality string column, the id, and the
`validation:` bounds fitted to the days read, each value with a comment saying where it
came from.

Why a module of the family: which keys and bounds exist is `task_config`'s contract, so
the suggester lives beside it and its output is checked with `task_config.load` (by the
command) before it is written. The profile comes from `retrain.config_suggest.profile`
(duck-typed here). A column read as the rows' event time (`Column.event_time`) is never
the text, a task or the id. The standard library and the config models (pydantic)
only.
"""
from __future__ import annotations

import math
import re

from components.text.rawdata import PARQUET_SUFFIXES, PART_SUFFIXES  # noqa: F401  (read by
# retrain.config_suggest: the parts a text day may hold, .ndjson and .pq included)
from components.text.preprocess import TextPreprocessSpec
from components.text.stages import DEV_EXAMPLES, dev_examples
from components.text.task_config import RESERVED, Gate, load  # noqa: F401  (the loader)

MIN_TEXT_CHARS = 30       # mean length from which a string column reads as free text
MAX_LABELS = 20           # distinct values up to which a string column is a task


def _n(x) -> str:
    return f"{x:,}"


def _pct(x: float) -> str:
    return f"{x:.2%}"


def _up(x: float) -> float:
    return min(1.0, math.ceil(x * 1e4) / 1e4)


def _labels(col) -> list[str]:
    return sorted(str(v) for v in (col.values or {}) if v != "")


def _is_task(col) -> bool:
    return col.kind == "str" and col.values is not None and not col.event_time \
        and 2 <= len(_labels(col)) <= MAX_LABELS


def _is_text(col) -> bool:
    return col.kind == "str" and not col.event_time and col.mean_chars >= MIN_TEXT_CHARS \
        and col.spaced >= 0.5 * (col.count - col.nulls)


def _binary(col) -> bool:
    return col.kind in ("int", "bool") and col.values is not None \
        and set(col.values) <= {0, 1}


def claim(prof) -> str | None:
    """Why the data looks like labelled text, or None."""
    cols = list(prof.columns.values())
    texts = [c for c in cols if _is_text(c)]
    tasks = [c for c in cols if _is_task(c)]
    if not texts or not tasks or any(_binary(c) for c in cols):
        return None
    return (f"column {texts[0].name!r} is free text ({texts[0].mean_chars:.0f} characters "
            f"on average), {len(tasks)} string column(s) with 2-{MAX_LABELS} values, no 0/1 "
            "column")


def _id(prof, given: str | None, skip: set):
    if given:
        col = prof.columns[given]
        if not col.unique or col.nulls:
            raise ValueError(f"--id {given}: the id must be unique and never null over the "
                             "days read")
        return given, "--id"
    ids = [c for c in prof.columns.values() if c.name not in skip and c.unique
           and not c.nulls and not c.event_time and ((c.kind == "str" and not c.spaced) or c.kind == "int")]
    ids.sort(key=lambda c: (not c.name.lower().endswith("id"), c.kind != "str"))
    return (ids[0].name, "unique over the days read") if ids else (None, "")


def _task_name(column: str) -> str:
    name = re.sub(r"\W", "_", column)[:60] or "task"
    if not re.match(r"^[A-Za-z_]", name) or name in RESERVED:
        name = f"task_{name}"
    return name


def _validation(prof, text: str, tasks: list[str]) -> dict:
    days = [d for d in prof.days if d.rows]
    small, large = min(days, key=lambda d: d.rows), max(days, key=lambda d: d.rows)
    col = prof.columns[text]
    medians = [(name, dc.median_chars) for name, dc in prof.day_values(text)
               if dc.median_chars is not None]
    lo_med, hi_med = min(medians, key=lambda m: m[1]), max(medians, key=lambda m: m[1])
    short = 0 if col.nulls else col.min_chars or 0
    out = {"min_rows": (small.rows // 2, f"smallest day read: {_n(small.rows)} rows "
                                         f"({small.name}); half of it"),
           "max_rows": (large.rows * 2, f"largest day read: {_n(large.rows)} rows "
                                        f"({large.name}); twice it"),
           "min_chars": (short // 2, f"shortest text read: {short} characters; half of it"),
           "max_chars": (max(2, col.max_chars * 2), f"longest text read: "
                                                    f"{_n(col.max_chars)} characters; twice it"),
           "min_median_chars": (lo_med[1] // 2, f"lowest median length of a day: "
                                                f"{lo_med[1]} ({lo_med[0]}); half of it"),
           "max_median_chars": (max(lo_med[1] // 2, hi_med[1] * 2),
                                f"highest median length of a day: {hi_med[1]} "
                                f"({hi_med[0]}); twice it")}
    unlabelled, share = [], []
    for column in tasks:
        for name, dc in prof.day_values(column):
            if not dc.rows or dc.values is None:
                continue
            missing = dc.nulls + dc.values.get("", 0)
            unlabelled.append((name, column, missing / dc.rows))
            counts = [v for k, v in dc.values.items() if k != ""]
            if counts:
                share.append((name, column, max(counts) / sum(counts)))
    day, column, u = max(unlabelled, key=lambda x: x[2])
    out["max_unlabelled_rate"] = (_up(min(1.0, u * 1.5 + 0.05)),
                                  f"most unlabelled rows of a task in a day: {_pct(u)} "
                                  f"({column}, {day}); 1.5x it plus 5%")
    day, column, s = max(share, key=lambda x: x[2])
    out["max_class_share"] = (_up(s + (1 - s) / 2), f"largest class share of a task in a "
                                                    f"day: {_pct(s)} ({column}, {day}); "
                                                    "halfway to 100%")
    dup = max(prof.day_values(text), key=lambda x: x[1].text_dups / max(1, x[1].rows))
    rate = dup[1].text_dups / max(1, dup[1].rows)
    out["max_duplicate_rate"] = (_up(max(0.01, 2 * rate)), f"most repeated texts in a day: "
                                                           f"{_pct(rate)} ({dup[0]}); twice "
                                                           "it, at least 1%")
    return out


def scored_eval_texts(rows: int) -> float:
    """About how many of a window's `rows` texts the gate scores when the DAG runs with its
    form's defaults: the eval split (the preprocess step's eval_percent) less the two dev
    slices taken from it for early stopping and calibration (stages.dev_examples)."""
    n_eval = rows * TextPreprocessSpec.eval_percent / 100
    dev = dev_examples({"dev_examples": DEV_EXAMPLES}, {"preprocess": {"rows_eval": int(n_eval)}})
    return max(0.0, n_eval - 2 * dev)


def _evidence_notes(prof, tasks: list[str]) -> list[str]:
    """A warning when the days read (the window a run would train on now) would leave the
    gate fewer labelled eval texts of a task, or of one of its classes, than it needs before
    it may bless (task_config.Gate): said at config time, not after a fine-tune. The
    minimums are not lowered here: they keep the gate from judging on noise (rule 21)."""
    rows = sum(d.rows for d in prof.days)
    if not rows:
        return []
    scale = scored_eval_texts(rows) / rows
    need, short = Gate(), []
    for column in tasks:
        labelled, classes = 0, {}
        for _, dc in prof.day_values(column):
            for value, n in (dc.values or {}).items():
                if value != "":
                    labelled += n
                    classes[value] = classes.get(value, 0) + n
        if labelled * scale < need.min_eval_rows:
            short.append(f"tasks.{_task_name(column)} about {labelled * scale:,.0f} "
                         f"labelled (min_eval_rows {need.min_eval_rows})")
        # A class by its place in the written config, never its value (a file's content).
        order = {label: i for i, label in enumerate(_labels(prof.columns[column]))}
        rare = sorted((n * scale, order[str(v)]) for v, n in classes.items()
                      if n * scale < need.min_eval_positives and str(v) in order)
        if rare:
            named = ", ".join(f"[{i}] about {n:.1f}" for n, i in rare[:3])   # [3], [6]
            more = f" and {len(rare) - 3} more" if len(rare) > 3 else ""
            short.append(f"tasks.{_task_name(column)}.labels{named}{more} "
                         f"(min_eval_positives {need.min_eval_positives})")
    if not short:
        return []
    return [f"WARNING: the {len(prof.days)} day(s) read leave the gate about "
            f"{scored_eval_texts(rows):,.0f} scored eval texts at eval_percent "
            f"{TextPreprocessSpec.eval_percent} (after the two dev slices), below its "
            f"minimums: {'; '.join(short)}: a run on them would not bless its model. More days "
            "in the window (window_days), a larger eval_percent, or lower minimums in the "
            "config's gate: section (judged on fewer texts) change that"]


def suggest(prof, *, label=None, text=None, id_column=None) -> tuple[dict, list[str]]:
    """(config document with (value, comment) leaves, notes for the user)."""
    notes: list[str] = []
    cols = prof.columns
    if text:
        if cols[text].kind != "str":
            raise ValueError(f"--text {text}: the text column must hold strings")
        why_text = "--text"
    else:
        texts = sorted((c for c in cols.values() if c.kind == "str" and c.name != id_column
                        and c.name != label and not c.event_time), key=lambda c: -c.mean_chars)
        if not texts:
            raise ValueError(f"no string column under {prof.raw_root} to read as the text "
                             "(give --text, or --family ctr)")
        text, why_text = texts[0].name, (f"the longest strings: {texts[0].mean_chars:.0f} "
                                         "characters on average")
    id_col, why_id = _id(prof, id_column, {text, label})
    if label:
        if not _is_task(cols[label]):
            raise ValueError(f"--label {label}: a task's column must hold 2-{MAX_LABELS} "
                             "distinct strings")
        tasks = [label]
    else:
        tasks = [c.name for c in cols.values() if _is_task(c) and c.name not in (text, id_col)]
    if not tasks:
        raise ValueError(f"no string column under {prof.raw_root} holds 2-{MAX_LABELS} "
                         "distinct values: a text config needs a task (give --label)")
    doc: dict = {"description": f"Suggested from {prof.raw_root}"}
    if id_col:
        doc["example_id"] = (id_col, why_id)
    else:
        doc["#id"] = ("example_id left out: no column is unique over the days read, so each "
                      "record's id is derived (a hash of its text and labels).")
        notes.append("no unique id column: ids are derived from each record's text and labels")
    doc["text"] = (text, why_text)
    if cols[text].nulls:
        notes.append(f"text column {text!r} is null in {_n(cols[text].nulls)} row(s): "
                     "validation counts them as empty texts")
    doc["tasks"] = {_task_name(c): {"label_column": c, "labels": (
        _labels(cols[c]), f"every value seen ({len(_labels(cols[c]))}); a new one fails "
                          "validation")} for c in tasks}
    doc["validation"] = _validation(prof, text, tasks)
    notes.extend(_evidence_notes(prof, tasks))
    used = {text, *tasks, *([id_col] if id_col else [])}
    unused = [c for c in cols if c not in used]
    if unused:
        notes.append(f"not used: {', '.join(unused)} (a text config reads only the id, the "
                     "text and the task columns)")
    return doc, notes
