"""The validation slice is chosen by a second stable hash of the example id: disjoint from
the held-out rows, about `validation_percent` of the rest, the same rows whatever the day or
the batch; and the trainer's statistics come from the preprocessing job's counts
(`components.ctr.split_stats`), which add up like the rows they count."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from components.ctr import features as F
from components.ctr import split_stats


def test_validation_rows_are_a_stable_share_of_the_rows_not_held_out():
    ids = [f"ex-{i}" for i in range(50_000)]
    held = F.eval_mask(ids, 20)
    val = F.validation_mask(ids, 10) & ~held
    assert 0.095 < val.sum() / (~held).sum() < 0.105
    # one id alone, or in another batch, lands in the same slice
    assert [bool(F.validation_mask([i], 10)[0]) for i in ids[:300]] == \
        F.validation_mask(ids[:300], 10).tolist()
    # independent of the eval split: the slice's share is the same among held-out rows
    assert 0.09 < (F.validation_mask(ids, 10) & held).sum() / held.sum() < 0.11
    assert not F.validation_mask(ids, 0).any()


def _batch(label, user):
    return pa.RecordBatch.from_arrays(
        [pa.array([[x] for x in label], pa.large_list(pa.int64())),
         pa.array(user, pa.large_list(pa.int64()))], names=["click", "user_xf"])


def test_split_counts_fold_merge_and_read_back(tmp_path):
    from components.ctr.formats import SPLIT_STATS_FILE
    a = split_stats.fold(split_stats.empty({"user": 4}), _batch([1, 0, 0], [[0], [3, -1], [9]]),
                         "click", {"user": "user_xf"})
    b = split_stats.fold(split_stats.empty({"user": 4}), _batch([1], [[3]]), "click",
                         {"user": "user_xf"})
    both = split_stats.merge(a, b)
    assert (both.rows, both.clicks) == (4, 2.0) and both.click_rate == 0.5
    # padding (-1) and ids outside the table do not count
    assert both.counts["user"].tolist() == [1, 0, 0, 2]
    split_stats.write(tmp_path / SPLIT_STATS_FILE, {"train": both, "validation": b})
    back = split_stats.read(tmp_path)
    assert back["train"].rows == 4 and back["validation"].counts["user"].tolist() == [0, 0, 0, 1]


def test_missing_counts_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="split_stats.npz.*run preprocessing again"):
        split_stats.read(tmp_path)


def test_trainer_takes_the_slice_and_counts_from_the_job(tmp_path):
    """Without a usable validation slice its rows train too, and its counts add in."""
    from components.ctr.formats import SPLIT_STATS_FILE
    from components.ctr.train_input import MIN_VALIDATION_ROWS, window_rows
    train = split_stats.SplitStats(1000, 50.0, {"user": np.array([600, 400])})
    small = split_stats.SplitStats(MIN_VALIDATION_ROWS - 1, 5.0, {"user": np.array([9, 90])})
    split_stats.write(tmp_path / SPLIT_STATS_FILE, {"train": train, "validation": small})
    stats, held, globs, val = window_rows(tmp_path, None, use_validation=True)
    assert (stats.rows, held, val) == (1000 + MIN_VALIDATION_ROWS - 1, 0, None)
    assert stats.counts["user"].tolist() == [609, 490] and len(globs) == 2
    big = split_stats.SplitStats(500, 5.0, {"user": np.array([9, 491])})
    split_stats.write(tmp_path / SPLIT_STATS_FILE, {"train": train, "validation": big})
    stats, held, globs, val = window_rows(tmp_path, None, use_validation=True)
    assert (stats.rows, held) == (1000, 500) and val.endswith("validation/*.tfrecord.gz")
    assert stats.counts["user"].tolist() == [600, 400] and len(globs) == 1
    stats, held, _, val = window_rows(tmp_path, None, use_validation=False)
    assert (stats.rows, held, val) == (1500, 0, None)
