"""How the trainer cuts the window's rows over its workers (`train_input.worker_plan`):
equal consecutive ranges by the job's per-file row counts, whatever the files' sizes."""
from __future__ import annotations

import itertools

import pytest

from components.ctr.train_input import EDGE_SNAP, worker_plan


def _rows_of(plan, rows):
    """Every (file, row) each worker reads."""
    return [[(name, i) for name, skip, take in reads for i in range(skip, skip + take)]
            for reads in plan]


@pytest.mark.parametrize("sizes", [[141_000, 75_000, 24_000], [2902, 2905, 626], [10],
                                   [0, 500, 0, 3], [1, 1, 1, 1, 1, 1, 1], [7, 0, 9_999]])
@pytest.mark.parametrize("workers", [1, 2, 3, 4, 5])
def test_every_row_is_read_once_and_the_shares_are_equal(sizes, workers):
    names = [f"part-{i}" for i in range(len(sizes))]
    rows = dict(zip(names, sizes))
    plan = worker_plan(names, rows, workers)
    assert len(plan) == workers
    read = _rows_of(plan, rows)
    everything = [(n, i) for n in names for i in range(rows[n])]
    assert sorted(itertools.chain(*read)) == sorted(everything)   # once each
    total = sum(sizes)
    for share in read:   # to a row, or moved to a file's edge by at most EDGE_SNAP
        assert abs(len(share) - total / workers) <= max(1, EDGE_SNAP * total / workers) + 1
    assert plan == worker_plan(names, dict(rows), workers)   # deterministic


def test_equal_files_in_a_multiple_of_the_workers_are_read_whole():
    names = [f"part-{i}" for i in range(12)]
    rows = {n: 1000 + (i % 2) for i, n in enumerate(names)}   # a row apart: snapped
    for workers in (1, 2, 3, 4, 6, 12):
        plan = worker_plan(names, rows, workers)
        assert all(skip == 0 and take == rows[n] for reads in plan for n, skip, take in reads)
        assert [len(reads) for reads in plan] == [12 // workers] * workers


def test_a_share_edge_inside_a_file_skips_there():
    plan = worker_plan(["a", "b"], {"a": 141_000, "b": 75_000}, 2)
    assert plan == [[("a", 0, 108_000)], [("a", 108_000, 33_000), ("b", 0, 75_000)]]
