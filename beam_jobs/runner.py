"""The pipeline a job runs on: the runner its options name, except for the local default.

Without `--runner`, or with `--runner=DirectRunner`, a job gets Beam's FnApiRunner
directly. Since Beam 2.6x the DirectRunner first tries the Prism runner, which downloads a
binary from the internet (a network call nobody asked for, refused on an offline
machine), logs the failure, then falls back to the FnApiRunner anyway: same execution,
one noisy exception in every step's log. Any other runner (Flink, Spark, Dataflow,
`--runner=PrismRunner` by name) is used as given.

`JobOptions` are the jobs' PipelineOptions, with views made once per options class.
"""
from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

LOCAL_DEFAULTS = (None, "DirectRunner", "SwitchingDirectRunner")


class JobOptions(PipelineOptions):
    """PipelineOptions whose `view_as(cls)` is made once per class and then reused.

    Beam asks for a view for every transform it applies and every type-hint check (about
    2,000 while tf.Transform's analysis is built), and each view builds an argparse parser
    of its class and parses the flags again: 0.6 s of the CTR job's start-up. A view keeps
    no values of its own (they live in the dict all views share), so one view per class
    answers the same as a fresh one. The cache is keyed by that dict, so a copy of the
    options (Beam's Pipeline deep-copies them) never answers with the original's views.
    """

    def view_as(self, cls):
        owner, views = self.__dict__.get("_views", (None, None))
        if owner is not self._all_options:
            owner, views = self._all_options, {}
            object.__setattr__(self, "_views", (owner, views))   # not an option
        if cls not in views:
            views[cls] = super().view_as(cls)
        return views[cls]

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_views", None)   # rebuilt on use wherever the options are unpickled
        return state


def pipeline(options: PipelineOptions) -> beam.Pipeline:
    if options.view_as(StandardOptions).runner not in LOCAL_DEFAULTS:
        return beam.Pipeline(options=options)
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    # As the DirectRunner builds it: workers of multi-process mode get the options too.
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    return beam.Pipeline(runner=fn_runner.FnApiRunner(provision_info=provision),
                         options=options)


def name(options: PipelineOptions) -> str:
    """The runner `pipeline(options)` runs on, for a job's summary."""
    given = options.view_as(StandardOptions).runner
    return "FnApiRunner" if given in LOCAL_DEFAULTS else str(given)


def limit_tf_threads(n: int, log) -> None:
    """TensorFlow threads of this worker process (0: TensorFlow's default, every core);
    say so in `log` when TensorFlow already runs here and can no longer change."""
    if not n:
        return
    import tensorflow as tf
    try:
        tf.config.threading.set_intra_op_parallelism_threads(n)
        tf.config.threading.set_inter_op_parallelism_threads(n)
    except RuntimeError:   # TensorFlow already running in this process
        log.info("TensorFlow is already initialised here: --tf-threads not applied")
