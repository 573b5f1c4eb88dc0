"""Reading a finished pipeline's Beam counters, the same way in every job."""
from __future__ import annotations


def counters(result, namespace: str) -> dict[str, int]:
    """The job's own counters by name. Committed values where the runner has them;
    attempted ones otherwise (some runners do not commit metrics)."""
    return {c.key.metric.name: c.committed if c.committed is not None else c.attempted
            for c in result.metrics().query()["counters"]
            if c.key.metric.namespace == namespace}
