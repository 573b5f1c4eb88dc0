"""One gzip TFRecord stream of tf.Examples from Arrow RecordBatches: the helper process
of the shard writers (`tfrecord_shards.ShardWriters`).

Reads from stdin a length-prefixed block (the TFMD schema proto for tfx_bsl's encoder,
made only for a batch the batch-wise encoding does not take; empty: none), then an
Arrow IPC stream; writes the compressed TFRecord bytes to stdout. A process rather than a
thread: encoding ends in a Python loop over the records (their CRCs), and in a thread
that loop held the GIL for 2 of the 6 seconds that transforming 5M rows took, stalling
the runner's own thread. It imports no TensorFlow and no Beam (0.1 s to start).

    python -m beam_jobs.tfrecord_writer --gzip-level 1 < block+batches > part.tfrecord.gz
"""
from __future__ import annotations

import argparse
import struct
import sys
import zlib

# Measured on the CTR job's tf.Examples: gzip level 1 writes 3x faster than zlib's
# default (6) for 24 % more bytes; writing was the largest cost of the job at the default.
DEFAULT_GZIP_LEVEL = 1
# Levels up to this one use ISA-L's deflate (its levels 1-3): the same gzip format, 4x
# faster than zlib's level 1 at the same size on these records; above it, zlib's.
ISAL_MAX_LEVEL = 3
_LENGTH = struct.Struct("<Q")
# Rows encoded at a time: the scratch matrices of 16k rows (6 MB) stay in the CPU's
# caches; whole 52k-row batches (19 MB) encoded 10 % slower and held 3x the memory.
ENCODE_ROWS = 16384


def gzip_compressor(level: int):
    """A compressobj writing one gzip stream at `level` (1 fastest .. 9 smallest)."""
    if level <= ISAL_MAX_LEVEL:
        from isal import isal_zlib
        return isal_zlib.compressobj(level, isal_zlib.DEFLATED, 16 + isal_zlib.MAX_WBITS)
    return zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)


def write_block(stream, data: bytes) -> None:
    stream.write(_LENGTH.pack(len(data)) + data)


def _read_block(stream) -> bytes:
    head = stream.read(_LENGTH.size)
    if len(head) != _LENGTH.size:
        raise EOFError("no schema block on stdin")
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    if len(data) != size:
        raise EOFError(f"the schema block ended after {len(data)} of {size} bytes")
    return data


def convert(source, sink, gzip_level: int) -> None:
    """Read the block and the batches from `source`, write gzip TFRecords to `sink`."""
    import pyarrow as pa
    from beam_jobs.tfrecord_encoding import ExampleEncoder

    encoder = ExampleEncoder(_read_block(source))
    compressor = gzip_compressor(gzip_level)
    if not hasattr(source, "peek") or source.peek(1):   # nothing after the block: no rows
        with pa.ipc.open_stream(source) as batches:
            for batch in batches:
                for start in range(0, batch.num_rows, ENCODE_ROWS):
                    sink.write(compressor.compress(
                        encoder.encode(batch.slice(start, ENCODE_ROWS))))
    sink.write(compressor.flush())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gzip-level", type=int, default=DEFAULT_GZIP_LEVEL,
                   help=f"1 fastest .. 9 smallest (default {DEFAULT_GZIP_LEVEL}; 1-"
                        f"{ISAL_MAX_LEVEL} ISA-L's deflate, above zlib's)")
    args = p.parse_args(argv)
    if not 1 <= args.gzip_level <= 9:
        p.error(f"--gzip-level must be in 1..9, got {args.gzip_level}")
    try:
        convert(sys.stdin.buffer, sys.stdout.buffer, args.gzip_level)
        sys.stdout.buffer.flush()
    except Exception as e:   # the parent raises this line, naming the shard
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
