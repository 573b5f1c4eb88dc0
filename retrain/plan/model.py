"""The plan itself: each step's work and rate, the fewest machines per stage, and the ps count.

Pure arithmetic over the figures and tables; what it knows of the CTR steps comes
through `components.ctr.plan_facts`, imported inside the functions.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from retrain.plan.figures import Figures, load_figures
from retrain.plan.fmt import _dur
from retrain.plan.spec import (BENCH_DIR, MAX_MACHINES, PS_NETWORK_USE, STAGES, USABLE_MEMORY,
                               PlanSpec, _check_spec)
from retrain.plan.tables import model_tables, ps_bytes, shards


@dataclasses.dataclass(frozen=True)
class Part:
    what: str
    work: float              # rows or examples
    rate: float              # per machine of the stage (per process when not parallel)
    figure: str              # name of the Figure the rate comes from
    scaling: str             # how the figure became `rate`
    parallel: bool           # spread over the stage's machines, as built

    def seconds(self, n: int) -> float:
        return self.work / (self.rate * (n if self.parallel else 1))


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    startup: float
    startup_figure: str
    parts: tuple[Part, ...]

    def seconds(self, n: int, distributed: bool = False) -> float:
        return self.startup + sum(p.work / p.rate / n if distributed and not p.parallel
                                  else p.seconds(n) for p in self.parts)


@dataclasses.dataclass
class StagePlan:
    name: str
    role: str
    budget_s: float
    machines: int | None         # as built; None: no count fits
    wall_s: float | None
    blocker: str = ""            # why the stage cannot meet its share as built
    machines_if_distributed: int | None = None
    wall_if_distributed_s: float | None = None
    too_short: str = ""          # no machine count at all fits


def size_stage(name: str, role: str, steps: list[Step], budget: float,
               max_useful: int = MAX_MACHINES) -> StagePlan:
    """Fewest machines whose stage wall time fits `budget`: ceil(parallel work / (budget
    - start-up - one-process work)). When the one-process work alone is too long, the
    count if it were spread over the machines too (not built) is given beside it."""
    startup = sum(s.startup for s in steps)
    parts = [p for s in steps for p in s.parts]
    serial = sum(p.seconds(1) for p in parts if not p.parallel)
    parallel = sum(p.seconds(1) for p in parts if p.parallel)
    plan = StagePlan(name, role, budget, None, None)
    if budget <= startup:
        plan.too_short = (f"deadline too short for any machine count: {name} gets "
                          f"{_dur(budget)} of the deadline and its fixed start-up alone "
                          f"takes {_dur(startup)}")
        return plan
    room = budget - startup - serial
    if room > 0:
        plan.machines = max(1, math.ceil(parallel / room - 1e-9))
    else:
        slow = [p.what for p in parts if not p.parallel]
        plan.blocker = (f"{', '.join(slow)} run{'s' if len(slow) == 1 else ''} in one process "
                        f"as built: {_dur(serial)} > the {_dur(budget - startup)} left of "
                        f"{name}'s share after start-up")
        plan.machines_if_distributed = max(1, math.ceil((parallel + serial)
                                                        / (budget - startup) - 1e-9))
    for attr in ("machines", "machines_if_distributed"):
        n = getattr(plan, attr)
        if n is not None and n > max_useful:
            plan.too_short = (f"deadline too short for any machine count: {name} needs {n} "
                              f"{role} machines but at most {max_useful} can share the work")
    if plan.machines:
        plan.wall_s = sum(s.seconds(plan.machines) for s in steps)
    if plan.machines_if_distributed:
        plan.wall_if_distributed_s = sum(s.seconds(plan.machines_if_distributed, True)
                                         for s in steps)
    return plan


@dataclasses.dataclass
class Plan:
    spec: dict
    data: dict
    stages: list[StagePlan]
    steps: dict[str, dict]
    parameter_servers: dict
    figures: dict[str, dict]
    assumptions: list[dict]
    blockers: list[str]
    fits: bool
    total_wall_s: float | None


def table_step(fig: Figures, largest_rows: int) -> tuple[float, str]:
    """(factor dividing the training rate, its note) for tables of `largest_rows` rows: the
    sharded run's slowdown once tables pass the sizes the training sweep ran at."""
    if largest_rows <= fig.sharded_from_rows.value:
        return 1.0, ""
    f = fig.table_step_factor.value
    return f, f" / {f:.2f} (tables of {largest_rows:,} rows: table_step_factor)"


