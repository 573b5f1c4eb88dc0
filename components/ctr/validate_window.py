"""Validate the older days of a CTR window that no run has validated yet, in one pass.

One Beam pipeline computes every day's statistics (`beam_jobs.span_stats`, grouped by
day), plus those of a day just before one of them that has no validated statistics (the
reference its drift rules compare with); then each day, oldest first, runs the suites of
`components.ctr.validate` on its own statistics in one shared great-expectations
context. If the shared pass fails (a part that cannot be read, a part changed while
read), statistics are computed day by day instead, so the failing day is named and the
others keep their verdicts.

Reads and writes what `components.ctr.validate` does, for each day; writes
`<out_dir>/window.json` (each day's outcome and timings).
"""
from __future__ import annotations

import datetime as dt
import logging
import sys
import time
from pathlib import Path

from retrain.common import paths
from retrain.common.processes import scratch_dir
from retrain.common.step import main, spec_from_dict
from components.ctr import validate
from components.window_validation import WindowValidateSpec, finish, validate_days

log = logging.getLogger("retrain.validate")


def run(spec: WindowValidateSpec) -> dict:
    """Validate each day of `spec.days` (ValidateSpec fields), one outcome per day."""
    days = [validate.with_thresholds(spec_from_dict(validate.ValidateSpec, d))
            for d in spec.days]
    if not days:
        return finish(spec, [], {})
    configs = {tuple(validate.stats_args(d)) for d in days}
    if len(configs) > 1:
        raise ValueError("the days of one window pass share a feature config, sample size "
                         "and runner")
    t0 = time.perf_counter()
    with scratch_dir(spec.out_dir, "stats") as scratch:
        stats, references = _shared_stats(days, Path(scratch))
        t_stats = time.perf_counter()
        validate.import_gx()
        session = validate.GxSession("window")
        outcomes = validate_days(days, lambda d: validate.run(
            d, stats_from=stats.get(Path(d.span_dir).name), references=references,
            session=session))
    seconds = {"stats": round(t_stats - t0, 3),
               "validate": round(time.perf_counter() - t_stats, 3),
               "shared_stats_pass": bool(stats)}
    return finish(spec, outcomes, seconds)


def _shared_stats(days: list[validate.ValidateSpec], scratch: Path):
    """({span folder name: stats folder}, {date: stats folder}: the days of the pass and
    the reference days before them, for a day whose previous day has no validated
    statistics); both empty when the shared pass fails (each day then computes its own)."""
    spans = [Path(d.span_dir) for d in days if Path(d.span_dir).is_dir()]
    names = {s.name for s in spans}
    refs: dict[dt.date, Path] = {}
    for d in days:
        day = validate._span_date(Path(d.span_dir))
        if day is None or not d.history_root or not d.compute_previous:
            continue
        before = day - dt.timedelta(days=1)
        prev_dir = Path(paths.partition(Path(d.span_dir).parent, before))
        if prev_dir.name in names or not (prev_dir / validate.SUCCESS_MARKER).exists() \
                or validate.find_stats(Path(d.history_root), before) is not None:
            continue
        refs[before] = prev_dir
    if not spans:
        return {}, {}
    first, every = days[0], [*spans, *refs.values()]
    # span_stats puts one span's statistics in --output-dir itself, several in subfolders
    out = scratch if len(every) > 1 else scratch / every[0].name
    argv = [*(f"--span-dir={s}" for s in every), f"--output-dir={out}",
            *validate.stats_args(first)]
    try:
        from beam_jobs import span_stats
        span_stats.run(argv)
    except Exception as e:  # noqa: BLE001 - each day then meets its own error
        log.warning("the shared statistics pass over %d day(s) failed (%s: %s); computing "
                    "each day's statistics on its own", len(every),
                    type(e).__name__, e)
        return {}, {}
    folder = {s.name: scratch / s.name for s in [*spans, *refs.values()]}
    dated = {validate._span_date(s): folder[s.name] for s in spans}
    return ({s.name: folder[s.name] for s in spans},
            {**{day: path for day, path in dated.items() if day is not None},
             **{day: folder[p.name] for day, p in refs.items()}})


if __name__ == "__main__":
    sys.exit(main(WindowValidateSpec, run))
