"""One gate verdict for every family: pass, pass by a recorded override (blanket or naming
its rules), or fail; an empty reason is refused."""
import pytest

from retrain.common.verdict import FAILED, OVERRIDDEN, PASSED, check_override, decide


def test_a_clean_span_passes_and_records_no_override():
    v = decide(True, [], "labels late", ["click_rate"])
    assert (v.gate, v.override_reason, v.not_overridden) == (PASSED, None, [])


def test_a_failed_span_fails_without_a_reason():
    assert decide(False, ["click_rate"], None, None).gate == FAILED


def test_a_blanket_override_passes_every_failed_rule_and_is_recorded():
    v = decide(False, ["click_rate", "range:hour"], "known hour bug", None)
    assert (v.gate, v.override_reason, v.not_overridden) == (OVERRIDDEN, "known hour bug", [])


def test_a_named_override_passes_only_its_rules():
    ok = decide(False, ["click_rate"], "labels late", ["click_rate", "range:hour"])
    assert ok.gate == OVERRIDDEN
    short = decide(False, ["click_rate", "null_rate:device"], "labels late", ["click_rate"])
    assert (short.gate, short.not_overridden) == (FAILED, ["null_rate:device"])


def test_an_override_must_say_why():
    check_override(None)
    check_override("a reason")
    with pytest.raises(ValueError, match="must say why"):
        check_override("   ")