def _steps(spec: PlanSpec, fig: Figures, fcfg, default_cfg,
           largest_rows: int = 0) -> tuple[dict[str, Step], dict]:
    """The work of each step and the rate one machine of its role does it at."""
    from components.ctr import plan_facts
    step = plan_facts.defaults()
    eval_pct = step.eval_percent if spec.eval_percent is None else spec.eval_percent
    val_pct = (step.validation_percent if spec.validation_percent is None
               else spec.validation_percent)
    window_rows = round(spec.rows_per_day * spec.window_days)
    train_rows = window_rows * (100 - eval_pct) / 100 * (100 - val_pct) / 100
    examples, steps = plan_facts.train_budget(max(1, round(train_rows)), spec.epochs)
    n_fields = len(fcfg.features) + len(fcfg.crosses)
    base = len(default_cfg.features) + len(default_cfg.crosses)
    factor = n_fields / base
    table_factor, table_note = table_step(fig, largest_rows)
    beam = spec.machine("beam")
    beam_note = (f" x {beam.cores} cores" + (f" / {factor:.2f} (features {n_fields} vs "
                                             f"{base} benchmarked)" if factor != 1 else ""))
    out = {
        "validate": Step("validate", fig.validate_startup.value, "validate_startup", (
            Part("rows of the new day", spec.rows_per_day,
                 fig.validate_rate.value * beam.cores / factor, "validate_rate", beam_note,
                 True),
            # Chain of custody: the new day's bytes hashed once, in the validate task's
            # own process; later checks of unchanged days only stat their files.
            Part("rows of the new day, content digest (the task's one process)",
                 spec.rows_per_day, fig.custody_rate.value, "custody_rate", "", False))),
        "preprocess": Step("preprocess", fig.preprocess_startup.value, "preprocess_startup", (
            Part("rows of the window", window_rows,
                 fig.preprocess_rate.value * beam.cores / factor, "preprocess_rate", beam_note,
                 True),)),
        "train": Step("train", fig.train_startup.value, "train_startup", tuple(
            [Part("training examples (the budget)", examples,
                  fig.train_rate.value / table_factor, "train_rate", table_note, True)]
            + ([Part("export's bounded sample of eval rows (coordinator)",
                     min(step.export_sample_rows, spec.rows_per_day * eval_pct / 100),
                     fig.score_rate.value, "score_rate", "", False)]
               if spec.export else []))),
        "evaluate": Step("evaluate", fig.evaluate_startup.value, "evaluate_startup", (
            Part("held-out rows of the window, 2 models (Beam job)", window_rows * eval_pct / 100,
                 fig.evaluate_rate.value * spec.machine("evaluate").cores / factor,
                 "evaluate_rate",
                 f" x {spec.machine('evaluate').cores} cores" + (
                     f" / {factor:.2f} (features)" if factor != 1 else ""), True),)),
    }
    data = {"rows_per_day": spec.rows_per_day, "window_days": spec.window_days,
            "window_rows": window_rows, "eval_percent": eval_pct,
            "validation_percent": val_pct, "train_rows": round(train_rows),
            "train_examples": examples, "train_steps": steps,
            "batch_size": step.batch_size, "steps_per_execution": step.steps_per_execution,
            "epochs": spec.epochs, "feature_factor": round(factor, 3)}
    return out, data


