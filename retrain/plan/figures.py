"""The per-unit figures the plan scales, each read from bench/results/*.json with its source.

A missing key or file is a PlanError naming the file and key, never a guess.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from retrain.plan.fmt import _n
from retrain.plan.spec import BENCH_DIR, CACHED_WINDOW_MAX, PlanError


@dataclasses.dataclass(frozen=True)
class Figure:
    value: float
    unit: str
    source: str          # file and key it came from, and how it was derived


def _read(bench: Path, name: str) -> dict:
    path = bench / name
    if not path.is_file():
        raise FileNotFoundError(f"benchmark result {path} is missing (bench/{Path(name).stem}"
                                f".py writes it)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise PlanError(f"benchmark result {path} is not valid JSON "
                        f"({type(e).__name__})") from None


def _key(doc, name: str, *keys):
    for k in keys:
        try:
            doc = doc[k]
        except (KeyError, IndexError, TypeError):
            raise PlanError(f"benchmark result {name}: no key "
                            f"{'.'.join(map(str, keys))}") from None
    return doc


def _num(doc, name: str, *keys) -> float:
    v = _key(doc, name, *keys)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise PlanError(f"benchmark result {name}: {'.'.join(map(str, keys))} is not a "
                        f"number >= 0")
    return float(v)


def segment(points: list[tuple[float, float]], x: float) -> tuple[float, float, int]:
    """(slope, intercept, i) of the measured curve through `points` at x: the straight
    piece between the two measured sizes around x (the first or last piece, extended,
    outside them), i its first point. The measured curve, not one line through it: the
    preprocessing sweep is concave (per-row cost falls with size), so a single line
    misses its own points."""
    pts = sorted(points)
    if len(pts) < 2 or len({p[0] for p in pts}) < len(pts):
        raise PlanError("a curve needs two or more points at different sizes")
    i = 0
    while i < len(pts) - 2 and x > pts[i + 1][0]:
        i += 1
    (x0, y0), (x1, y1) = pts[i], pts[i + 1]
    slope = (y1 - y0) / (x1 - x0)
    return slope, y0 - slope * x0, i


@dataclasses.dataclass(frozen=True)
class Figures:
    cores: Figure               # cores of the machine the benchmarks ran on
    preprocess_rate: Figure     # rows/s per core
    preprocess_startup: Figure
    preprocess_peak_mb: Figure
    validate_rate: Figure       # rows/s per core
    validate_startup: Figure
    train_rate: Figure          # examples/s per worker
    train_startup: Figure
    ps_runtime_mb: Figure
    ps_peak_factor: Figure
    table_step_factor: Figure   # step time at the largest sharded tables over the smallest
    table_rows_measured: Figure  # largest table rows the sharded ps run trained
    sharded_from_rows: Figure   # its smallest tables: below, the step time is taken as flat
    score_rate: Figure          # examples/s of one process
    custody_rate: Figure        # rows/s of the content digest (one process, every byte read)
    evaluate_rate: Figure       # held-out rows/s per core of the evaluation job (2 models)
    evaluate_startup: Figure
    beam_core_use: Figure       # cores the local Beam job kept busy (evidence only)
    evaluate_two_workers: Figure  # 2 worker processes over 1, same cores (evidence only)
    ps_two_by_two: Figure       # 2 ps + 2 workers over 1 + 1 (evidence only)

    def all(self) -> dict[str, Figure]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _train_figures(bench: Path, window_rows: float) -> dict[str, Figure]:
    """Training's figures from the run `retrain plan --check` makes, measured at other
    sizes (bench/train_sweep.py): the loop on the piece of its curve around the plan's
    size; start-up is the rest of the wall time. The sweep also timed the counting pass
    the trainer made then (`stats_s`); the preprocessing job counts now, so it is left
    out of both."""
    sw = _read(bench, n := "train_sweep.json")
    pts = [p for p in _key(sw, n, "points") if isinstance(p, dict)]
    share = sum(_num(p, n, "train_rows") / _num(p, n, "window_rows") for p in pts) / max(
        len(pts), 1)
    rows = window_rows * share
    loop_slope, loop_icpt, j = segment([(_num(p, n, "examples"), _num(p, n, "loop_s"))
                                        for p in pts], rows)
    if loop_slope <= 0:
        raise PlanError(f"benchmark result {n}: points give no positive loop rate")
    starts = sorted(_num(p, n, "startup_s") for p in pts)
    startup = max(0.0, starts[len(starts) // 2] + loop_icpt)
    piece = lambda k: (f"the piece between points[{k}] and points[{k + 1}] by size"  # noqa: E731
                       " (1 ps + 1 worker)")
    return {
        "train_rate": Figure(1 / loop_slope, "examples/s per worker",
                             f"bench/results/{n} points[*].examples, .loop_s: {piece(j)}"),
        "train_startup": Figure(startup, "s", f"bench/results/{n} median of points[*]."
                                f"startup_s (wall - counting - loop) + the loop piece's "
                                f"intercept")}


def _evaluate_figures(bench: Path) -> dict[str, Figure]:
    """The evaluation job's rate: the piece between its two largest one-worker runs
    (start-up left out), per core of the machine it ran on."""
    ev = _read(bench, n := "evaluate_ctr.json")
    cores = _num(ev, n, "machine", "cpus")
    ones = [r for r in _key(ev, n, "runs") if isinstance(r, dict)
            and r.get("kind") == "beam_job" and r.get("workers") == 1]
    if len(ones) < 2:
        raise PlanError(f"benchmark result {n}: needs two runs[kind=beam_job, workers=1]")
    pts = sorted((_num(r, n, "rows"), _num(r, n, "seconds")) for r in ones)[-2:]
    slope, _, _ = segment(pts, pts[-1][0])
    if slope <= 0:
        raise PlanError(f"benchmark result {n}: the largest runs give no positive rate")
    pairs = _key(ev, n, "two_over_one_workers")
    two = max((float(v) for v in pairs.values()), default=0.0) if isinstance(pairs, dict) else 0.0
    return {
        "evaluate_rate": Figure(1 / slope / cores, "held-out rows/s per core (2 models)",
                                f"bench/results/{n} runs[kind=beam_job, workers=1]: the "
                                f"piece between {pts[0][0]:,.0f} and {pts[1][0]:,.0f} rows "
                                f"({pts[0][1]:g} s, {pts[1][1]:g} s): 1 / slope / "
                                f"{cores:g} cores"),
        "evaluate_two_workers": Figure(two, "x", f"bench/results/{n} two_over_one_workers "
                                       f"(best; 2 worker processes sharing {cores:g} cores)")}


def _memory_wall_figures(bench: Path, one_ps: float, one_ps_source: str) -> dict[str, Figure]:
    """Per-ps memory and step time with tables sharded over ps on separate hosts
    (bench/memory_wall.py: 2^20 to 2^24 rows per table, each ps capped below the whole).

    The peak factor is the larger of that run's (peak - runtime) / its share and the
    one-ps figure (its whole tables on one ps): both are measured ps peaks, and a plan
    should not pick the kinder one. The step factor is the slowest size's median step
    over the smallest size's: what growing the tables cost a step."""
    mw = _read(bench, n := "memory_wall.json")
    runtime = _num(mw, n, "ps_runtime_mb")
    sizes = [s for s in _key(mw, n, "sizes") if isinstance(s, dict) and s.get("finished")]
    if not sizes:
        raise PlanError(f"benchmark result {n}: no sizes[*] that trained to the end")
    sizes.sort(key=lambda s: _num(s, n, "table_rows"))
    sharded = max((_num(s, n, "ps_peak_private_mb_max") - runtime) / _num(s, n, "share_per_ps_mb")
                  for s in sizes)
    steps = [_num(s, n, "step_ms_median") for s in sizes]
    largest = _num(sizes[-1], n, "table_rows")
    return {
        "ps_peak_factor": Figure(max(one_ps, sharded), "x",
                                 f"{one_ps_source} ({one_ps:.2f}, one ps) or bench/results/"
                                 f"{n} sizes[*] max (ps_peak_private_mb_max - ps_runtime_mb) "
                                 f"/ share_per_ps_mb ({sharded:.2f}, "
                                 f"{int(_num(sizes[0], n, 'num_ps'))} ps on separate hosts), "
                                 f"the larger"),
        "table_step_factor": Figure(max(steps) / steps[0], "x",
                                    f"bench/results/{n} sizes[*].step_ms_median: slowest "
                                    f"({max(steps):g} ms) / at {_n(_num(sizes[0], n, 'table_rows'))}"
                                    f" rows ({steps[0]:g} ms), tables up to {_n(largest)} rows"),
        "table_rows_measured": Figure(largest, "rows per table",
                                      f"bench/results/{n} sizes[-1].table_rows (trained to the "
                                      f"end over ps each capped below the tables)"),
        "sharded_from_rows": Figure(_num(sizes[0], n, "table_rows"), "rows per table",
                                    f"bench/results/{n} sizes[0].table_rows (smaller tables: "
                                    f"the one-ps sweep, bench/results/ps_sparse.json, found "
                                    f"the step flat)"),
    }


