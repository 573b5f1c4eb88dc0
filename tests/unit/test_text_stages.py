"""The text family's spec builders: the dev slices fit the eval split they cut."""
from __future__ import annotations

from components.text import stages
from retrain.common.run_context import RunContext

CTX = RunContext.create("text", "2026-12-01", "/h", "r", raw_root="/raw")
PARAMS = {"dev_examples": 200, "epochs": 1, "batch_size": 16, "warm_start": False,
          "strategy": "default", "precision": "auto", "max_eval_examples": None, "max_train_examples": None,
          "min_auc": None, "beat_classical_baseline": None, "force_bless_reason": None}


def _upstream(rows_eval: int) -> dict:
    return {"preprocess": {"output_dir": "/r/preprocess", "rows_eval": rows_eval},
            "train": {"model_dir": "/r/model"}, "published": None}


def test_a_big_eval_split_keeps_the_dev_examples_param():
    up = _upstream(5000)
    assert stages.train(CTX, PARAMS, up).spec["max_eval_examples"] == 200
    assert stages.evaluate(CTX, PARAMS, up)["eval_offset"] == 400


def test_a_small_eval_split_leaves_half_of_it_to_the_gate():
    """111 eval texts (a 3-day window of 180 texts a day): dev slices of 200 would leave
    the gate nothing to score; a quarter each leaves it 56."""
    up = _upstream(111)
    train = stages.train(CTX, PARAMS, up).spec
    assert train["max_eval_examples"] == train["calibration_examples"] == 27
    assert stages.evaluate(CTX, PARAMS, up)["eval_offset"] == 54


def test_a_tiny_eval_split_scores_on_the_early_stopping_texts():
    up = _upstream(3)
    assert stages.dev_examples(PARAMS, up) == 0
    assert "calibration_examples" not in stages.train(CTX, PARAMS, up).spec
    assert stages.evaluate(CTX, PARAMS, up)["eval_offset"] == 0


def test_warm_start_is_declared_as_reading_the_published_model():
    up = {**_upstream(5000), "published": "/registry/text/3"}
    warm = stages.train(CTX, {**PARAMS, "warm_start": True}, up)
    assert warm.reads_published and warm.spec["warm_start_model_dir"] == "/registry/text/3"
    cold = stages.train(CTX, PARAMS, up)
    assert not cold.reads_published and cold.spec["warm_start_model_dir"] is None


def test_the_dev_slice_default_is_the_forms():
    """The step side's copy of the form's dev_examples default (Airflow's side cannot
    import step code): config suggest estimates the gate's evidence with it."""
    from components.text.stages import DEV_EXAMPLES
    from retrain.orchestration.families import TEXT
    assert TEXT.params["dev_examples"]["default"] == DEV_EXAMPLES
