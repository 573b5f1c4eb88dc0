"""The validation gate's verdict, the same for every family: a span passes, passes by a
recorded override, or fails (and is quarantined). A family's validate step supplies the
rules that failed; this decides what that means, so "every family gets override and
quarantine" is one piece of code, not one per family. Stdlib only.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

PASSED, OVERRIDDEN, FAILED = "passed", "overridden", "failed"


@dataclasses.dataclass(frozen=True)
class Verdict:
    gate: str                     # PASSED | OVERRIDDEN | FAILED
    not_overridden: list[str]     # failed rules a named override does not cover
    override_reason: str | None   # recorded only when something failed


def check_override(reason: str | None) -> None:
    """An override must say why: an empty reason is a mistake, not a blanket pass."""
    if reason is not None and not str(reason).strip():
        raise ValueError("override_reason must say why (empty string given)")


def decide(success: bool, failed_rules: Iterable[str], override_reason: str | None,
           override_rules: list[str] | None) -> Verdict:
    """`override_rules` None: the reason lets every failed rule through (a blanket
    override); a list: only those rules, any other failed rule still fails the span."""
    not_named = (sorted(set(failed_rules) - set(override_rules))
                 if override_reason and override_rules is not None else [])
    if success:
        return Verdict(PASSED, not_named, None)
    gate = OVERRIDDEN if override_reason and not not_named else FAILED
    return Verdict(gate, not_named, override_reason)
