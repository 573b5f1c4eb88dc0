"""One great-expectations context for many validations in one process.

GX 1.x costs about 5-9 s to import and a fresh context, data source, suite and checkpoint
registration for every span; a window's first run validates dozens of older days, so a
pass keeps one ephemeral context and validates each table with `Batch.validate` (no
checkpoint, no Data Docs: those are built only for the spans a person will read).
"""
from __future__ import annotations

import logging
import re


def import_gx() -> None:
    """Import GX with its import-time INFO chatter quietened (our own log says what ran)."""
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations  # noqa: F401
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)


def ephemeral_context():
    """An in-memory GX context with progress bars off (they would flood a task log)."""
    import_gx()
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False,
                                                         metric_calculations=False)
    return context


class GxSession:
    """Validates pandas tables against suites on one shared context."""

    def __init__(self, source_name: str = "window"):
        self.context = ephemeral_context()
        self._source = self.context.data_sources.add_pandas(source_name)
        self._batches: dict[str, object] = {}

    def validate(self, asset: str, suite, frame, result_format: dict):
        """The suite's ExpectationSuiteValidationResult on `frame` (asset: the table's
        role, e.g. "stats"; one batch definition per role, reused for every span)."""
        if asset not in self._batches:
            self._batches[asset] = (self._source.add_dataframe_asset(asset)
                                    .add_batch_definition_whole_dataframe("all"))
        batch = self._batches[asset].get_batch(batch_parameters={"dataframe": frame})
        return batch.validate(suite, result_format=result_format)


def escaped(value):
    """`value` with every string in it HTML-escaped (dict keys too), the rest as it is."""
    import html

    if isinstance(value, str):
        return html.escape(value)
    if isinstance(value, dict):
        return {escaped(k): escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(escaped(v) for v in value)
    return value


def docs_run_name(run_id: str) -> str:
    """The run's name as Data Docs show it: Airflow's default run-id characters kept, any
    other one `_`. GX writes the run name raw into its pages (breadcrumb, tables, the
    index's rows) and into their paths (a `/` loses the pages)."""
    return re.sub(r"[^A-Za-z0-9_.~:+-]", "_", run_id)


def build_data_docs(context, site_name: str, results: dict) -> None:
    """Data Docs of `results` ({ValidationResultIdentifier: suite result}) with the data
    in them escaped. GX's renderer writes an expectation's observed and unexpected values
    (a categorical value, a row of the sample) into its pages as raw HTML, so a value
    `<script>...</script>` of the training data would run in whoever opens them (the
    Retrain tab serves them in the Airflow UI's origin). The docs are built from copies
    whose `result` and `exception_info` strings are escaped; the results the step judges
    and records keep the values as they are."""
    import copy

    store = context.validation_results_store
    for ident, result in results.items():
        shown = copy.deepcopy(result)
        for r in shown.results:
            r.result = escaped(r.result) if r.result else r.result
            r.exception_info = (escaped(r.exception_info) if r.exception_info
                                else r.exception_info)
        store.set(ident, shown)
    context.build_data_docs(site_names=[site_name])
