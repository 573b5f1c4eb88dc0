"""The CTR trainer's budget (examples, not epochs) and its early-stopping rule."""
import pytest

from components.ctr.ps_train import DEFAULT_PASSES, MIN_TRAIN_EXAMPLES, PsTrainSpec, train_budget
from components.ctr.train_loop import EarlyStopping


def _spec(**kw) -> PsTrainSpec:
    return PsTrainSpec(preprocess_dir="p", out_dir="o", batch_size=1000, **kw)


def test_a_small_window_still_gets_the_minimum_budget():
    # 5k rows: 3 passes would be 15 steps, far too few to fit per-id biases.
    assert train_budget(_spec(), 5_000) == (MIN_TRAIN_EXAMPLES, MIN_TRAIN_EXAMPLES // 1000)


def test_a_big_window_gets_passes_over_its_rows():
    assert train_budget(_spec(), 1_000_000) == (DEFAULT_PASSES * 1_000_000,
                                                DEFAULT_PASSES * 1_000)


def test_explicit_budgets_win_in_order_examples_epochs_then_max_steps():
    assert train_budget(_spec(train_examples=12_345), 5_000) == (12_345, 13)
    assert train_budget(_spec(epochs=2), 5_000) == (10_000, 10)
    assert train_budget(_spec(train_examples=12_345, epochs=2), 5_000) == (12_345, 13)
    assert train_budget(_spec(epochs=2, max_steps=4), 5_000) == (10_000, 4)


def test_early_stopping_waits_for_patience_and_ignores_tiny_gains():
    stopper = EarlyStopping(patience=2)
    assert stopper.update(10, 0.50) and stopper.best_step == 10
    assert not stopper.update(20, 0.49999)          # below the relative 1e-4: no gain
    assert not stopper.stop
    assert stopper.update(30, 0.40) and stopper.bad == 0
    assert not stopper.update(40, 0.41) and not stopper.update(50, 0.45)
    assert stopper.stop and (stopper.best, stopper.best_step) == (0.40, 30)


def test_early_stopping_state_survives_a_resume():
    stopper = EarlyStopping(patience=3)
    for step, loss in ((10, 0.5), (20, 0.4), (30, 0.45)):
        stopper.update(step, loss)
    resumed = EarlyStopping(3, stopper.state())
    assert (resumed.best, resumed.best_step, resumed.bad) == (0.4, 20, 1)
    assert resumed.history == [(10, 0.5), (20, 0.4), (30, 0.45)]
    assert not EarlyStopping(0, {"validations_without_improvement": 9}).stop  # 0: never


@pytest.mark.parametrize("bad", [dict(epochs=0), dict(train_examples=-1),
                                 dict(validation_percent=60)])
def test_bad_budgets_fail_before_any_work(bad):
    from components.ctr.ps_train import _config
    with pytest.raises(ValueError, match="epochs|train_examples|validation_percent"):
        _config(_spec(**bad))
