"""What preprocessing does with each transformed split besides encoding it: the split's
statistics counted in the same pass (`SplitStatsFn`: rows, clicks, occurrences per id of
every categorical field; what the trainer needs before its first step), written as one
file for all splits, and the dealing of each transformed batch to the shard writers so
their files hold equal rows. Used by `beam_jobs.preprocess_ctr`.
"""
from __future__ import annotations

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems


class SplitStatsFn(beam.CombineFn):
    """Transformed batches of a split -> `components.ctr.split_stats.SplitStats` (rows,
    clicks, occurrences per id of every categorical field): what the trainer needs before
    its first step, counted in the transform pass instead of a pass of its own."""

    def __init__(self, cfg):
        from components.ctr.feature_config import transformed_name
        fields = cfg.categorical_fields()
        self._label = cfg.label
        self._columns = {k: transformed_name(k) for k in fields}
        self._sizes = {k: cfg.categorical_size(k) for k in fields}

    def create_accumulator(self):
        from components.ctr import split_stats
        return split_stats.empty(self._sizes)

    def add_input(self, acc, element):
        from components.ctr import split_stats
        batch = element[0] if isinstance(element, tuple) else element   # drop passthrough
        return split_stats.fold(acc, batch, self._label, self._columns)

    def merge_accumulators(self, accumulators):
        from components.ctr import split_stats
        accumulators = iter(accumulators)
        out = next(accumulators)
        for acc in accumulators:
            split_stats.merge(out, acc)
        return out

    def extract_output(self, acc):
        return acc


def deal(element, writers: int):
    """A transformed batch as `writers` slices of (almost) equal rows, in order: the shard
    writers take batches in turn, so each of a bundle's files gets one slice of every batch
    and the files hold equal rows (up to one per batch) whatever the days' sizes, instead of
    whole batches of up to --batch-size rows (2 files of one bundle held 141k and 75k rows).
    With the files' row counts (SHARD_ROWS_FILE) the trainer's workers then read equal
    shares. Passthrough features (a tuple element) are not kept: the writer drops them."""
    batch = element[0] if isinstance(element, tuple) else element
    n = batch.num_rows
    for i in range(writers):
        start, stop = n * i // writers, n * (i + 1) // writers
        if stop > start:
            yield batch.slice(start, stop - start)


def write_split_stats(by_split: dict, path: str) -> None:
    """One file for all splits, through Beam's FileSystems (a folder or an object store)."""
    import io

    from components.ctr import split_stats
    buf = io.BytesIO()
    split_stats.write(buf, by_split)
    with FileSystems.create(path) as f:
        f.write(buf.getvalue())
