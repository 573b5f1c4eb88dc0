"""Data validation gate for one day of raw CTR click logs (great-expectations 1.x).

A bad day (a dropped column, a producer writing hour as text, no clicks logged, a
truncated or duplicated upload, a broken client skewing a distribution) must stop the
DAG before preprocessing and training spend hours on it, and the person on call must see
from the task log alone *what* broke. A day of logs can be far larger than memory, so
the span is never loaded: one Beam pass (`beam_jobs.span_stats`) computes statistics
and a bounded sample, and the suites of `components.ctr.validation_rules` run on those,
compared with the previous span's statistics (drift, duplicated upload) and the recent
spans' row counts.

Gate: a failed `error` expectation fails the step (`ValidationFailed` names every failed
rule with its observed value), and, if `quarantine_dir` is set, writes a quarantine
marker for the span there (the raw data is never touched); a later run that passes
removes the marker. `override_reason` lets a person pass a failing span on purpose: the
failures and the reason are recorded in the summary.

Reads  `<span_dir>/part-*.parquet` (requires `_SUCCESS`; `_truth.parquet` is ignored) and
       previous spans' `<history_root>/dt=D/<run>/validation/stats/stats.json`.
Writes `<out_dir>/{validation.json, gx_result.json, stats/, data_docs/}` atomically,
pass or fail (Data Docs: `data_docs/index.html`).

The GX run is `components.ctr.validate_gx`, the report's words (what a failed rule
observed, the failure message) `components.ctr.validate_report`; this module is the step:
its spec, parts, history, statistics job and gate.

Module top level is stdlib only, so a DAG file can import `ValidateSpec`.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import shutil
import sys
import time
from pathlib import Path

from retrain.common import quarantine, rawfiles, served_files
from retrain.common.atomic import atomic_dir, read_json, write_json
from retrain.common.errors import ValidationFailed  # noqa: F401  (raised here)
from retrain.common.jsonable import jsonable as _jsonable
from retrain.common.step import main
from retrain.common.verdict import check_override, decide
from retrain.common import paths
from components.gx_session import GxSession, import_gx
from components.ctr.rawformat import PART_SUFFIXES  # noqa: F401  (read by others here)
# The GX run and the report's words live beside this step; their names stay importable
# from here.
from components.ctr.validate_gx import PARTIAL_UNEXPECTED, _validate  # noqa: F401
from components.ctr.validate_report import (_fmt, _item, _observed_text,  # noqa: F401
                                            _parts_schema_diffs, failure_message,
                                            reject_detail)
from components.ctr.validation_rules import (DOMAINS_SUITE, ERROR, SAMPLE_SUITE,  # noqa: F401
                                         STATS_SUITE, SUITE_VERSION, WARNING, THRESHOLD_FIELDS,
                                         build_suites)

log = logging.getLogger("retrain.validate")

SUCCESS_MARKER = "_SUCCESS"
PART_GLOB = "part-*"
SUMMARY_FILE = "validation.json"
GX_RESULT_FILE = "gx_result.json"
STATS_DIR = "stats"
DOCS_DIR = served_files.DATA_DOCS_DIR


@dataclasses.dataclass
class ValidateSpec:
    span_dir: str  # <root>/raw/ctr/dt=YYYY-MM-DD
    out_dir: str  # validation artifact dir (owned by this step; replaced atomically)
    # Span-level bounds; None: the feature config's `validation.thresholds` value, else
    # the built-in default (feature_config.THRESHOLDS, the generated ad-click logs').
    min_rows: int | None = None
    max_rows: int | None = None
    min_click_rate: float | None = None   # the label's positive rate (min_label_rate)
    max_click_rate: float | None = None   # (max_label_rate)
    max_null_rate: float | None = None  # per numeric feature
    max_null_rate_increase: float | None = None  # per numeric feature, vs the previous span
    max_duplicate_rate: float | None = None  # share of rows whose example id is a duplicate
    max_rejected_rate: float | None = None  # share of JSONL records the reader cannot use
    max_previous_overlap: float | None = None  # share of example ids also in the previous span
    max_row_ratio: float | None = None  # rows within [avg / r, avg * r] of the recent spans
    drift_thresholds: dict | None = None  # {feature: {metric, max, severity}} overrides
    history_root: str | None = None  # <root>/runs/ctr: earlier runs' validation artifacts
    history_days: int | None = None
    compute_previous: bool = True  # no stats for the previous span yet: compute them
    require_success_marker: bool = True
    quarantine_dir: str | None = None  # <root>/quarantine/ctr
    override_reason: str | None = None  # pass a failing span on purpose (recorded)
    # With override_reason: the rule ids it lets through; any other failed error rule
    # still fails the span. None: every rule (a blanket override).
    override_rules: list[str] | None = None
    feature_config: str = ""  # YAML/JSON feature config of the logs; "" = generated logs
    run_id: str | None = None
    sample_rows: int = 10_000
    data_docs: bool = True
    # Runner flags of the statistics job (RETRAIN_BEAM_ARGS); []: in this process.
    beam_args: list[str] = dataclasses.field(default_factory=list)


# --------------------------------------------------------------------------- the step


def run(spec: ValidateSpec, *, stats_from: Path | None = None,
        references: dict[dt.date, Path] | None = None,
        session: GxSession | None = None) -> dict:
    """Validate one raw CTR span; write the report; raise ValidationFailed if it fails.

    A window pass (`components.ctr.validate_window`) hands in what it computed once for
    all its days: `stats_from`, this span's statistics folder; `references`, statistics
    of days outside the pass that drift is measured against; `session`, a shared GX
    context. Then Data Docs are built only for a span that does not pass (the summary and
    gx_result.json hold every result either way)."""
    spec = with_thresholds(spec)
    _check_spec(spec)
    span_dir = Path(spec.span_dir)
    try:   # fail fast, before imports
        parts = _find_parts(span_dir, spec.require_success_marker, spec.feature_config)
    except quarantine.UNREADABLE as e:   # no part, too many, a FIFO, a link out of the root
        quarantine.refuse_unreadable(spec.quarantine_dir, span_dir, spec.run_id, e)
        raise
    t0 = time.perf_counter()
    out_dir = Path(spec.out_dir)
    with atomic_dir(out_dir) as tmp:
        try:
            if stats_from is not None:
                shutil.copytree(stats_from, tmp / STATS_DIR)
                stats = read_json(tmp / STATS_DIR / "stats.json")
            else:
                stats = compute_stats(span_dir, tmp / STATS_DIR, spec)
        except quarantine.UNREADABLE as e:   # a part refused as data: no retry mends it
            quarantine.refuse_unreadable(spec.quarantine_dir, span_dir, spec.run_id, e)
            raise
        t_stats = time.perf_counter()
        previous, history, notes = _history(spec, span_dir, tmp / "reference", references)
        import_gx()
        t_import = time.perf_counter()
        overlap = _overlap(stats, previous)
        docs_now = spec.data_docs and session is None
        summary, gx_results = _validate(spec, stats, previous, history, overlap,
                                        tmp / STATS_DIR, tmp / DOCS_DIR if docs_now
                                        else None, session)
        if spec.data_docs and not docs_now and not summary["success"]:
            summary, gx_results = _validate(spec, stats, previous, history, overlap,
                                            tmp / STATS_DIR, tmp / DOCS_DIR)
        t_gx = time.perf_counter()
        summary.update(
            span_dir=str(span_dir), span=span_dir.name, parts=[p.name for p in parts],
            notes=notes, run_id=spec.run_id, suite_version=SUITE_VERSION,
            previous_span=previous and previous.get("span"),
            history_spans=[h.get("span") for h in history],
            overlap_with_previous=overlap,
            rejected={"rows": stats.get("rejected_rows", 0),
                      "by_reason": stats.get("rejected_by_reason", {}),
                      "examples": stats.get("rejected_examples", [])},
            parts_schema_diffs=_parts_schema_diffs(stats),
            stats=str(out_dir / STATS_DIR / "stats.json"),
            sample=str(out_dir / STATS_DIR / "sample.parquet"),
            data_docs=(str(out_dir / DOCS_DIR / "index.html") if (tmp / DOCS_DIR).is_dir()
                       else None),
            spec=dataclasses.asdict(spec),
            seconds={"stats": round(t_stats - t0, 3), "import": round(t_import - t_stats, 3),
                     "validate": round(t_gx - t_import, 3)})
        if summary["data_docs_pages"]:
            summary["data_docs_pages"] = {k: str(out_dir / DOCS_DIR / v)
                                          for k, v in summary["data_docs_pages"].items()}
        verdict = decide(summary["success"], [f["rule"] for f in summary["failed"]],
                         spec.override_reason, spec.override_rules)
        summary["gate"] = verdict.gate
        summary["not_overridden"] = verdict.not_overridden
        summary["override_reason"] = verdict.override_reason
        summary["quarantine"] = _quarantine(spec, summary)
        write_json(tmp / SUMMARY_FILE, _jsonable(summary))
        write_json(tmp / GX_RESULT_FILE, _jsonable(gx_results))
    report = out_dir / SUMMARY_FILE
    docs = summary["data_docs"]
    result = {"success": summary["success"], "gate": summary["gate"], "rows": summary["rows"],
              "click_rate": summary["click_rate"], "n_failed": summary["n_failed"],
              "n_warnings": summary["n_warnings"], "n_expectations": summary["n_expectations"],
              "override_reason": summary["override_reason"], "report": str(report),
              "data_docs": docs, "stats": summary["stats"], "uri": str(out_dir)}
    if docs:
        log.info("Data Docs: %s", docs)
    for w in summary["warnings"]:
        log.warning("warning rule failed: %s", _item(w))
    if summary["gate"] == "failed":
        log.error("span %s failed %d error rule(s); report %s; quarantined: %s",
                  summary["span"], summary["n_failed"], report,
                  (summary["quarantine"] or {}).get("marker"))
        raise ValidationFailed(failure_message(summary), summary)
    if summary["gate"] == "overridden":
        log.warning("span %s failed %d error rule(s) but passes by override (%r): %s",
                    summary["span"], summary["n_failed"], spec.override_reason,
                    failure_message(summary))
    else:
        log.info("span %s passed %d expectations (%d warning(s)): %d rows, click rate %s "
                 "(stats %.1fs, GX import %.1fs, validate %.1fs); report %s",
                 summary["span"], summary["n_expectations"], summary["n_warnings"],
                 summary["rows"], summary["click_rate"], t_stats - t0, t_import - t_stats,
                 t_gx - t_import, report)
    return result


def compute_stats(span_dir: Path, out: Path, spec: ValidateSpec) -> dict:
    """One Beam pass over the span, on the spec's runner (default: in this process)."""
    from beam_jobs import span_stats

    span_stats.run([f"--span-dir={span_dir}", f"--output-dir={out}", *stats_args(spec)])
    return read_json(out / span_stats.STATS_FILE)


