"""Model families as plug-ins: what the one DAG factory (`retrain.orchestration.dag_factory`) needs to
build a family's daily DAG, and the families this package ships.

A family is a config file, its stage modules and this descriptor. The factory gives every
family the same shape and the same guarantees (span sensor, typed bad-data failures,
quarantine and override, lineage, fingerprint reuse, pools, shadow backfills, the gate and
the registry); nothing in the shared layer names a family, a column or a label.

Each stage names the step's `python -m` module and its spec dataclass (what goes in; what
comes out is the stage's result class in `retrain.common.results`), and a *spec
builder*: a stdlib-only function `build(ctx, params, upstream) -> dict` that turns the run
context (span, folders, the config path), the DAG params and the upstream stages' results
into the step's spec. Builders live in `components/<family>/stages.py`; the factory calls
them inside the task, so a family's own knobs never leak into the factory.

Stdlib only: DAG files import this.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable

STAGES = ("validate", "preprocess", "train", "evaluate")


@dataclasses.dataclass(frozen=True)
class Stage:
    module: str                   # `python -m <module>` runs the step
    spec_class: str               # "<module>:<Dataclass>" the spec must fit (tested)
    build: str                    # "<module>:<function>" (ctx, params, upstream) -> spec dict
    artifact_type: str
    figures: tuple[str, ...] = ()
    reuse: bool = True            # reuse a finished artifact with the same fingerprint
    pool: str | None = None
    task_id: str | None = None    # default: the stage name
    # validate only: a step that validates many days in one process (spec: {"days":
    # [this stage's spec per day], "out_dir"}; components.window_validation). None: the
    # window's unvalidated older days run one step each.
    window_module: str | None = None


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str
    direction: str                # "max" (higher is better) or "min"

    def __post_init__(self):
        if self.direction not in ("max", "min"):
            raise ValueError(f"metric {self.name}: direction must be max or min")


@dataclasses.dataclass(frozen=True)
class Family:
    name: str                     # registry model, raw/<name>, runs/<name>, quarantine/<name>
    dag_id: str
    doc: str
    config_param: str             # the DAG param naming the family's config file
    config_env: str               # deployment default of that param
    config_help: str
    config_loader: str            # "<module>:<function>" path -> parsed config (raises)
    raw_root_env: str             # deployment default of the raw_root param
    stages: dict[str, Stage]
    serving_check: str            # module of the serving check run before publishing
    headline: tuple[Metric, ...]  # the gate's and the registry's headline metrics
    params: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # {registry key: train result key}: more metadata stored with a published version.
    registry_extra: dict[str, str] = dataclasses.field(default_factory=dict)
    warm_start: bool = False      # train reads the published model (a lineage input)
    evaluate_reads: str = "raw_span"   # "raw_span" | "preprocessed": evaluation's data input
    tags: tuple[str, ...] = ()

    def __post_init__(self):
        missing = [s for s in STAGES if s not in self.stages]
        if missing:
            raise ValueError(f"family {self.name}: no stage(s) {missing}")
        if self.evaluate_reads not in ("raw_span", "preprocessed"):
            raise ValueError(f"family {self.name}: evaluate_reads must be raw_span or "
                             "preprocessed")

    def task_id(self, stage: str) -> str:
        return self.stages[stage].task_id or stage

    @property
    def model_asset(self) -> str:
        return f"{self.name}_model"


def resolve(ref: str) -> Callable | type:
    """"pkg.module:attr" -> the object (import of a stdlib-only module: cheap)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def _stage(module: str, spec_class: str, build: str, artifact_type: str, **kw) -> Stage:
    return Stage(module=module, spec_class=f"{module}:{spec_class}", build=build,
                 artifact_type=artifact_type, **kw)


HEAVY_POOL = "retrain_heavy"        # scripts/pools.json; backfills move to their own pool
TRAINING_POOL = "gpu_training"      # caps concurrent trainings (a GPU pool in production)

