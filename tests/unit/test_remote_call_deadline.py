"""The chief's remote-call deadline refuses values that would time out ordinary calls.
(That a deadline times out a lost call and the chunk runs again is shown on a real cluster
in tests/integration/test_chunk_recovery.py.)"""
import os

import pytest

from components.ctr.train_roles import MIN_REMOTE_CALL_TIMEOUT_S, set_remote_call_deadline


@pytest.mark.parametrize("seconds", [0.001, 1, MIN_REMOTE_CALL_TIMEOUT_S - 0.5])
def test_a_deadline_shorter_than_the_minimum_is_refused_naming_the_setting(seconds):
    with pytest.raises(ValueError, match="remote_call_timeout_s must be 0 .* or at least"):
        set_remote_call_deadline(seconds)


def test_zero_or_less_means_no_deadline_and_changes_nothing(monkeypatch):
    monkeypatch.delenv("TF_COORDINATOR_IGNORE_TRANSIENT_TIMEOUTS", raising=False)
    for seconds in (0, -1):
        set_remote_call_deadline(seconds)
    assert "TF_COORDINATOR_IGNORE_TRANSIENT_TIMEOUTS" not in os.environ
