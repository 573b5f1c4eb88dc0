"""What the capacity plan (`retrain plan`) may know about the CTR steps: their defaults,
the training budget, the network's table shapes, and the feature config.

Why a module of its own: the plan is arithmetic over measured figures, and it must not
reach into the trainer or the preprocessing step (their specs, private helpers and
constants move as the steps change). This is the one interface it imports (an import
contract in pyproject.toml says so); every answer comes from the step's own code, so
the plan and the steps cannot disagree. Stdlib only at import: the steps are imported
inside each function.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class StepDefaults:
    """The defaults a plan assumes where its spec names nothing."""
    eval_percent: int            # held-out share of each day (preprocessing)
    validation_percent: int      # early-stopping slice of the window (trainer)
    optimizer: str
    embedding_dim: int
    min_shard_bytes: int         # a table below this stays whole on one ps
    batch_size: int
    steps_per_execution: int
    export_sample_rows: int      # eval rows the export scores on the coordinator


def defaults() -> StepDefaults:
    from components.ctr.preprocess import PreprocessSpec
    from components.ctr.ps_train import PsTrainSpec
    from components.ctr.train_export import EXPORT_SAMPLE_ROWS
    return StepDefaults(
        eval_percent=PreprocessSpec.eval_percent,
        validation_percent=PsTrainSpec.validation_percent,
        optimizer=PsTrainSpec.optimizer, embedding_dim=PsTrainSpec.embedding_dim,
        min_shard_bytes=PsTrainSpec.min_shard_bytes, batch_size=PsTrainSpec.batch_size,
        steps_per_execution=PsTrainSpec.steps_per_execution,
        export_sample_rows=EXPORT_SAMPLE_ROWS)


def train_budget(train_rows: int, epochs: int | None = None) -> tuple[int, int]:
    """(examples, steps) the trainer runs for a window of `train_rows` training rows."""
    from components.ctr import ps_train
    return ps_train.train_budget(
        ps_train.PsTrainSpec(preprocess_dir="", out_dir="", epochs=epochs), train_rows)


def network_shapes(fcfg, table_rows: dict[str, int], embedding_dims: dict[str, int],
                   deep_fields: list[str], embedding_dim: int | None = None,
                   optimizer: str | None = None) -> dict:
    """The trainer's static network for this feature config and these overrides, with its
    own checks (a field the config lacks raises KeyError naming it): {"rows": {field:
    table rows}, "dims": {field: embedding width}, "fm": [fields], "fm_dim", "multi":
    {field: max values}, "count_features": [fields], "dense": [features], "hidden":
    [units]}."""
    from components.ctr import ps_train
    spec = ps_train.PsTrainSpec(
        preprocess_dir="", out_dir="", table_rows=dict(table_rows),
        embedding_dims=dict(embedding_dims), deep_fields=list(deep_fields),
        embedding_dim=embedding_dim or ps_train.PsTrainSpec.embedding_dim,
        optimizer=optimizer or ps_train.PsTrainSpec.optimizer)
    return ps_train._config(spec, fcfg)


def feature_config(path: str | None = ""):
    """The feature config a plan sizes for ("": the generated logs')."""
    from components.ctr import feature_config as fc
    return fc.load_for(path)


def default_feature_config():
    """The generated logs' feature config: the one the benchmarks measured."""
    from components.ctr import feature_config as fc
    return fc.default()
