"""`retrain plan`: how many machines one CTR experiment needs to finish before a deadline.

Why: sizing a cluster by guesswork either misses the deadline or pays for idle machines.
The plan gives Beam workers, parameter servers and training workers with each stage's wall
time; every per-unit figure is read from this project's benchmark results
(bench/results/*.json) and printed with its file and key, every scaling assumption beside
its source. `--check` runs two small sizes here for real and compares.

Reads bench/results/*.json and a feature config; writes only bench/results/plan_check.json
(`--check`). Stdlib only at import; components.ctr is imported inside the functions.
"""
from __future__ import annotations

from retrain.plan.cli import add_cli, parse_machine, spec_from_args
from retrain.plan.figures import Figure, Figures, load_figures, segment
from retrain.plan.local_check import _compare, check
from retrain.plan.model import Part, Plan, StagePlan, Step, assumptions, plan, size_stage
from retrain.plan.output import plan_json, render
from retrain.plan.spec import (BENCH_DIR, CACHED_WINDOW_MAX, CHECK_FILE, CHECK_TOLERANCE,
                               DEFAULT_SHARES, MAX_MACHINES, ROLES, SLOTS, STAGES, Machine,
                               PlanError, PlanSpec)
from retrain.plan.tables import Table, model_tables, ps_bytes, shards

__all__ = [
    "add_cli", "parse_machine", "spec_from_args",
    "Figure", "Figures", "load_figures", "segment",
    "_compare", "check",
    "Part", "Plan", "StagePlan", "Step", "assumptions", "plan", "size_stage",
    "plan_json", "render",
    "BENCH_DIR", "CACHED_WINDOW_MAX", "CHECK_FILE", "CHECK_TOLERANCE", "DEFAULT_SHARES",
    "MAX_MACHINES", "ROLES", "SLOTS", "STAGES", "Machine", "PlanError", "PlanSpec",
    "Table", "model_tables", "ps_bytes", "shards",
]