def plan(spec: PlanSpec, bench: Path = BENCH_DIR) -> Plan:
    """The machines one experiment needs, each figure with its source."""
    from components.ctr import plan_facts
    _check_spec(spec)
    step = plan_facts.defaults()
    optimizer = spec.optimizer or step.optimizer
    fig = load_figures(spec.window_days, optimizer, spec.rows_per_day * spec.window_days, bench)
    fcfg = plan_facts.feature_config(spec.feature_config)
    default_cfg = plan_facts.default_feature_config()
    tables, dense, slots = model_tables(spec, fcfg)
    steps, data = _steps(spec, fig, fcfg, default_cfg,
                         max((t.rows for t in tables if t.trainable), default=0))
    deadline = spec.deadline_hours * 3600
    shares = {s: spec.shares.get(s, 0.0) for s in STAGES}
    max_workers = math.ceil(data["train_steps"] / data["steps_per_execution"])
    stages = [size_stage("preprocess", "beam", [steps["validate"], steps["preprocess"]],
                         shares["preprocess"] * deadline),
              size_stage("train", "worker", [steps["train"]], shares["train"] * deadline,
                         max_useful=max_workers),
              size_stage("evaluate", "evaluate", [steps["evaluate"]],
                         shares["evaluate"] * deadline)]
    blockers = [f"{s.name}: {s.too_short or s.blocker}" for s in stages
                if s.too_short or s.blocker]

    # Parameter servers: memory (largest shards + slots) and network (lookups of all workers).
    ps_m = spec.machine("ps")
    min_shard = step.min_shard_bytes
    usable_mb = ps_m.memory_gb * 1024 * USABLE_MEMORY

    def need_mb(n: int) -> float:
        return (fig.ps_runtime_mb.value
                + fig.ps_peak_factor.value * ps_bytes(tables, n, slots, min_shard) / 2**20)

    n_mem = None
    if need_mb(MAX_MACHINES) <= usable_mb:
        lo, hi = 1, MAX_MACHINES
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if need_mb(mid) <= usable_mb else (mid + 1, hi)
        n_mem = lo
    else:
        blockers.append(f"parameter servers: a {ps_m.memory_gb:g} GB ps cannot hold even "
                        f"its share of the tables plus the TensorFlow runtime")
    per_example = sum(t.lookups * t.width * 4 * (2 if t.trainable else 1) for t in tables)
    per_example += dense * 4 * 2 / data["batch_size"]
    train = stages[1]
    workers = train.machines_if_distributed or train.machines or 1
    link = spec.ps_network_gbps * 1e9 / 8 * PS_NETWORK_USE
    n_net = max(1, math.ceil(workers * fig.train_rate.value * per_example / link - 1e-9))
    num_ps = max(n_mem or 1, n_net)
    weights_gb = sum(t.rows * t.width * 4 for t in tables) / 2**30
    # The export does not gather (each ps writes its shards), but every evaluation worker
    # loads the candidate and the published model whole: the one place tables meet.
    ev_m = spec.machine("evaluate")
    if 2 * weights_gb + fig.ps_runtime_mb.value / 1024 > ev_m.memory_gb * USABLE_MEMORY:
        blockers.append(f"evaluate: each evaluation worker loads both models whole "
                        f"(2 x {weights_gb:.1f} GB of tables) but an evaluation machine has "
                        f"{ev_m.memory_gb:g} GB")
    beam_m = spec.machine("beam")
    if fig.preprocess_peak_mb.value / 1024 > beam_m.memory_gb * USABLE_MEMORY:
        blockers.append(f"preprocess: a Beam worker peaks at {fig.preprocess_peak_mb.value:.0f} "
                        f"MB, more than a {beam_m.memory_gb:g} GB machine leaves")
    ps = {"count": num_ps, "for_memory": n_mem, "for_network": n_net,
          "machine": dataclasses.asdict(ps_m), "optimizer": optimizer, "slots": slots,
          "min_shard_bytes": min_shard,
          "per_ps_weights_and_slots_mb": round(ps_bytes(tables, num_ps, slots, min_shard)
                                               / 2**20, 1),
          "per_ps_need_mb": round(need_mb(num_ps)), "per_ps_usable_mb": round(usable_mb),
          "all_weights_gb": round(weights_gb, 3),
          "all_weights_and_slots_gb": round(sum(t.rows * t.width * 4 * (1 + (
              slots if t.trainable else 0)) for t in tables) / 2**30, 3),
          "bytes_per_example": round(per_example, 1),
          "bytes_per_id": bytes_per_id(tables, slots),
          "tables": [dataclasses.asdict(t) | {"shards": shards(t, num_ps, min_shard)}
                     for t in tables],
          "dense_parameters": dense}
    walls = [s.wall_if_distributed_s or s.wall_s for s in stages]
    total = None if any(w is None for w in walls) else sum(walls)
    fits = not blockers and total is not None and total <= deadline
    step_rows = {name: {"startup_s": round(st.startup, 2), "startup_figure": st.startup_figure,
                        "parts": [dataclasses.asdict(p) for p in st.parts]}
                 for name, st in steps.items()}
    return Plan(spec=_jsonable(spec), data=data, stages=stages, steps=step_rows,
                parameter_servers=ps,
                figures={k: dataclasses.asdict(v) for k, v in fig.all().items()},
                assumptions=assumptions(fig, spec, optimizer), blockers=blockers, fits=fits,
                total_wall_s=total)


def bytes_per_id(tables, slots: int) -> dict[str, int]:
    """Bytes one id (one table row) costs on the ps, per field: every table of the field
    (bias, embedding, factors, counts), 4-byte weights plus the optimizer's slots."""
    out: dict[str, int] = {}
    for t in tables:
        field = t.name.split("_", 1)[1]
        out[field] = out.get(field, 0) + t.width * 4 * (1 + (slots if t.trainable else 0))
    return out


