"""What one experiment is (data, tables, deadline, machines) and the limits the plan keeps.

Shared by the model, the output, --check and the command line; imports nothing of theirs.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO / "bench" / "results"
CHECK_FILE = "plan_check.json"
ROLES = ("beam", "ps", "worker", "evaluate")
STAGES = ("preprocess", "train", "evaluate")
DEFAULT_SHARES = {"preprocess": 0.3, "train": 0.55, "evaluate": 0.15}
# beam_jobs.preprocess_ctr.MAX_CACHED_DATASETS (not imported: it loads Beam). Windows up
# to this many days are analysed one dataset per day; longer ones as one dataset, which
# the benchmark's rows sweep measured separately.
CACHED_WINDOW_MAX = 6
SLOTS = {"lazy_adam": 2, "adam": 2, "adagrad": 1, "sgd": 0}   # components/ctr/optimizers.py
USABLE_MEMORY = 0.9          # of a machine's memory; the rest for the OS (assumed)
PS_NETWORK_USE = 0.5         # share of a ps's link the plan lets the lookups fill (assumed)
MAX_MACHINES = 100_000
CHECK_TOLERANCE = 0.30


class PlanError(ValueError):
    """Bad input or an unreadable benchmark file; names the argument, file and key."""


@dataclasses.dataclass(frozen=True)
class Machine:
    cores: int = 16
    memory_gb: float = 64.0
    gpu: bool = False

    def text(self) -> str:
        return f"{self.cores} cores, {self.memory_gb:g} GB, {'GPU' if self.gpu else 'no GPU'}"


@dataclasses.dataclass(frozen=True)
class PlanSpec:
    """What one experiment is: data, tables, deadline, machines. None: the trainer's or
    preprocessing step's own default (components.ctr.ps_train / preprocess specs)."""
    rows_per_day: float = 50_000
    window_days: int = 3
    deadline_hours: float = 24.0
    feature_config: str = ""
    table_rows: dict[str, int] = dataclasses.field(default_factory=dict)
    embedding_dim: int | None = None
    embedding_dims: dict[str, int] = dataclasses.field(default_factory=dict)
    sparse_scale: float = 1.0
    optimizer: str | None = None
    epochs: int | None = None
    validation_percent: int | None = None
    eval_percent: int | None = None
    export: bool = True
    machines: dict[str, Machine] = dataclasses.field(default_factory=dict)
    shares: dict[str, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_SHARES))
    ps_network_gbps: float = 10.0

    def machine(self, role: str) -> Machine:
        return self.machines.get(role) or self.machines.get("") or Machine()


def _check_spec(spec: PlanSpec) -> None:
    if not spec.rows_per_day >= 1 or not math.isfinite(spec.rows_per_day):
        raise PlanError(f"--rows-per-day must be >= 1, got {spec.rows_per_day:g}")
    if spec.window_days < 1:
        raise PlanError(f"--window-days must be >= 1, got {spec.window_days}")
    if not spec.deadline_hours > 0 or not math.isfinite(spec.deadline_hours):
        raise PlanError(f"--deadline-hours must be a number > 0, got {spec.deadline_hours:g}")
    if not spec.sparse_scale > 0 or not math.isfinite(spec.sparse_scale):
        raise PlanError(f"--sparse-scale must be a number > 0, got {spec.sparse_scale:g}")
    if not spec.ps_network_gbps > 0:
        raise PlanError(f"--ps-network-gbps must be > 0, got {spec.ps_network_gbps:g}")
    if spec.epochs is not None and spec.epochs < 1:
        raise PlanError(f"--epochs must be >= 1, got {spec.epochs}")
    if spec.optimizer is not None and spec.optimizer not in SLOTS:
        raise PlanError(f"--optimizer must be one of {', '.join(SLOTS)}")
    for k, v in {**spec.table_rows, **spec.embedding_dims}.items():
        if v < 1:
            raise PlanError(f"{k}: table rows and embedding dims must be >= 1, got {v}")
    if spec.embedding_dim is not None and spec.embedding_dim < 1:
        raise PlanError(f"--embedding-dim must be >= 1, got {spec.embedding_dim}")
    unknown = sorted(set(spec.shares) - set(STAGES))
    if unknown or any(not (0 < v <= 1) for v in spec.shares.values()):
        raise PlanError(f"--share takes STAGE=FRACTION, STAGE one of {', '.join(STAGES)}, "
                        f"FRACTION in (0, 1]")
    if sum(spec.shares.get(s, 0) for s in STAGES) > 1 + 1e-9:
        raise PlanError("the stages' deadline shares add up to more than 1")
    for role, m in spec.machines.items():
        _check_machine(role, m)


def _check_machine(role: str, m: Machine) -> None:
    name = f"--machine {role + ':' if role else ''}"
    if isinstance(m.cores, bool) or not isinstance(m.cores, int) or m.cores < 1:
        raise PlanError(f"{name}: cores must be a whole number >= 1")
    if not m.memory_gb > 0 or not math.isfinite(m.memory_gb):
        raise PlanError(f"{name}: memory_gb must be a number > 0")
