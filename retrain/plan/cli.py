"""`retrain plan`'s arguments: parsed into a PlanSpec, refused with the argument's name.

Registered by retrain/cli.py through the package's `add_cli`; imports stay stdlib-light.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from retrain.plan.local_check import check
from retrain.plan.model import plan
from retrain.plan.output import plan_json, render
from retrain.plan.spec import (BENCH_DIR, CHECK_FILE, CHECK_TOLERANCE, DEFAULT_SHARES, ROLES,
                               SLOTS, Machine, PlanError, PlanSpec, _check_machine)


def _count(text: str) -> int:
    """A whole number, also written 1e11 or 100_000_000."""
    try:
        v = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError("must be a whole number (1e11 and 1_000 work)") from None
    if not math.isfinite(v) or v != int(v):
        raise argparse.ArgumentTypeError("must be a whole number")
    return int(v)


def _pairs(text: str, kind=int) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError("must be NAME=VALUE")
    try:
        return name, kind(value)
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"{name}: the value must be a number") from None


def parse_machine(text: str) -> tuple[str, Machine]:
    """`[ROLE:]cores=16,memory_gb=64,gpu=0` -> (role or "", Machine)."""
    role, sep, rest = text.partition(":")
    if not sep:
        role, rest = "", text
    if role and role not in ROLES:
        raise PlanError(f"--machine: role must be one of {', '.join(ROLES)} (or none: all)")
    values: dict = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if key not in ("cores", "memory_gb", "gpu") or not eq:
            raise PlanError("--machine takes cores=N,memory_gb=N,gpu=0|1")
        try:
            values[key] = {"cores": _count, "memory_gb": float,
                           "gpu": lambda v: bool(int(v))}[key](value)
        except (ValueError, argparse.ArgumentTypeError):
            raise PlanError(f"--machine: {key} must be a number") from None
    if "cores" not in values:
        raise PlanError(f"--machine {role + ':' if role else ''}needs cores=N")
    m = Machine(**values)
    _check_machine(role, m)
    return role, m


EXAMPLES = """examples:
  retrain plan                                         # the demo's 50,000 rows/day
  retrain plan --total-rows 1e11 --sparse-scale 10 --deadline-hours 24
  retrain plan --rows-per-day 2e9 --window-days 7 --machine cores=32,memory_gb=128 \\
      --machine ps:cores=8,memory_gb=64 --table-rows user_id=500000000 --json
  retrain plan --check                                 # two local sizes, about 3.5 minutes

