"""retrain.common.read_ahead: order kept, errors where they happened, bounded, stoppable."""
from __future__ import annotations

import threading
import time

import pytest

from retrain.common.read_ahead import read_ahead


def test_items_come_in_order_and_all_of_them():
    assert list(read_ahead(iter(range(1000)), depth=3)) == list(range(1000))
    assert list(read_ahead([])) == []


def test_an_error_is_raised_after_the_items_before_it():
    def items():
        yield 1
        yield 2
        raise ValueError("part-00003.parquet: corrupt")

    got = []
    with pytest.raises(ValueError, match="part-00003.parquet: corrupt"):
        for item in read_ahead(items()):
            got.append(item)
    assert got == [1, 2]


def test_the_producer_stays_at_most_depth_items_ahead_and_stops_with_the_caller():
    produced = []

    def items():
        for i in range(10_000):
            produced.append(i)
            yield i

    reader = read_ahead(items(), depth=2)
    assert next(reader) == 0
    # Wait until the producer has filled the buffer (a condition, not a guess at how long
    # that takes), then give it the chance to run further if it were unbounded.
    deadline = time.monotonic() + 10
    while len(produced) < 1 + 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(produced) >= 1 + 2, "the producer never filled the buffer"
    time.sleep(0.2)
    # the one handed out, `depth` waiting, and one blocked on the full buffer
    assert len(produced) <= 1 + 2 + 1
    reader.close()   # the caller stops early: the producer thread ends too
    assert not any(t.name == "read-ahead" and t.is_alive() for t in threading.enumerate())
