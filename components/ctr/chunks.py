"""Training chunks scheduled on a parameter-server cluster, settled without losing a step.

The training input is repeated forever, so a worker's iterator can never end on its own.
TensorFlow's coordinator can still report "End of sequence" from one: after a worker's host
came back from a network cut it rebuilds that worker's iterator, and a chunk that runs
against it meanwhile ends with OutOfRangeError (seen in CI with a 20 s cut). The
coordinator then cancels every queued chunk. Failing the run would throw away work the
coordinator's own recovery kept; instead the chunks that did not finish are scheduled again
on fresh iterators, a bounded number of times, so the run still trains its whole budget.
The validation passes go through the same scheduler, so they recover the same way.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

log = logging.getLogger("retrain.ps_train")

MAX_RECOVERIES = 3   # a dataset that really is empty fails the run after this many


@dataclass
class ChunkScheduler:
    """`schedule` queues `chunk_fn(iterator, n)` for the chunk that ends at a step;
    `settle` waits for all queued chunks and returns their (step at end, mean loss)."""

    coordinator: Any
    chunk_fn: Callable
    make_iterator: Callable[[], Any]
    input_name: str = "training input"    # what the log and the error call the input
    max_recoveries: int = MAX_RECOVERIES
    recoveries: int = 0
    rerun_steps: int = 0
    _iterator: Any = None
    _pending: list = field(default_factory=list)

    def schedule(self, step_end: int, n: int) -> None:
        import tensorflow as tf
        if self._iterator is None:
            self._iterator = self.make_iterator()
        self._pending.append((step_end, n, self.coordinator.schedule(
            self.chunk_fn, args=(self._iterator, tf.constant(n)))))

    def settle(self) -> list[tuple[int, float]]:
        import tensorflow as tf
        settled: list[tuple[int, float]] = []
        while self._pending:
            ended = None
            try:
                self.coordinator.join()
            except tf.errors.OutOfRangeError as e:
                ended = e
            lost = []
            for step_end, n, value in self._pending:
                try:
                    settled.append((step_end, float(value.fetch())))
                except (tf.errors.OutOfRangeError, tf.errors.CancelledError):
                    if ended is None:
                        raise
                    lost.append((step_end, n))
            self._pending = []
            if ended is None:
                break
            self.recoveries += 1
            if self.recoveries > self.max_recoveries:
                raise RuntimeError(
                    f"a worker's {self.input_name} ended {self.recoveries} times although it "
                    f"repeats forever; giving up: {str(ended).splitlines()[0][:200]}") from ended
            steps = sum(n for _, n in lost)
            self.rerun_steps += steps
            log.warning("a worker's %s reported its end (TensorFlow rebuilds a worker's "
                        "iterator after the worker came back); %d unfinished chunks (%d steps) "
                        "run again on fresh iterators (recovery %d of at most %d)",
                        self.input_name, len(lost), steps, self.recoveries,
                        self.max_recoveries)
            self._iterator = self.make_iterator()
            for step_end, n in lost:
                self.schedule(step_end, n)
        return sorted(settled)
