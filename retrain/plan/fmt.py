"""How numbers and durations read in the plan's text, its refusals and --check's lines.

`_dur` picks its unit and names it (for sentences); a table's column holds one unit, named
in its header, so `_hours` and `_secs` print bare numbers."""
from __future__ import annotations


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _many(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 'es' if what.endswith('s') else 's'}"


def _n(x: float) -> str:
    return f"{x:,.0f}"


def _hours(s: float | None) -> str:
    """Seconds as hours, the unit named by the column."""
    return "-" if s is None else f"{s / 3600:,.2f}"


def _secs(s: float | None) -> str:
    """Seconds, the unit named by the column."""
    return "-" if s is None else f"{s:,.{1 if s < 1000 else 0}f}"
