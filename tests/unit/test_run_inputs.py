"""A run's inputs are refused before any work, each problem named: a span in the future,
relative paths, folders outside the allowed roots, a missing config file."""
from __future__ import annotations

import datetime as dt

from components.common import run_inputs

TODAY = dt.date(2026, 12, 1)


def _check(span, **kw):
    kw.setdefault("raw_root", None)
    kw.setdefault("config", None)
    return run_inputs.check(span, config_param="text_config", today=TODAY,
                            max_future_days=1, **kw)


def test_span_in_the_future_and_bad_paths_are_named(tmp_path):
    assert _check(dt.date(2026, 12, 2), raw_root=str(tmp_path)) == []    # clock slack
    problems = _check(dt.date(2030, 1, 1), raw_root="../../", config=str(tmp_path / "no.yaml"))
    assert len(problems) == 3
    assert "span 2030-01-01 is in the future" in problems[0]
    assert "raw_root '../../' is a relative path" in problems[1]
    assert "text_config" in problems[2] and "does not exist" in problems[2]
    assert _check(TODAY, raw_root="gs://bucket/logs") == []              # object stores


def test_allowed_roots_keep_runs_inside_the_data_area(tmp_path):
    data = tmp_path / "data"
    (data / "clicks").mkdir(parents=True)
    roots = [data.resolve()]
    assert run_inputs.check(TODAY, raw_root=str(data / "clicks"), config=None,
                            config_param="c", today=TODAY, roots=roots) == []
    problems = run_inputs.check(TODAY, raw_root="/etc", config=None, config_param="c",
                                today=TODAY, roots=roots)
    assert problems and "outside the allowed data roots" in problems[0]
    escape = str(data / "clicks" / ".." / ".." / "elsewhere")
    assert "outside" in run_inputs.check(TODAY, raw_root=escape, config=None,
                                         config_param="c", today=TODAY, roots=roots)[0]
