"""beam_jobs.arrow_coder: RecordBatches cross stage boundaries as Arrow IPC, and the
runner's element-size sampling never encodes (it used to pickle each 64k-row batch)."""
from __future__ import annotations

import copyreg
import pickle

import apache_beam as beam
import pyarrow as pa
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs import runner
from beam_jobs.arrow_coder import RecordBatchCoder


def _batch(n: int = 5) -> pa.RecordBatch:
    return pa.record_batch({
        "id": pa.array([f"u{i}".encode() for i in range(n)], pa.large_binary()),
        "x": pa.array([[float(i)] for i in range(n)], pa.large_list(pa.float32())),
        "tags": pa.array([["a", "b"][: i % 3] or None for i in range(n)],
                         pa.list_(pa.string())),
    })


def test_the_registry_gives_record_batches_this_coder():
    assert isinstance(beam.coders.registry.get_coder(pa.RecordBatch), RecordBatchCoder)


def test_a_batch_round_trips_nulls_and_lists_included():
    coder, batch = RecordBatchCoder(), _batch()
    assert coder.decode(coder.encode(batch)).equals(batch)
    empty = batch.slice(0, 0)
    assert coder.decode(coder.encode(empty)).equals(empty)


def test_the_size_estimate_does_not_encode():
    calls = []

    class Counting(RecordBatchCoder):
        def encode(self, batch):
            calls.append(batch)
            return super().encode(batch)

    batch = _batch(1000)
    assert Counting().get_impl().estimate_size(batch) == batch.nbytes
    assert calls == []


def _count_batch_pickles(monkeypatch) -> list:
    pickled = []

    def reducer(batch):
        pickled.append(batch.num_rows)
        return pa.RecordBatch.__reduce__(batch)

    monkeypatch.setitem(copyreg.dispatch_table, pa.RecordBatch, reducer)
    assert pickle.loads(pickle.dumps(_batch())).num_rows == 5 and pickled == [5]
    pickled.clear()
    return pickled


def test_typed_batches_cross_a_stage_boundary_without_pickling(monkeypatch):
    pickled = _count_batch_pickles(monkeypatch)
    with runner.pipeline(runner.JobOptions([])) as p:
        sizes = (p | beam.Create([10, 20, 30])
                 | beam.Map(_batch).with_output_types(pa.RecordBatch)
                 | beam.Reshuffle()          # a stage boundary: encoded, then decoded
                 | beam.Map(lambda b: (b.num_rows, b.column("x").to_pylist()[-1])))
        assert_that(sizes, equal_to([(10, [9.0]), (20, [19.0]), (30, [29.0])]))
    assert pickled == []
