"""A job run without a runner (or with the DirectRunner) never tries Prism, which would
download a binary from the internet, fail offline and fall back (issue: noisy logs)."""
from __future__ import annotations

import logging

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

from beam_jobs import runner


def test_local_default_is_the_fn_api_runner_and_others_are_kept():
    for argv in ([], ["--runner=DirectRunner"]):
        assert isinstance(runner.pipeline(PipelineOptions(argv)).runner, FnApiRunner)
        assert runner.name(PipelineOptions(argv)) == "FnApiRunner"
    other = runner.pipeline(PipelineOptions(["--runner=BundleBasedDirectRunner"])).runner
    assert not isinstance(other, FnApiRunner)
    assert runner.name(PipelineOptions(["--runner=FlinkRunner"])) == "FlinkRunner"


def test_a_pipeline_runs_without_any_prism_attempt(caplog):
    caplog.set_level(logging.INFO)
    with runner.pipeline(PipelineOptions(["--direct_num_workers=1"])) as p:
        _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2)
    assert "prism" not in caplog.text.lower(), caplog.text