def stats_args(spec: ValidateSpec) -> list[str]:
    """The statistics job's flags besides its spans and output: sample size, feature
    config, runner."""
    return [f"--sample-rows={spec.sample_rows}",
            *([f"--feature-config={spec.feature_config}"] if spec.feature_config else []),
            *(spec.beam_args or ["--runner=DirectRunner"])]


_SPEC_TO_CONFIG = {"min_click_rate": "min_label_rate", "max_click_rate": "max_label_rate"}


def with_thresholds(spec: ValidateSpec) -> ValidateSpec:
    """The spec with every unset bound taken from its feature config (rule 14: the numbers
    of a dataset live in its config; a spec field still wins, for tests and one-offs)."""
    from components.ctr import feature_config
    validation = feature_config.load_for(spec.feature_config).validation
    return dataclasses.replace(spec, **{
        n: validation.threshold(_SPEC_TO_CONFIG.get(n, n)) for n in THRESHOLD_FIELDS
        if getattr(spec, n) is None})


def _check_spec(spec: ValidateSpec) -> None:
    if not spec.span_dir or not spec.out_dir:
        raise ValueError("span_dir and out_dir must be set")
    if not 0 <= spec.min_rows <= spec.max_rows:
        raise ValueError(f"need 0 <= min_rows <= max_rows, got {spec.min_rows}, "
                         f"{spec.max_rows}")
    if not 0 <= spec.min_click_rate <= spec.max_click_rate <= 1:
        raise ValueError(f"need 0 <= min_click_rate <= max_click_rate <= 1, got "
                         f"{spec.min_click_rate}, {spec.max_click_rate}")
    for name in ("max_null_rate", "max_null_rate_increase", "max_duplicate_rate",
                 "max_previous_overlap", "max_rejected_rate"):
        if not 0 <= getattr(spec, name) <= 1:
            raise ValueError(f"{name} must be in [0, 1], got {getattr(spec, name)}")
    if spec.max_row_ratio < 1:
        raise ValueError(f"max_row_ratio must be >= 1, got {spec.max_row_ratio}")
    for feature, cfg in (spec.drift_thresholds or {}).items():
        if set(cfg) != {"metric", "max", "severity"} or cfg["severity"] not in (ERROR, WARNING) \
                or cfg["metric"] not in ("js", "linf", "psi", "ks"):
            raise ValueError(f"drift_thresholds[{feature!r}] must be {{metric: js|linf|psi|ks, "
                             f"max: number, severity: error|warning}}, got {cfg!r}")
    check_override(spec.override_reason)


