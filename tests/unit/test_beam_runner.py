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


def test_job_options_reuse_a_view_per_class_and_answer_like_fresh_ones():
    import copy
    import pickle

    from apache_beam.options.pipeline_options import (SetupOptions, StandardOptions,
                                                      TypeOptions)
    flags = ["--runner=DirectRunner", "--save_main_session", "--experiments=a"]
    opts, plain = runner.JobOptions(flags), PipelineOptions(flags)
    assert opts.view_as(TypeOptions) is opts.view_as(TypeOptions)
    for cls in (StandardOptions, SetupOptions, TypeOptions):
        assert vars(opts.view_as(cls)._visible_options) == vars(plain.view_as(cls)._visible_options)
    assert opts.get_all_options() == plain.get_all_options()
    # A value set through one view is what every view and the options show.
    opts.view_as(SetupOptions).save_main_session = False
    assert opts.view_as(SetupOptions).save_main_session is False
    assert opts.get_all_options()["save_main_session"] is False
    # A copy (Beam's Pipeline deep-copies its options) has views of its own.
    dup = copy.deepcopy(opts)
    dup.view_as(StandardOptions).runner = "FlinkRunner"
    assert opts.view_as(StandardOptions).runner == "DirectRunner"
    assert dup.view_as(StandardOptions).runner == "FlinkRunner"
    # Pickled (as Beam does where a transform keeps the options): no cached views travel.
    back = pickle.loads(pickle.dumps(opts))
    assert "_views" not in back.__dict__
    assert back.view_as(SetupOptions).save_main_session is False
    assert back.get_all_options() == opts.get_all_options()
