"""Quarantine markers of spans whose validation gate failed, for every family.

A failed span gets a small JSON marker outside the raw data (the data is never touched);
a later validation of that span that passes, or that a person overrides with a reason,
releases it (the marker is renamed, so the history stays). Stdlib only.
"""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from retrain.common.atomic import read_json, write_json
from retrain.common.rawfiles import CorruptPart, NoParts, TooManyParts, UnsafeInput
from retrain.common.record_limits import PartTooLarge

# Parts that cannot be data at all, and days marked complete that hold no part or more
# parts than their limit: the span is quarantined like one that failed a rule.
UNREADABLE = (PartTooLarge, UnsafeInput, CorruptPart, NoParts, TooManyParts)
_DAY_LEVEL = (NoParts, TooManyParts)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def marker_path(quarantine_dir: str | os.PathLike, span: str) -> Path:
    return Path(quarantine_dir) / f"{span}.json"


def settle(quarantine_dir: str | None, *, span: str, span_dir: str, gate: str,
           run_id: str | None, failed: list[str], report: str | None,
           data_docs: str | None = None, override_reason: str | None = None) -> dict | None:
    """Write the marker (gate "failed") or release one (gate "passed" / "overridden");
    returns {"marker", "state"} or None when nothing was there to do."""
    if not quarantine_dir:
        return None
    marker = marker_path(quarantine_dir, span)
    if gate == "failed":
        write_json(marker, {"span": span, "span_dir": span_dir, "run_id": run_id,
                            "quarantined_at": _now(), "failed": failed, "report": report,
                            "data_docs": data_docs})
        return {"marker": str(marker), "state": "quarantined"}
    if marker.exists():
        previous = read_json(marker)
        released = marker.with_name(f"{marker.stem}.released-{_now().replace(':', '')}.json")
        write_json(released, {**previous, "released_at": _now(), "released_by_run": run_id,
                              "gate": gate, "override_reason": override_reason})
        os.unlink(marker)
        return {"marker": str(released), "state": "released"}
    return None


def refuse_unreadable(quarantine_dir: str | None, span_dir, run_id: str | None,
                      error: BaseException) -> dict | None:
    """Quarantine a span whose parts could not be read as data (a part over its size
    limit, a symlink out of the raw root, a FIFO, a corrupt file, no part at all, too many
    parts): no report exists, the marker carries the reader's message, which names the
    file or day and the limit, never content."""
    span_dir = Path(span_dir)
    what = "unreadable day" if isinstance(error, _DAY_LEVEL) else "unreadable part"
    return settle(quarantine_dir, span=span_dir.name, span_dir=str(span_dir), gate="failed",
                  run_id=run_id, failed=[f"{what}: {error}"], report=None)


def is_quarantined(quarantine_dir: str | os.PathLike, span: str) -> bool:
    return marker_path(quarantine_dir, span).exists()
