"""Batch-wise tf.Example encoding and TFRecord framing (beam_jobs.tfrecord_encoding) and
the shard writers built on it (beam_jobs.tfrecord_shards).

The reference is tfx_bsl's own encoder: every record must be the same tf.Example (feature
by feature, value by value, NaN bits included), and TensorFlow's reader, which checks
both CRCs of every record, must read the framed bytes back.
"""
from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from tfx_bsl.coders import example_coder

from beam_jobs import tfrecord_encoding as enc
from beam_jobs import tfrecord_shards


def _read(path, compression=""):
    return [r.numpy() for r in tf.data.TFRecordDataset([str(path)], compression_type=compression)]


def _features(record: bytes) -> dict:
    """A record's features as comparable values: floats by their bits, so NaN == NaN."""
    out = {}
    for key, feature in tf.train.Example.FromString(record).features.feature.items():
        kind = feature.WhichOneof("kind")   # None: a null list, a feature with no values
        values = list(getattr(feature, kind).value) if kind else []
        if kind == "float_list":
            values = [struct.pack("<f", v) for v in values]
        out[key] = (kind, values)
    return out


def _assert_same_examples(tmp_path, batch: pa.RecordBatch):
    path = tmp_path / "records.tfrecord"
    data = enc.tfrecords(batch)
    path.write_bytes(bytes(data))
    ours = _read(path)          # TensorFlow's reader checks every length and record CRC
    theirs = example_coder.RecordBatchToExamplesEncoder().encode(batch)
    assert len(ours) == len(theirs) == batch.num_rows
    assert [_features(r) for r in ours] == [_features(r) for r in theirs]
    return data


def _ragged(values, per_row: int, type_) -> pa.Array:
    offsets = pa.array(np.arange(0, len(values) + 1, per_row, dtype=np.int64))
    return pa.LargeListArray.from_arrays(offsets, pa.array(values, type_))


EDGE_INTS = [0, 1, 127, 128, 16_383, 16_384, 2**31, -1, -(2**63), 2**63 - 1, -300]
EDGE_FLOATS = [0.0, -0.0, 1.5, float("nan"), float("inf"), -float("inf"), 3.4e38, 1e-45]


def test_scalar_columns_give_tfx_bsls_examples_and_take_the_fast_path(tmp_path, monkeypatch):
    rng = np.random.default_rng(7)
    n = 1000
    ints = np.concatenate([EDGE_INTS, rng.integers(-(2**62), 2**62, n - len(EDGE_INTS))])
    floats = np.concatenate([EDGE_FLOATS, rng.normal(size=n - len(EDGE_FLOATS))])
    batch = pa.RecordBatch.from_arrays(
        [_ragged(ints, 1, pa.int64()), _ragged(floats.astype(np.float32), 1, pa.float32()),
         pa.array([[v] for v in rng.integers(0, 9, n)], pa.list_(pa.int64()))],  # not large
        names=["ids_xf", "price_xf", "label"])
    monkeypatch.setattr(enc, "frame", None)   # the fallback would fail: the fast path must run
    _assert_same_examples(tmp_path, batch)


def test_several_values_per_row_and_long_names_and_long_records(tmp_path):
    rng = np.random.default_rng(3)
    n, k = 50, 400     # 400 ints of up to 10 bytes: record and entry lengths past 2 varint bytes
    long_name = "f" * 200   # a key whose length is itself a 2-byte varint
    batch = pa.RecordBatch.from_arrays(
        [_ragged(rng.integers(-(2**63), 2**63 - 1, n * k, dtype=np.int64), k, pa.int64()),
         _ragged(rng.normal(size=n * 3).astype(np.float32), 3, pa.float32())],
        names=["many_xf", long_name])
    _assert_same_examples(tmp_path, batch)


@pytest.mark.parametrize("column", [
    pa.array([[b"a"], [b"bc", b""]] * 6, pa.large_list(pa.large_binary())),  # bytes
    pa.array([[1], [2, 3], [], [4]] * 3, pa.large_list(pa.int64())),     # varying lengths
    pa.array([[1.0], None, [2.0]] * 4, pa.large_list(pa.float32())),     # a null list
], ids=["bytes", "ragged", "null"])
def test_other_batches_go_through_tfx_bsl_and_are_framed_here(tmp_path, column):
    n = len(column)
    batch = pa.RecordBatch.from_arrays([column, _ragged(np.arange(n), 1, pa.int64())],
                                       names=["x", "i"])
    assert enc._vectorized(batch, {}) is None
    _assert_same_examples(tmp_path, batch)


@pytest.mark.parametrize("type_", [pa.float64(), pa.int32()])
def test_what_tfx_bsl_refuses_is_still_refused(type_):
    batch = pa.RecordBatch.from_arrays([_ragged(np.arange(4), 1, type_)], names=["x"])
    with pytest.raises(RuntimeError, match="Bad field type"):
        enc.tfrecords(batch)


