"""The new-id row (issue 44): an id the analysis window never saw takes one explicit row of
its field's table, so a new user or item is scored from its other features and what that
row learned, instead of a stranger's hashed row or out-of-vocabulary bucket.

Which ids the window saw is a Bloom filter: `HASHES` salted hashes of each raw value set
bits in a bit array of the field's `seen_filter_bits`, ORed over every analysed row by a
cacheable tf.Transform analyzer (a day's bits are cached like its other statistics). The
array is a constant of the transform graph, so training, evaluation and serving test
membership the same way. Memory is the array, whatever the rows or ids: bits / 8 bytes
per Beam worker and in the graph. A Bloom filter has no false negatives (a seen id always
keeps its row) and a false-positive rate of about fill ^ HASHES (a few new ids keep the
row their hash gives them, as without the filter); preprocessing reports the fill and
that rate per field.

The row is trained because training moves a fixed share of rows to it
(`components.ctr.train_input.NEW_ID_TRAIN_SHARE`): every training id is in the window, so
without them it would stay at its initial value.
"""
from __future__ import annotations

import zlib

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

HASHES = 4                  # salted hashes per value: bits set / tested per id
NAMESPACE = "retrain.preprocess_ctr"    # beam_jobs.preprocess_ctr's counters
BITS_COUNTER = "seen_filter_bits_"      # + field: bits set in the window's filter
_SALTS = [f"seen{i}\x1f" for i in range(HASHES)]


def false_positive_rate(bits_set: int, bits: int) -> float:
    """Share of never-seen ids the filter takes for seen, from its fill."""
    return float((bits_set / bits) ** HASHES) if bits else 0.0


def positions(values, bits: int):
    """[n, HASHES] int64 bit positions of a flat tensor of raw values."""
    if values.dtype != tf.string:
        values = tf.strings.as_string(values)
    return tf.stack([tf.strings.to_hash_bucket_fast(tf.strings.join([salt, values]), bits)
                     for salt in _SALTS], axis=1)


def seen(values, bit_array, bits: int):
    """Bool [n]: was each raw value in the window (per the filter's packed bits)?"""
    pos = positions(values, bits)
    byte = tf.gather(bit_array, pos // 8)
    bit = tf.bitwise.bitwise_and(tf.bitwise.right_shift(byte, tf.cast(pos % 8, tf.uint8)),
                                 tf.constant(1, tf.uint8))
    return tf.reduce_all(tf.equal(bit, 1), axis=1)


def window_filter(values, bits: int, name: str):
    """The analyzer: packed bits (uint8 [bits / 8], bit p = byte p >> 3, bit p & 7) of
    every value of the analysed rows."""
    (out,) = tft.experimental.ptransform_analyzer(
        [positions(values, bits)], _analyzer(bits, name), [tf.uint8], [[bits // 8]],
        name=f"seen_filter_{name}")
    return out


def set_bits(packed: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """OR the bit positions `pos` into the packed array (in place; returned)."""
    pos = np.asarray(pos, np.int64).reshape(-1)
    np.bitwise_or.at(packed, pos >> 3, np.left_shift(1, pos & 7).astype(np.uint8))
    return packed


class OrBits(beam.CombineFn):
    """Batches of bit positions (or packed arrays) -> one packed array of `nbytes`, ORed."""

    def __init__(self, nbytes: int, packed_inputs: bool):
        self._nbytes = nbytes
        self._packed = packed_inputs

    def create_accumulator(self):
        return None            # allocated on first input: empty bundles cost nothing

    def add_input(self, acc, element):
        if acc is None:
            acc = np.zeros(self._nbytes, np.uint8)
        if self._packed:
            return np.bitwise_or(acc, element, out=acc)
        return set_bits(acc, element[0])

    def merge_accumulators(self, accumulators):
        out = None
        for acc in accumulators:
            if acc is not None:
                out = acc.copy() if out is None else np.bitwise_or(out, acc, out=out)
        return out

    def extract_output(self, acc):
        return np.zeros(self._nbytes, np.uint8) if acc is None else acc


class _Stable(beam.PTransform):
    """A PTransform whose repr names only its settings: tf.Transform hashes the analyzer's
    repr into its cache keys, and Beam's default repr holds the object's address, which
    would make every run's keys new (no day's filter ever read back from the cache)."""

    def __repr__(self):
        return f"{type(self).__name__}({self._settings})"


class _Combine(_Stable):
    def __init__(self, nbytes: int, packed_inputs: bool):
        super().__init__()
        self._fn = OrBits(nbytes, packed_inputs)
        self._settings = f"nbytes={nbytes}, packed_inputs={packed_inputs}"

    def expand(self, pcoll):
        return pcoll | beam.CombineGlobally(self._fn)


class _CountBits(_Stable):
    """The filter as it is, its set bits counted (preprocessing reports the fill)."""

    def __init__(self, name: str):
        super().__init__()
        self._counter = f"{BITS_COUNTER}{name}"
        self._settings = f"counter={self._counter!r}"

    def expand(self, pcoll):
        return pcoll | beam.Map(_counted, self._counter)


def _counted(packed, counter: str):
    beam.metrics.Metrics.counter(NAMESPACE, counter).inc(int(np.unpackbits(packed).sum()))
    return packed


class PackedBitsCoder(tft.experimental.PTransformAnalyzerCacheCoder):
    """Analysis-cache coder of a packed bit array (zlib: a window's filter is mostly 0s)."""

    def __init__(self, nbytes: int):
        self._nbytes = nbytes

    def encode_cache(self, cache) -> bytes:
        return zlib.compress(np.asarray(cache, np.uint8).tobytes(), 1)

    def decode_cache(self, encoded_cache: bytes) -> np.ndarray:
        out = np.frombuffer(zlib.decompress(encoded_cache), np.uint8).copy()
        if out.size != self._nbytes:
            raise ValueError(f"cached seen-filter holds {out.size} bytes, expected "
                             f"{self._nbytes}")
        return out


def _analyzer(bits: int, name: str):
    nbytes = bits // 8
    return tft.experimental.CacheablePTransformAnalyzer(
        make_accumulators_ptransform=_Combine(nbytes, False),
        merge_accumulators_ptransform=_Combine(nbytes, True),
        extract_output_ptransform=_CountBits(name), cache_coder=PackedBitsCoder(nbytes))