def load_figures(window_days: int, optimizer: str, window_rows: float,
                 bench: Path = BENCH_DIR) -> Figures:
    """The per-unit figures, each with its source: the sweep, the piece of it and the
    benchmark point that match the plan's window, its rows and the optimizer."""
    pw = _read(bench, n := "preprocess_window.json")
    cores = _num(pw, n, "machine", "cpus")
    sweep = "3" if window_days <= CACHED_WINDOW_MAX else "7"
    points = [(_num(p, n, "rows_in"), _num(p, n, "seconds"))
              for p in _key(pw, n, "rows_sweep", sweep)]
    slope, icpt, i = segment(points, window_rows)
    (x0, y0), (x1, y1) = sorted(points)[i:i + 2]
    where = (f"bench/results/{n} rows_sweep.{sweep}[*].rows_in, .seconds ({sweep}-day "
             f"windows): the piece between {_n(x0)} rows ({y0:g} s) and {_n(x1)} rows "
             f"({y1:g} s)")
    if slope <= 0 or icpt < 0:
        raise PlanError(f"benchmark result {n}: rows_sweep.{sweep} gives no positive rate "
                        f"and start-up")
    f = {"cores": Figure(cores, "cores", f"bench/results/{n} machine.cpus"),
         "preprocess_rate": Figure(1 / slope / cores, "rows/s per core",
                                   f"{where}: 1 / slope / {cores:g} cores"),
         "preprocess_startup": Figure(icpt, "s", f"{where}: intercept"),
         "preprocess_peak_mb": Figure(max(_num(p, n, "peak_rss_mb") for p in
                                          _key(pw, n, "rows_sweep", sweep)), "MB",
                                      f"bench/results/{n} rows_sweep.{sweep}[*].peak_rss_mb "
                                      f"(largest)")}
    vs = _read(bench, n := "validate_span.json")
    runs = [r for r in _key(vs, n, "runs") if isinstance(r, dict) and r.get("mode") == "validate"
            and r.get("ok")]
    if not runs:
        raise PlanError(f"benchmark result {n}: no runs[mode=validate] that succeeded")
    big = max(runs, key=lambda r: _num(r, n, "rows"))
    f["validate_rate"] = Figure(
        _num(big, n, "stats_rows_per_second") / cores, "rows/s per core",
        f"bench/results/{n} runs[mode=validate, rows={int(big['rows'])}]"
        f".stats_rows_per_second / {cores:g} cores (no machine recorded: the same machine)")
    vw = _read(bench, n := "validate_window.json")
    f["validate_startup"] = Figure(_num(vw, n, "per_day_mean_seconds"), "s",
                                   f"bench/results/{n} per_day_mean_seconds (one step per "
                                   f"{int(_num(vw, n, 'rows_per_day'))}-row day: start-up)")
    es = _read(bench, n := "evaluate_step.json")   # the whole step, not only its job
    f["evaluate_startup"] = Figure(_num(es, n, "startup_seconds"), "s",
                                   f"bench/results/{n} startup_seconds (the evaluation step "
                                   f"through its entry point at two sizes: intercept)")
    ps = _read(bench, n := "ps_sparse.json")
    measured = optimizer if optimizer in ("lazy_adam", "adam") else "lazy_adam"
    pts = [p for p in _key(ps, n, "points") if isinstance(p, dict)
           and p.get("optimizer") == measured]
    if not pts:
        raise PlanError(f"benchmark result {n}: no points[optimizer={measured}]")
    f.update(_train_figures(bench, window_rows))
    f.update(_evaluate_figures(bench))
    if measured == "adam":      # the sweep trains with lazy Adam; dense Adam steps slower
        slowest = lambda o: max(_num(p, n, "step_ms") for p in _key(ps, n, "points")  # noqa
                                if isinstance(p, dict) and p.get("optimizer") == o)
        factor = slowest("lazy_adam") / slowest("adam")
        rate = f["train_rate"]
        f["train_rate"] = Figure(rate.value * factor, rate.unit, f"{rate.source} x {factor:.2f}"
                                 f" (bench/results/{n} slowest lazy_adam / adam step_ms)")
    f["ps_runtime_mb"] = Figure(_num(ps, n, measured, "ps_runtime_mb"), "MB",
                                f"bench/results/{n} {measured}.ps_runtime_mb")
    one_ps = _num(ps, n, measured, "ps_peak_over_weights_and_slots_largest")
    f.update(_memory_wall_figures(bench, one_ps, f"bench/results/{n} {measured}"
                                             f".ps_peak_over_weights_and_slots_largest"))
    pt = _read(bench, n := "ps_train.json")
    rows = [r for r in _key(pt, n, "rows") if isinstance(r, dict)]
    one = [r for r in rows if r.get("ps") == 0]
    b = [r for r in rows if r.get("ps") == 1 and r.get("workers") == 1]
    c = [r for r in rows if r.get("ps") == 2 and r.get("workers") == 2]
    if not (one and b and c):
        raise PlanError(f"benchmark result {n}: rows need ps 0, 1 + 1 and 2 + 2 configs")
    f["score_rate"] = Figure(_num(one[0], n, "examples_per_s"), "examples/s, one process",
                             f"bench/results/{n} rows[ps=0].examples_per_s (one-process "
                             f"training; a proxy for the export's bounded sample)")
    best = lambda rs: max(_num(r, n, "examples_per_s") for r in rs)  # noqa: E731
    f["ps_two_by_two"] = Figure(best(c) / best(b), "x", f"bench/results/{n} best "
                                f"examples_per_s of rows[ps=2, workers=2] / rows[ps=1, workers=1]")
    cd = _read(bench, n := "content_digest.json")
    per_row = _num(cd, n, "bytes") / _num(cd, n, "rows")
    f["custody_rate"] = Figure(
        _num(cd, n, "digest_cold_mb_per_second") * 1e6 / per_row, "rows/s, one process",
        f"bench/results/{n} digest_cold_mb_per_second / (bytes / rows = {per_row:.1f} B "
        f"per row of the generated logs)")
    pc = _read(bench, n := "preprocess_ctr.json")
    f["beam_core_use"] = Figure(_num(pc, n, "b_job", "cpu_seconds_process")
                                / _num(pc, n, "b_job", "seconds"), "cores busy",
                                f"bench/results/{n} b_job.cpu_seconds_process / b_job.seconds")
    return Figures(**f)
