"""Validate the older days of a text window that no run has validated yet, in one process.

Text spans are read whole (`components.text.validate`), so the pass shares what is
costly to start: the great-expectations import and context, and the checkpoint's
vocabulary for the unknown-token rule (loaded once, cached). Each day, oldest first,
writes its own report and quarantine marker as a single-day validation does.
"""
from __future__ import annotations

import sys
import time

from retrain.common.step import main, spec_from_dict
from components.gx_session import GxSession
from components.text import validate
from components.window_validation import WindowValidateSpec, finish, validate_days


def run(spec: WindowValidateSpec) -> dict:
    """Validate each day of `spec.days` (TextValidateSpec fields), one outcome per day."""
    days = [spec_from_dict(validate.TextValidateSpec, d) for d in spec.days]
    t0 = time.perf_counter()
    session = GxSession("text_window") if days else None
    outcomes = validate_days(days, lambda d: validate.run(d, session))
    return finish(spec, outcomes, {"validate": round(time.perf_counter() - t0, 3)})


if __name__ == "__main__":
    sys.exit(main(WindowValidateSpec, run))