def assumptions(fig: Figures, spec: PlanSpec, optimizer: str) -> list[dict]:
    """Every scaling step the plan takes beyond what was measured, with its source."""
    a = [
        ("Beam throughput is linear in a worker's cores and in the number of workers",
         f"assumed; measured only on one {fig.cores.value:g}-core machine, where the job kept "
         f"{fig.beam_core_use.value:.2f} cores busy ({fig.beam_core_use.source}); no run with "
         f"two or more Beam workers exists here"),
        ("The whole window is analysed every run (a cold analysis cache)",
         "conservative: a warm cache analyses only the new day (bench/results/"
         "analysis_cache.json warm_over_cold_seconds)"),
        ("Per-row preprocessing and validation cost grows with the number of features and "
         "not with table sizes (hash buckets, vocabulary top_k)",
         "assumed; measured only on the generated config's features"),
        ("Training throughput is linear in workers up to the ps network limit",
         f"not measured here: 2 ps + 2 workers on one 2-core machine ran "
         f"{fig.ps_two_by_two.value:.2f}x of 1 + 1 ({fig.ps_two_by_two.source}), bound by "
         f"the shared cores"),
        ("A worker's examples/s does not grow with its cores or a GPU",
         "assumed (conservative): measured with ps, worker and coordinator sharing 2 cores"),
        (f"A ps link carries {spec.ps_network_gbps:g} Gb/s, of which the lookups may use "
         f"{PS_NETWORK_USE:.0%}; lookups spread evenly over the ps",
         "assumed (--ps-network-gbps); multi-host network not measured; tables below "
         "min_shard_bytes stay whole on one ps"),
        ("A ps needs runtime + factor x (its weights + optimizer slots), within "
         f"{USABLE_MEMORY:.0%} of its memory",
         f"{fig.ps_runtime_mb.source}, {fig.ps_peak_factor.source}; the "
         f"{1 - USABLE_MEMORY:.0%} kept for the OS is assumed"),
        ("The trainer makes no pass over the window before its first step: rows, click "
         "rate and id counts come from the preprocessing job (components/ctr/split_stats.py)"
         "; the export scores a bounded sample of eval rows at the one-process training "
         "rate and saves the tables where they live (each ps writes its shards)",
         f"built; {fig.score_rate.source}; bench/results/export_memory.json"),
        ("The evaluation job's throughput is linear in cores and worker machines (part "
         "files spread over workers, accumulators merged); its per-row cost grows with the "
         "number of features",
         f"measured on one {fig.cores.value:g}-core machine ({fig.evaluate_rate.source}); "
         f"2 worker processes on the same cores ran {fig.evaluate_two_workers.value:.2f}x of "
         f"one ({fig.evaluate_two_workers.source}); no run on two machines exists here"),
        ("The chain of custody hashes each day's bytes once, when it is validated, in the "
         "validate task's one process, at one process's disk speed; later checks of the "
         "window stat its files (retrain/orchestration/custody.py)",
         f"{fig.custody_rate.source}; the bytes per row are the generated logs' (a wider "
         f"log costs more per row); a faster disk or more threads are not counted"),
        ("Training runs its whole budget (passes x training rows); early stopping only "
         "shortens it", "components/ctr/ps_train.py train_budget"),
        (f"Tables sharded over ps on separate hosts, each ps below the whole: a step slows "
         f"by table_step_factor ({fig.table_step_factor.value:.2f}x) once a table passes "
         f"{fig.sharded_from_rows.value:,.0f} rows, and no more beyond "
         f"{fig.table_rows_measured.value:,.0f} rows",
         f"measured up to {fig.table_rows_measured.value:,.0f} rows per table "
         f"({fig.table_step_factor.source}); larger tables are not measured"),
    ]
    if optimizer not in ("lazy_adam", "adam"):
        a.append((f"{optimizer} steps as fast as lazy Adam", "not measured"))
    if optimizer == "adam":
        a.append(("Dense Adam's step time grows with the table rows; the slowest point is used",
                  "bench/results/ps_sparse.json adam.step_time_ratio_largest_to_smallest"))
    return [{"assumption": x, "source": s} for x, s in a]


def _jsonable(spec: PlanSpec) -> dict:
    d = dataclasses.asdict(spec)
    d["machines"] = {k or "all": v for k, v in d["machines"].items()}
    return d
