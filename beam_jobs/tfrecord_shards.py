"""Transformed RecordBatches -> gzip TFRecord shards of tf.Examples, batch-wise.

Why not `EncodeTransformedDataset | WriteToTFRecord`: that path turns every batch into
single-row elements and writes each record through Python (CRC + gzip per record); the
profile showed it as the largest per-row cost of the preprocessing job after the
transform itself. Here a bundle's batches are encoded whole (`tfrecord_encoding`) and
compressed by helper processes (`tfrecord_writer`), one temp file each, and the files of
committed bundles are renamed into place by one step at the end, beside a small JSON of
every file's row count (`rows_file`): what lets a reader split the rows, not the files,
over its workers without a pass over them.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_jobs.tfrecord_writer import DEFAULT_GZIP_LEVEL, gzip_compressor, write_block

WRITERS = 2   # default shard files written in parallel per bundle (see ShardWriters)
_CHUNK = 1 << 20
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])


class _Writer:
    """One helper process (`python -m beam_jobs.tfrecord_writer`) and its shard file: a
    feeder thread streams the queued batches to its stdin as Arrow IPC, a drainer thread
    copies its stdout into the file (Beam's FileSystems: a folder, gs://, s3://)."""

    _DONE = object()

    def __init__(self, path: str, schema: bytes, gzip_level: int):
        self.path = path
        self.error: BaseException | None = None
        self.cpu_seconds = 0.0
        self.queue: queue.Queue = queue.Queue(maxsize=2)   # memory stays flat
        self._failure: BaseException | None = None         # of a thread of ours
        self._killed = False
        self._stderr = tempfile.TemporaryFile()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (_PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "beam_jobs.tfrecord_writer", "--gzip-level", str(gzip_level)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env)
        self._threads = [threading.Thread(target=self._feed, args=(schema,), daemon=True,
                                          name="shard-feeder"),
                         threading.Thread(target=self._drain, daemon=True, name="shard-drainer")]
        for t in self._threads:
            t.start()

    def _feed(self, schema: bytes):
        import pyarrow as pa
        stream, done = None, False
        try:
            write_block(self._proc.stdin, schema)
            while (batch := self.queue.get()) is not self._DONE:
                if stream is None:
                    stream = pa.ipc.new_stream(self._proc.stdin, batch.schema)
                stream.write_batch(batch)
            done = True
            if stream is not None:   # a writer that got no batch sends no stream at all
                stream.close()
            self._proc.stdin.close()
        except BaseException as e:   # raised in the Beam thread by put() / close()
            self._fail(e)
            while not done and self.queue.get() is not self._DONE:   # keep the producer
                pass                                                   # unblocked

    def _drain(self):
        try:
            with FileSystems.create(self.path,
                                    compression_type=CompressionTypes.UNCOMPRESSED) as out:
                while chunk := self._proc.stdout.read(_CHUNK):
                    out.write(chunk)
        except BaseException as e:
            self._fail(e)

    @property
    def failed(self) -> bool:
        """A thread of ours failed (the helper's own failure shows in `join`)."""
        return self._failure is not None

    def end_input(self) -> None:
        """No more batches: the feeder closes the stream (nothing to do once it ended)."""
        if self._threads[0].is_alive():
            self.queue.put(self._DONE)

    def _fail(self, e: BaseException) -> None:
        self._failure = self._failure or e
        self.stop()

    def stop(self) -> None:
        """Kill the helper, unless it has ended already (then its own status says why).
        It is reaped in `join` only, so its pid cannot be reused before."""
        pid = self._proc.pid
        if self._proc.returncode is not None:   # joined already
            return
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            self._killed = True
            os.kill(pid, signal.SIGKILL)

    def join(self):
        """Wait for the threads and the helper; set `error` to what went wrong first."""
        for t in self._threads:
            t.join()
        if self._proc.returncode is not None:   # joined already
            return
        _, status, usage = os.wait4(self._proc.pid, 0)
        code = self._proc.returncode = os.waitstatus_to_exitcode(status)
        self.cpu_seconds = usage.ru_utime + usage.ru_stime
        if code and not self._killed:   # the helper failed: a broken pipe here follows
            self._stderr.seek(0)
            said = self._stderr.read().decode(errors="replace").strip().splitlines()
            how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
            self.error = RuntimeError(f"the writer process ({how}): "
                                      f"{said[-1] if said else 'no message'}")
        else:
            self.error = self._failure
        self._stderr.close()


class ShardWriters:
    """Encode RecordBatches to tf.Examples and write them to gzip TFRecord files, one file
    per helper process, so encoding uses the cores the single-threaded runner leaves idle
    without taking its GIL. Batches go to the writers in turn, so each file's content
    depends on the input order only, never on timing (the same input gives the same
    shards, and so the same training order). At most 2 batches per writer wait, so memory
    stays flat; an error in a writer is raised in the caller, naming its file.
    `schema`: the transform's output schema (TFMD proto bytes) for the batches tfx_bsl
    encodes."""

    def __init__(self, stem: str, schema: bytes | None, gzip_level: int, writers: int):
        self.paths = [f"{stem}-{i}.tfrecord.gz" for i in range(writers)]
        self.rows = [0] * writers   # rows put to each file (known without reading it)
        self._writers: list[_Writer] = []
        try:
            for path in self.paths:
                self._writers.append(_Writer(path, schema or b"", gzip_level))
        except BaseException:
            self.abort()
            raise
        self._next = 0

    @property
    def cpu_seconds(self) -> float:
        """CPU the helper processes spent (known after close)."""
        return sum(w.cpu_seconds for w in self._writers)

    def put(self, batch):
        if any(w.failed for w in self._writers):
            self.close()   # stops every writer, then raises
        self._writers[self._next].queue.put(batch)
        self.rows[self._next] += batch.num_rows
        self._next = (self._next + 1) % len(self._writers)

    def close(self):
        for w in self._writers:
            w.end_input()
        for w in self._writers:
            w.join()
        failed = next((w for w in self._writers if w.error), None)
        if failed:
            raise RuntimeError(f"writing {failed.path} failed: {failed.error}") from failed.error

    def abort(self):
        """Stop every helper process at once (a bundle given up), writing nothing more;
        after `close` it does nothing."""
        for w in self._writers:
            w.stop()
        for w in self._writers:
            w.end_input()
        for w in self._writers:
            w.join()


class _WriteBundleShard(beam.DoFn):
    """Write a bundle's transformed RecordBatches to temp shard files; emit (path, rows) of
    each when the bundle finishes."""

    def __init__(self, directory: str, gzip_level: int, namespace: str, writers: int):
        self._dir = directory
        self._gzip_level = gzip_level
        self._writers = writers
        self._write_us = Metrics.counter(namespace, "write_us")

    def setup(self):
        self._writer = None

    def start_bundle(self):
        self.teardown()   # a bundle that failed before finish_bundle left its writers

    def process(self, element, schema):
        batch = element[0] if isinstance(element, tuple) else element   # drop passthrough
        if self._writer is None:
            self._writer = ShardWriters(f"{self._dir}/.tmp-{uuid.uuid4().hex}", schema,
                                        self._gzip_level, self._writers)
        self._writer.put(batch)

    def finish_bundle(self):
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
            self._write_us.inc(round(writer.cpu_seconds * 1e6))
            for path, rows in zip(writer.paths, writer.rows):
                yield WindowedValue((path, rows), MIN_TIMESTAMP, [GlobalWindow()])

    def teardown(self):
        if getattr(self, "_writer", None) is not None:
            writer, self._writer = self._writer, None
            writer.abort()


def _commit_shards(temp_files: list[tuple[str, int]], directory: str,
                   rows_file: str | None = None) -> list[str]:
    """Rename the committed bundles' temp files to part-NNNNN-of-MMMMM.tfrecord.gz and, with
    `rows_file`, write {file name: rows} of them to that name in `directory`.

    Only paths that reached this step (outputs of committed bundles) are kept; temp files
    of failed or retried bundle attempts are deleted, so a retry never duplicates rows.
    """
    temp_files = sorted(temp_files)
    if not temp_files:   # an empty split still gets one (empty) file
        empty = f"{directory}/.tmp-empty.tfrecord.gz"
        with FileSystems.create(empty, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            f.write(gzip_compressor(DEFAULT_GZIP_LEVEL).flush())
        temp_files = [(empty, 0)]
    n = len(temp_files)
    final = [f"{directory}/part-{i:05d}-of-{n:05d}.tfrecord.gz" for i in range(n)]
    FileSystems.rename([p for p, _ in temp_files], final)
    if rows_file:
        rows = {FileSystems.split(p)[1]: r for p, (_, r) in zip(final, temp_files)}
        with FileSystems.create(FileSystems.join(directory, rows_file),
                                compression_type=CompressionTypes.UNCOMPRESSED) as f:
            f.write(json.dumps(rows, indent=0, sort_keys=True).encode())
    stale = [m.path for m in FileSystems.match([f"{directory}/.tmp-*"])[0].metadata_list]
    if stale:
        FileSystems.delete(stale)
    return final


class WriteTransformedShards(beam.PTransform):
    """(transformed RecordBatches, metadata) -> gzip TFRecord shards of tf.Examples;
    the CPU seconds spent encoding and compressing go to the counter `write_us` of
    `namespace`. `writers`: helper processes (and files) per bundle, each about 100 MB.
    `rows_file`: a file name in `directory` for {shard file name: rows} (None: not written)."""

    def __init__(self, directory: str, gzip_level: int = DEFAULT_GZIP_LEVEL,
                 namespace: str = "retrain.tfrecord_shards", writers: int = WRITERS,
                 rows_file: str | None = None):
        super().__init__()
        self._rows_file = rows_file
        self._dir = directory
        self._gzip_level = gzip_level
        self._namespace = namespace
        self._writers = writers

    def _extract_input_pvalues(self, data_and_metadata):
        return data_and_metadata, [data_and_metadata[0]]

    def expand(self, data_and_metadata):
        data, metadata = data_and_metadata
        FileSystems.mkdirs(self._dir)
        schema = (metadata.deferred_metadata
                  | "Schema" >> beam.Map(lambda m: m.schema.SerializeToString()))
        return (data
                | "WriteBundles" >> beam.ParDo(
                    _WriteBundleShard(self._dir, self._gzip_level, self._namespace,
                                      self._writers),
                    schema=beam.pvalue.AsSingleton(schema))
                | "Collect" >> beam.combiners.ToList()
                | "Commit" >> beam.Map(_commit_shards, self._dir, self._rows_file))
