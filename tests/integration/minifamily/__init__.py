"""A minimal third model family, built by the same DAG factory as CTR and text: a linear
regression of `y` on `x` from daily JSONL partitions, gated on RMSE (a "min" metric).

It exists to prove the plug-in shape (README "Add a model family"): a descriptor, spec
builders and five small step modules; no edit of the factory, the gate, the registry or
the push. Each step is a `python -m minifamily.<step>` entry point.
"""
from __future__ import annotations

from retrain.orchestration.families import Family, Metric, Stage

PKG = "minifamily"


def _stage(step: str, spec_class: str, artifact_type: str, **kw) -> Stage:
    return Stage(module=f"{PKG}.{step}", spec_class=f"{PKG}.{step}:{spec_class}",
                 build=f"{PKG}.stages:{step}", artifact_type=artifact_type, **kw)


LINREG = Family(
    name="linreg", dag_id="linreg_daily", doc="Daily linear regression (test family).",
    config_param="linreg_config", config_env="RETRAIN_LINREG_CONFIG",
    config_help="Unused by this family.", raw_root_env="RETRAIN_LINREG_RAW_ROOT",
    config_loader="pathlib:Path",
    stages={"validate": _stage("validate", "Spec", "validation_report", reuse=False,
                               figures=("rows",)),
            "preprocess": _stage("preprocess", "Spec", "examples",
                                 figures=("rows_train", "rows_eval")),
            "train": _stage("train", "Spec", "model"),
            "evaluate": _stage("evaluate", "Spec", "evaluation", reuse=False,
                               figures=("blessed", "candidate"))},
    serving_check=f"{PKG}.serving_check", headline=(Metric("rmse", "min"),),
    params={"max_rmse": {"default": 1.0, "type": "number", "minimum": 0,
                         "description": "Largest eval RMSE a candidate may have."}},
)