Exit status: 0 the plan fits the deadline (--check: every judged error within 30 %; the
preprocessing job is judged, training is shown beside it), 1 it does not, 2 bad input."""


def add_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="machines and wall time one CTR experiment needs to meet a deadline",
        description="Beam workers, parameter servers and training workers one CTR experiment "
                    "needs to finish within a deadline, with the wall time of each stage. "
                    "Every per-unit figure comes from bench/results/*.json and is printed "
                    "with its file and key; every scaling assumption with its source.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    rows = p.add_mutually_exclusive_group()
    rows.add_argument("--rows-per-day", type=_count, default=None,
                      help="rows (impressions) a day (default 50000)")
    rows.add_argument("--total-rows", type=_count, default=None,
                      help="rows over the whole window instead (split evenly over its days)")
    p.add_argument("--window-days", type=int, default=3, help="days trained on (default 3)")
    p.add_argument("--deadline-hours", type=float, default=24.0,
                   help="wall time one experiment may take (default 24)")
    p.add_argument("--feature-config", default="",
                   help="YAML/JSON feature config (default: the bundled generated.yaml)")
    p.add_argument("--table-rows", type=_pairs, action="append", default=[], metavar="FIELD=ROWS",
                   help="rows of a field's tables (not scaled by --sparse-scale); repeatable")
    p.add_argument("--embedding-dim", default=[], action="append", metavar="DIM|FIELD=DIM",
                   help="embedding width of the deep fields, or of one field (which then "
                        "gets an embedding); repeatable")
    p.add_argument("--sparse-scale", type=float, default=1.0,
                   help="multiply every table's rows (10: '10x sparse parameters')")
    p.add_argument("--optimizer", choices=sorted(SLOTS), default=None,
                   help="the trainer's optimizer (default its own: lazy_adam, 2 slots)")
    p.add_argument("--epochs", type=int, default=None,
                   help="passes over the training rows (default: the trainer's budget, "
                        "max(3 passes, 300,000 examples))")
    p.add_argument("--machine", action="append", default=[], metavar="[ROLE:]cores=N,...",
                   help="machine kind: cores=N,memory_gb=N,gpu=0|1, for every role or one of "
                        f"{', '.join(ROLES)}; repeatable (default cores=16,memory_gb=64,gpu=0)")
    p.add_argument("--share", type=lambda t: _pairs(t, float), action="append", default=[],
                   metavar="STAGE=FRACTION",
                   help="share of the deadline a stage may take (default " +
                        ", ".join(f"{k}={v}" for k, v in DEFAULT_SHARES.items()) + ")")
    p.add_argument("--ps-network-gbps", type=float, default=10.0,
                   help="link speed of a parameter server (assumed; default 10)")
    p.add_argument("--bench-dir", default=str(BENCH_DIR),
                   help="folder of the benchmark results the figures come from")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--check", action="store_true",
                   help="run two small sizes here, compare with the prediction, write "
                        f"bench/results/{CHECK_FILE}")
    p.add_argument("--check-rows-per-day", default="100000,400000",
                   help="--check: rows a day of the two sizes (3-day windows)")
    p.add_argument("--check-repeats", type=int, default=2,
                   help="--check: runs of each step and size; the fastest counts (default 2)")
    p.set_defaults(func=_cli)


def spec_from_args(args: argparse.Namespace) -> PlanSpec:
    if args.window_days < 1:
        raise PlanError(f"--window-days must be >= 1, got {args.window_days}")
    per_day = args.rows_per_day if args.rows_per_day is not None else 50_000
    if args.total_rows is not None:
        per_day = args.total_rows / args.window_days
    dim, dims = None, {}
    for text in args.embedding_dim:
        try:
            if "=" in text:
                k, v = _pairs(text)
                dims[k] = v
            else:
                dim = _count(text)
        except argparse.ArgumentTypeError:
            raise PlanError("--embedding-dim takes DIM or FIELD=DIM (whole numbers)") from None
    machines = dict(parse_machine(t) for t in args.machine)
    shares = dict(DEFAULT_SHARES)
    shares.update(dict(args.share))
    return PlanSpec(rows_per_day=per_day, window_days=args.window_days,
                    deadline_hours=args.deadline_hours, feature_config=args.feature_config,
                    table_rows=dict(args.table_rows), embedding_dim=dim, embedding_dims=dims,
                    sparse_scale=args.sparse_scale, optimizer=args.optimizer,
                    epochs=args.epochs, machines=machines, shares=shares,
                    ps_network_gbps=args.ps_network_gbps)


def _cli(args: argparse.Namespace) -> int:
    bench = Path(args.bench_dir)
    if args.check:
        sizes = tuple(_count(x) for x in args.check_rows_per_day.split(",") if x)
        if len(sizes) != 2 or min(sizes) < 1000:
            raise PlanError("--check-rows-per-day takes two sizes of at least 1000 rows")
        if args.check_repeats < 1:
            raise PlanError("--check-repeats must be >= 1")
        print(f"retrain plan --check: 2 sizes x 3 days, preprocess + train on this machine, "
              f"{args.check_repeats} run(s) each")
        result = check(sizes, repeats=args.check_repeats, bench=bench)
        out = bench / CHECK_FILE
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"{'PASSED' if result['passed'] else 'FAILED'}: largest judged error "
              f"{result['max_abs_judged_error_percent']} % (tolerance {CHECK_TOLERANCE:.0%}); "
              f"written to {out}")
        return 0 if result["passed"] else 1
    p = plan(spec_from_args(args), bench)
    print(json.dumps(plan_json(p), indent=1) if args.json else render(p))
    return 0 if p.fits else 1