def _find_parts(span_dir: Path, require_marker: bool, config: str = "") -> list[Path]:
    """The span's parts, checked (`rawfiles.list_parts`: regular files inside the raw
    root, at most the config's `max_parts_per_day`), before anything is read."""
    from components.ctr import feature_config

    if not span_dir.is_dir():
        raise FileNotFoundError(f"span directory does not exist: {span_dir}")
    if require_marker and not (span_dir / SUCCESS_MARKER).exists():
        raise FileNotFoundError(
            f"span {span_dir} has no {SUCCESS_MARKER} marker: the producer has not finished "
            f"writing it (or failed); refusing to validate a partial span")
    limits = feature_config.load_for(config).validation.record_limits()
    return rawfiles.list_parts(span_dir, PART_SUFFIXES, span_dir.parent,
                               max_parts=limits.max_parts_per_day)


def _parts(span_dir: Path) -> list[Path]:
    """Part names only (whether a previous day has any; its statistics job checks them)."""
    return sorted(p for p in span_dir.glob(PART_GLOB) if p.name.endswith(PART_SUFFIXES))


# --------------------------------------------------------------------------- history


def _span_date(span_dir: Path) -> dt.date | None:
    name = span_dir.name
    try:
        return dt.date.fromisoformat(name.split("=", 1)[1]) if name.startswith("dt=") else None
    except ValueError:
        return None


