"""The recommendation job's plan and progress lines, on stderr.

Why: a run that scores billions of pairs and says nothing for minutes looks hung. Before
scoring it says how much it will do and about how long that takes; while the Beam job
runs, a thread reads the workers' counts (`beam_jobs.recommend_ctr.pairs_done`) every
`every` seconds and prints done/total, the measured rate and the time left. One line per
update, no carriage returns, so the same lines read well in a terminal and in an Airflow
task log (the step's stderr goes there).
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Callable, TextIO

# One DirectRunner worker scoring the bundled model on 2 cores (bench/recommend_ctr.py,
# bench/results/recommend_ctr.json: beam-1 727,133 pairs/s). The plan's estimate only;
# the progress line measures this machine.
PAIRS_PER_SECOND = 700_000


def say(message: str, out: TextIO | None = None) -> None:
    print(f"recommend: {message}", file=out or sys.stderr, flush=True)


def duration(seconds: float) -> str:
    seconds = max(1, int(round(seconds)))      # "about 0 s" reads as broken
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def plan_line(users: int, items: int, rate: float = PAIRS_PER_SECOND) -> str:
    pairs = users * items
    return (f"scoring {users:,} users x {items:,} items = {pairs:,} pairs, about "
            f"{duration(pairs / rate)} at {rate:,.0f} pairs/s")


class Progress:
    """`with Progress(total, count, every):` prints a progress line every `every` seconds
    (none when every <= 0) and a last one on a clean exit; `count()` is the work done."""

    def __init__(self, total: int, count: Callable[[], int], every: float,
                 unit: str = "pairs", out: TextIO | None = None):
        self.total, self.count, self.every, self.unit = max(0, total), count, every, unit
        self.out = out
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = self._first_at = 0.0
        self._first_done = self._done = 0
        self._changed_at = 0.0

    def __enter__(self) -> "Progress":
        self._started = time.monotonic()
        if self.every > 0:
            self._thread = threading.Thread(target=self._loop, name="recommend-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.line()

    def line(self, final: bool = False) -> str:
        now = time.monotonic()
        try:
            done = min(self.count(), self.total)
        except OSError:          # a look that failed: the next one counts
            return ""
        if done and not self._first_at:
            # The rate is measured from the first work seen, not from the start, so the
            # model's loading does not make the time left look longer than it is.
            self._first_at, self._first_done = now, done
        if done > self._done:
            self._done, self._changed_at = done, now
        # Up to now while scoring (a stall shows as a falling rate), up to the last change
        # once every pair is scored (writing the lists does not make scoring look slower).
        end = self._changed_at if done >= self.total else now
        span = end - self._first_at if self._first_at else 0.0
        rate = ((done - self._first_done) / span if span > 0 and done > self._first_done
                else done / (end - self._started) if done and end > self._started else 0.0)
        share = 100.0 * done / self.total if self.total else 100.0
        if final:
            left = f"done in {duration(now - self._started)}"
        elif done >= self.total:
            left = "all scored, writing the lists"
        elif done and done == self._first_done:
            left = "ETA after the next look (measuring the rate)"
        elif rate > 0:
            left = f"ETA {duration((self.total - done) / rate)}"
        else:
            left = "ETA unknown (loading the model)"
        text = (f"{done:,}/{self.total:,} {self.unit} ({share:.0f} %), "
                f"{rate:,.0f} {self.unit}/s, {left}")
        say(text, self.out)
        return text

    def __exit__(self, kind, *_rest) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if kind is None and self.every > 0:
            self.line(final=True)