CTR = Family(
    name="ctr", dag_id="ctr_daily_retrain", tags=("retrain", "ctr"),
    doc="Daily retraining of the CTR model on a parameter-server cluster: validate -> "
        "preprocess (Beam + tf.Transform) -> train -> evaluate -> push.",
    config_param="feature_config", config_env="RETRAIN_FEATURE_CONFIG",
    raw_root_env="RETRAIN_RAW_ROOT", config_loader="components.ctr.feature_config:load",
    config_help="YAML/JSON feature config of the logs (columns, types, transforms, label, "
                "validation rules). Empty: the generated demo logs' config.",
    stages={
        "validate": _stage("components.ctr.validate", "ValidateSpec",
                           "components.ctr.stages:validate", "validation_report",
                           figures=("rows", "n_failed", "gate", "data_docs"), reuse=False,
                           window_module="components.ctr.validate_window"),
        "preprocess": _stage("components.ctr.preprocess", "PreprocessSpec",
                             "components.ctr.stages:preprocess", "transformed_examples",
                             pool=HEAVY_POOL,
                             figures=("rows_in", "rows_train", "rows_validation",
                                      "rows_eval_window", "identity_out_of_range",
                                      "id_coverage_line", "window", "seconds")),
        "train": _stage("components.ctr.cluster", "ClusterSpec",
                        "components.ctr.stages:train", "model",
                        pool=TRAINING_POOL,
                        figures=("val_auc", "val_log_loss", "train_seconds")),
        "evaluate": _stage("components.ctr.evaluate", "EvaluateSpec",
                           "components.ctr.stages:evaluate", "evaluation",
                           pool=HEAVY_POOL, reuse=False,
                           figures=("blessed", "candidate", "baseline", "bayes_optimal",
                                    "rows", "report_uri")),
    },
    serving_check="components.ctr.serving_check",
    headline=(Metric("auc", "max"), Metric("log_loss", "min")),
    params={
        "train_examples": {"default": None, "type": ["null", "integer"], "minimum": 1000,
                           "description": "Training budget in examples; early stopping on "
                                          "a validation slice of the window may end it "
                                          "sooner. Empty: 3 passes over the window, at "
                                          "least 300,000 examples."},
        "epochs": {"default": None, "type": ["null", "integer"], "minimum": 1, "maximum": 500,
                   "description": "Training budget in passes over the window instead "
                                  "(Training examples wins when both are set)."},
        "min_auc": {"default": 0.6, "type": "number", "minimum": 0, "maximum": 1,
                    "description": "Absolute AUC a candidate must reach to be published."},
        "min_eval_rows": {"default": None, "type": ["null", "integer"], "minimum": 0,
                          "description": "Held-out rows of the window the gate needs before "
                                         "it may bless (fewer: not blessed, and why). Empty: "
                                         "the feature config's gate.min_eval_rows (200)."},
        "min_eval_positives": {"default": None, "type": ["null", "integer"], "minimum": 0,
                               "description": "Held-out clicks the gate needs before it may "
                                              "bless. Empty: the feature config's "
                                              "gate.min_eval_positives (20)."},
        "ps_count": {"default": 1, "type": "integer", "minimum": 1, "maximum": 64,
                     "description": "Parameter servers of the training cluster (the ID "
                                    "embedding tables are split over them)."},
        "worker_count": {"default": 1, "type": "integer", "minimum": 1, "maximum": 256,
                         "description": "Training workers (GPU workers in production)."},
    },
)

