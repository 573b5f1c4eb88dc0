"""Produce the next items of an iterator in a background thread while the caller works
on the current one.

Why: a Beam job's reader (Arrow's Parquet decoding, the record checks) releases the GIL
for most of its work, while the runner's single thread spends its own time in the
stages fused after the read (tf.Transform's analyzers and transform); read ahead, the two
overlap on a second core instead of taking turns.
"""
from __future__ import annotations

import queue
import threading
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")
_END = object()


class _Raised:
    def __init__(self, error: BaseException):
        self.error = error


def read_ahead(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """Yield what `items` yields, in order, at most `depth` items produced ahead (memory
    stays bounded). An error in `items` is raised here, at the point it happened; a
    caller that stops early stops the producer."""
    buffer: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                buffer.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for item in items:
                if not put(item):
                    return
            put(_END)
        except BaseException as e:
            put(_Raised(e))

    producer = threading.Thread(target=produce, daemon=True, name="read-ahead")
    producer.start()
    try:
        while (item := buffer.get()) is not _END:
            if isinstance(item, _Raised):
                raise item.error
            yield item
    finally:
        stop.set()
        producer.join()