def test_the_same_batch_gives_the_same_bytes_and_a_flipped_bit_is_caught(tmp_path):
    batch = pa.RecordBatch.from_arrays([_ragged(np.arange(100), 1, pa.int64()), _ragged(
        np.linspace(0, 1, 100, dtype=np.float32), 1, pa.float32())], names=["a", "b"])
    data = bytes(enc.tfrecords(batch))
    assert data == bytes(enc.tfrecords(batch))
    assert enc.tfrecords(batch.slice(0, 0)) == b""
    broken = bytearray(data)
    broken[len(data) // 2] ^= 1
    (tmp_path / "broken").write_bytes(bytes(broken))
    with pytest.raises(tf.errors.DataLossError):
        _read(tmp_path / "broken")


def _batch(start: int, n: int = 100) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([_ragged(np.arange(start, start + n), 1, pa.int64())],
                                      ["x"])


def _xs(path) -> list[int]:
    return [tf.train.Example.FromString(r).features.feature["x"].int64_list.value[0]
            for r in _read(path, "GZIP")]


@pytest.mark.parametrize("gzip_level", [1, 6])   # ISA-L and zlib: one gzip stream either way
def test_shard_writers_write_every_row_once_across_their_files(tmp_path, gzip_level):
    writers = tfrecord_shards.ShardWriters(str(tmp_path / "s"), None, gzip_level, writers=2)
    for start in range(0, 1000, 100):
        writers.put(_batch(start))
    writers.close()
    assert len(writers.paths) == 2 and all(p.endswith(".tfrecord.gz") for p in writers.paths)
    files = [_xs(p) for p in writers.paths]
    assert sorted(files[0] + files[1]) == list(range(1000))
    # Batches go to the writers in turn: the files' content never depends on timing.
    assert files[0] == [n for b in range(0, 10, 2) for n in range(b * 100, b * 100 + 100)]
    assert writers.cpu_seconds > 0   # the helper processes' own CPU, for the job's summary


def test_a_writer_that_gets_no_batch_writes_an_empty_shard(tmp_path):
    writers = tfrecord_shards.ShardWriters(str(tmp_path / "s"), None, gzip_level=1, writers=2)
    writers.put(_batch(0))
    writers.close()
    assert [len(_xs(p)) for p in writers.paths] == [100, 0]


def test_a_failing_writer_process_fails_the_caller_naming_its_file_and_reason(tmp_path):
    writers = tfrecord_shards.ShardWriters(str(tmp_path / "s"), None, gzip_level=1, writers=2)
    int32 = pa.RecordBatch.from_arrays([_ragged(np.arange(4), 1, pa.int32())], ["x"])
    with pytest.raises(RuntimeError, match=r"writing .*s-[01]\.tfrecord\.gz failed: the writer process \(exit 1\): "
                                           r".*Bad field type"):
        for _ in range(50):
            writers.put(int32)   # tfx_bsl refuses int32, in the helper process
        writers.close()
    assert all(w._proc.poll() is not None for w in writers._writers)   # none left behind


def test_a_batch_of_another_schema_is_refused_naming_the_file(tmp_path):
    writers = tfrecord_shards.ShardWriters(str(tmp_path / "s"), None, gzip_level=1, writers=1)
    other = pa.RecordBatch.from_arrays([_ragged(np.arange(4), 1, pa.int64())], ["y"])
    with pytest.raises(RuntimeError, match=r"writing .*s-0\.tfrecord\.gz failed: .*schema"):
        for batch in [_batch(0), other] + [_batch(0)] * 20:
            writers.put(batch)
        writers.close()


def test_an_abandoned_bundle_leaves_no_process_behind(tmp_path):
    writers = tfrecord_shards.ShardWriters(str(tmp_path / "s"), None, gzip_level=1, writers=2)
    writers.put(_batch(0))
    writers.abort()
    assert all(w._proc.returncode is not None for w in writers._writers)   # ended, reaped


def test_a_writer_process_killed_from_outside_fails_the_caller_saying_so(tmp_path):
    import os
    import signal
    writers = tfrecord_shards.ShardWriters(str(tmp_path / "s"), None, gzip_level=1, writers=2)
    writers.put(_batch(0))
    os.kill(writers._writers[1]._proc.pid, signal.SIGKILL)   # say, the OOM killer
    with pytest.raises(RuntimeError, match=r"s-1\.tfrecord\.gz failed: the writer process "
                                           r"\(killed by signal 9\)"):
        for _ in range(50):
            writers.put(_batch(0))
        writers.close()
    assert all(w._proc.returncode is not None for w in writers._writers)
    writers.abort()   # what the DoFn's teardown does after a failed bundle: nothing left


def test_the_writer_helper_refuses_a_bad_level_and_a_stream_without_its_block():
    import subprocess
    import sys
    bad = subprocess.run([sys.executable, "-m", "beam_jobs.tfrecord_writer", "--gzip-level", "0"],
                         capture_output=True, text=True, input="")
    assert bad.returncode == 2 and "--gzip-level must be in 1..9" in bad.stderr
    empty = subprocess.run([sys.executable, "-m", "beam_jobs.tfrecord_writer"],
                           capture_output=True, text=True, input="")
    assert empty.returncode == 1 and "no schema block" in empty.stderr
