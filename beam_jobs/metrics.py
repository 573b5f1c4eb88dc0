"""Reading a finished pipeline's Beam counters, the same way in every job."""
from __future__ import annotations

from collections import Counter


def counters(result, namespace: str) -> dict[str, int]:
    """The job's own counters by name, summed over the steps that report them (one DoFn
    can run in several steps, e.g. one read per day). Committed values where the runner
    has them; attempted ones otherwise (some runners do not commit metrics)."""
    totals: Counter = Counter()
    for c in result.metrics().query()["counters"]:
        if c.key.metric.namespace == namespace:
            totals[c.key.metric.name] += c.committed if c.committed is not None else c.attempted
    return dict(totals)