def find_stats(history_root: Path, day: dt.date) -> dict | None:
    """Stats of the newest earlier run on `day` whose gate passed (or was overridden)."""
    best = None
    for summary_path in Path(paths.partition(history_root, day)).glob(f"*/validation/{SUMMARY_FILE}"):
        stats_path = summary_path.parent / STATS_DIR / "stats.json"
        try:
            if read_json(summary_path).get("gate") not in ("passed", "overridden") \
                    or not stats_path.exists():
                continue
        except (OSError, ValueError):
            continue
        mtime = summary_path.stat().st_mtime
        if best is None or mtime > best[0]:
            best = (mtime, stats_path)
    return read_json(best[1]) if best else None


def _history(spec: ValidateSpec, span_dir: Path, ref_dir: Path,
             references: dict[dt.date, Path] | None = None):
    """(previous span's stats or None, recent spans' stats, notes). `references`: stats
    folders a window pass already computed for days with no validated stats."""
    notes: list[str] = []
    day = _span_date(span_dir)
    if day is None:
        return None, [], [f"span folder {span_dir.name!r} is not dt=YYYY-MM-DD: no history"]
    root = Path(spec.history_root) if spec.history_root else None
    history = []
    for k in range(1, spec.history_days + 1):
        d = day - dt.timedelta(days=k)
        found = find_stats(root, d) if root else None
        if found is None and k == 1 and spec.compute_previous:
            prev_dir = Path(paths.partition(span_dir.parent, d))
            if d in (references or {}):
                found = read_json(references[d] / "stats.json")
                notes.append(f"previous span {d} had no validated stats: computed them "
                             f"(in this window pass)")
            elif (prev_dir / SUCCESS_MARKER).exists() and _parts(prev_dir):
                found = compute_stats(prev_dir, Path(paths.partition(ref_dir, d)), spec)
                notes.append(f"previous span {d} had no validated stats: computed them "
                             f"(reference/dt={d})")
        if found is not None and not found.get("rows"):
            notes.append(f"span {d} has no usable rows: not a reference")
        elif found is not None:
            found.setdefault("span", paths.partition_name(d))
            history.append(found)
    prev_name = paths.partition_name(day - dt.timedelta(days=1))
    previous = next((h for h in history if h.get("span") == prev_name), None)
    if previous is None:
        notes.append("no statistics of the previous span: drift and overlap rules skipped")
    if not history:
        notes.append("no recent spans' statistics: row count vs recent average skipped")
    return previous, history, notes


def _overlap(stats: dict, previous: dict | None) -> float | None:
    if not previous:
        return None
    from components.ctr.kmv import kmv_overlap
    k = min(stats["config"]["kmv_k"], previous["config"]["kmv_k"])
    return kmv_overlap(stats.get("example_id_kmv"), previous.get("example_id_kmv"), k)


def _quarantine(spec: ValidateSpec, summary: dict) -> dict | None:
    return quarantine.settle(
        spec.quarantine_dir, span=summary["span"], span_dir=summary["span_dir"],
        gate=summary["gate"], run_id=spec.run_id, failed=[_item(f) for f in summary["failed"]],
        report=str(Path(spec.out_dir) / SUMMARY_FILE), data_docs=summary["data_docs"],
        override_reason=summary.get("override_reason"))


is_quarantined = quarantine.is_quarantined


if __name__ == "__main__":
    sys.exit(main(ValidateSpec, run))
