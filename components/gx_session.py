"""One great-expectations context for many validations in one process.

GX 1.x costs about 5-9 s to import and a fresh context, data source, suite and checkpoint
registration for every span; a window's first run validates dozens of older days, so a
pass keeps one ephemeral context and validates each table with `Batch.validate` (no
checkpoint, no Data Docs: those are built only for the spans a person will read).
"""
from __future__ import annotations

import logging


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
