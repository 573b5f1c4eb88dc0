"""The typed contract between a family's steps and the DAG factory: what each stage's
step must return (its result JSON may hold more). Stdlib only.

The factory reads each result through these classes (`read(stage, result)`), so a step that
forgets a field fails its task at once, naming the step and the field, instead of a later
task failing on a missing dict key.
"""
from __future__ import annotations

import dataclasses
from typing import Any


class ContractError(RuntimeError):
    """A step returned a result without a field its stage promises (a code bug)."""


@dataclasses.dataclass(frozen=True)
class ValidationResult:
    uri: str                          # the validation report's folder
    rows: int
    gate: str                         # "passed" | "overridden" ("failed" raises instead)
    n_failed: int
    override_reason: str | None = None


@dataclasses.dataclass(frozen=True)
class PreprocessResult:
    output_dir: str                   # what train and evaluate read


@dataclasses.dataclass(frozen=True)
class TrainResult:
    model_dir: str                    # a SavedModel folder (the registry's unit)


@dataclasses.dataclass(frozen=True)
class EvaluationResult:
    eval_uri: str                     # eval.json: candidate, baseline, decision
    blessed: bool
    reasons: list[str]
    candidate: dict[str, Any]
    baseline: dict[str, Any] | None = None
    report_uri: str | None = None


RESULTS = {"validate": ValidationResult, "preprocess": PreprocessResult,
           "train": TrainResult, "evaluate": EvaluationResult}
# Result fields the factory always copies into the stage's lineage record (whatever the
# family's own figures): later runs read a day's validation verdict from there.
RECORDED = {"validate": ("gate", "override_reason")}
URI_FIELD = {"validate": "uri", "preprocess": "output_dir", "train": "model_dir",
             "evaluate": "eval_uri"}


def read(stage: str, result: dict[str, Any], module: str = "") -> Any:
    """The stage's typed result; ContractError names what is missing or mistyped."""
    cls = RESULTS[stage]
    fields = dataclasses.fields(cls)
    missing = [f.name for f in fields if f.name not in result
               and f.default is dataclasses.MISSING]
    if missing:
        raise ContractError(f"step {module or stage} returned no {missing} (a {stage} step "
                            f"must return {[f.name for f in fields]}; got {sorted(result)})")
    value = cls(**{f.name: result[f.name] for f in fields if f.name in result})
    if stage == "validate" and value.gate not in ("passed", "overridden"):
        raise ContractError(f"step {module or stage} returned gate {value.gate!r}: a failed "
                            "validation must raise ValidationFailed")
    if stage == "evaluate" and not isinstance(value.blessed, bool):
        raise ContractError(f"step {module or stage} returned blessed={value.blessed!r}, "
                            "not a boolean")
    return value