TEXT = Family(
    name="text", dag_id="text_daily_finetune", tags=("retrain", "text"),
    doc="Daily fine-tuning of a pretrained BERT-family encoder on the user's labelled text: "
        "validate -> preprocess (Beam) -> finetune -> evaluate (against the published model "
        "and a TF-IDF + logistic regression baseline) -> push. Tasks, labels, columns and "
        "checkpoint come from the text config file.",
    config_param="text_config", config_env="RETRAIN_TEXT_CONFIG",
    raw_root_env="RETRAIN_TEXT_RAW_ROOT", config_loader="components.text.task_config:load",
    config_help="YAML/JSON text config (text column or template, tasks with their label "
                "columns and labels, checkpoint, validation and gate settings). Empty: the "
                "bundled reviews' full config (components/text/configs/reviews.yaml). "
                "`make demo`'s slice of the reviews: components/text/configs/"
                "reviews-demo.yaml (the same tasks, the gate sized to its eval texts; "
                "about 4 minutes on 2 cores).",
    stages={
        "validate": _stage("components.text.validate", "TextValidateSpec",
                           "components.text.stages:validate", "validation_report",
                           figures=("rows", "n_failed", "gate", "unknown_token_rate"),
                           reuse=False, window_module="components.text.validate_window"),
        "preprocess": _stage("components.text.preprocess", "TextPreprocessSpec",
                             "components.text.stages:preprocess", "text_examples",
                             pool=HEAVY_POOL,
                             figures=("rows_in", "rows_train", "rows_eval", "window",
                                      "seconds")),
        "train": _stage("components.text.train", "FinetuneSpec",
                        "components.text.stages:train", "model",
                        pool=TRAINING_POOL, task_id="finetune",
                        figures=("eval_loss_before", "eval_loss_after", "epochs_run")),
        "evaluate": _stage("components.text.evaluate", "TextEvaluateSpec",
                           "components.text.stages:evaluate", "evaluation",
                           pool=HEAVY_POOL, reuse=False,
                           figures=("blessed", "candidate", "baseline",
                                    "classical_baseline", "rows")),
    },
    serving_check="components.text.serving_check",
    headline=(Metric("auc", "max"), Metric("log_loss", "min")),
    warm_start=True, evaluate_reads="preprocessed",
    registry_extra={"labels": "labels", "max_seq_length": "max_seq_length",
                    "warm_start_from": "warm_start_from", "base_checkpoint": "checkpoint"},
    params={
        "epochs": {"default": None, "type": ["null", "integer"], "minimum": 1, "maximum": 50,
                   "description": "Maximum epochs (early stopping on the eval split). "
                                  "Empty: the config's epochs (3)."},
        "max_seq_length": {"default": None, "type": ["null", "integer"], "minimum": 8,
                           "maximum": 512, "description": "Tokens per text, incl. [CLS]/[SEP]. "
                                                          "Empty: the config's (128)."},
        "batch_size": {"default": 16, "type": "integer", "minimum": 1, "maximum": 1024,
                       "description": "Texts per training step."},
        "max_train_examples": {"default": None, "type": ["null", "integer"], "minimum": 1,
                               "description": "Fine-tune on at most this many texts "
                                              "(the classical baseline still sees all; "
                                              "see classical_max_train_examples). "
                                              "Empty: all."},
        "dev_examples": {
            "default": 200, "type": "integer", "minimum": 0,
            "description": "The first N eval texts decide early stopping and the next N fit "
                           "the decision offsets; the gate scores only the texts after them. "
                           "0: early-stop and score on the same texts (tiny spans only)."},
        "max_eval_examples": {"default": None, "type": ["null", "integer"], "minimum": 1,
                              "description": "Evaluate on at most this many texts. "
                                             "Empty: all."},
        "strategy": {"default": "default",
                     "enum": ["default", "mirrored", "multi_worker_mirrored"],
                     "description": "tf.distribute strategy of the fine-tuning step."},
        "precision": {"default": "auto", "enum": ["auto", "float32", "mixed_bfloat16"],
                      "description": "Compute dtype of the fine-tune; the exported model "
                                     "computes in float32 either way. auto: bfloat16 on a "
                                     "CPU with AMX (1.4x the speed here, macro-F1 no "
                                     "lower), else float32."},
        "warm_start": {"default": True, "type": "boolean",
                       "description": "Start from the published text model when its labels "
                                      "and checkpoint match."},
        "min_auc": {"default": None, "type": ["null", "number"], "minimum": 0, "maximum": 1,
                    "description": "Mean per-task AUC a candidate must reach. "
                                   "Empty: the config's gate.min_auc."},
        "beat_classical_baseline": {
            "default": None, "type": ["null", "boolean"],
            "description": "Reject a candidate whose macro-F1 on any task is below TF-IDF + "
                           "logistic regression's on the same eval texts. Empty: the "
                           "config's gate.beat_classical_baseline (on by default)."},
        "classical_max_train_examples": {
            "default": None, "type": ["null", "integer"], "minimum": 1,
            "description": "Fit the TF-IDF + logistic regression baseline on at most this "
                           "many training texts (memory on a huge corpus). Empty: all of "
                           "the window's, whatever max_train_examples caps the fine-tune at."},
        "min_eval_rows": {
            "default": None, "type": ["null", "integer"], "minimum": 0,
            "description": "Labelled eval texts each task needs before the gate may bless "
                           "(fewer: not blessed, and why). Empty: the config's "
                           "gate.min_eval_rows (200)."},
        "min_eval_positives": {
            "default": None, "type": ["null", "integer"], "minimum": 0,
            "description": "Eval texts each class of each task needs before the gate may "
                           "bless. Empty: the config's gate.min_eval_positives (5)."},
    },
)

FAMILIES = {f.name: f for f in (CTR, TEXT)}
