"""Raw part files a job must refuse before reading (symlinks out of the raw root, empty
files) and parts that changed while a job read them."""
from __future__ import annotations

import os

import pytest

from retrain.common.rawfiles import (ChangedWhileRead, UnsafeInput, snapshot,
                                        verify_unchanged)


@pytest.fixture
def root(tmp_path):
    day = tmp_path / "raw" / "dt=2026-11-01"
    day.mkdir(parents=True)
    (day / "part-0.jsonl").write_text('{"a": 1}\n')
    return tmp_path / "raw"


def test_a_symlink_inside_the_root_is_read_one_outside_is_refused(root, tmp_path):
    day = root / "dt=2026-11-01"
    (day / "part-1.jsonl").symlink_to(day / "part-0.jsonl")
    assert len(snapshot(sorted(day.glob("part-*")), root)) == 2
    outside = tmp_path / "secret.txt"
    outside.write_text("root:x:0:0\n")
    (day / "part-2.jsonl").symlink_to(outside)
    with pytest.raises(UnsafeInput, match=rf"part-2.jsonl is a symlink to {outside}, outside "
                                          rf"the raw root {root}"):
        snapshot(sorted(day.glob("part-*")), root)


def test_empty_dangling_and_non_files_are_refused(root):
    day = root / "dt=2026-11-01"
    (day / "part-1.jsonl.gz").write_bytes(b"")
    with pytest.raises(UnsafeInput, match=r"part-1.jsonl.gz is empty \(0 bytes\)"):
        snapshot([day / "part-1.jsonl.gz"], root)
    (day / "part-2.jsonl").symlink_to(day / "gone.jsonl")
    with pytest.raises(UnsafeInput, match="part-2.jsonl is a dangling symlink"):
        snapshot([day / "part-2.jsonl"], root)
    (day / "part-3.jsonl").mkdir()
    with pytest.raises(UnsafeInput, match="part-3.jsonl is not a regular file"):
        snapshot([day / "part-3.jsonl"], root)


def test_a_part_that_grows_or_is_rewritten_while_read_is_named(root):
    part = root / "dt=2026-11-01" / "part-0.jsonl"
    before = snapshot([part], root)
    verify_unchanged(before)                       # untouched: fine
    with open(part, "a") as f:
        f.write('{"a": 2}\n')
    with pytest.raises(ChangedWhileRead, match=r"part-0.jsonl \(9 -> 18 bytes\)"):
        verify_unchanged(before)
    before = snapshot([part], root)
    st = os.stat(part)
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(ChangedWhileRead, match=r"rewritten, still 18 bytes"):
        verify_unchanged(before)


def test_remote_paths_are_left_to_their_filesystem():
    assert snapshot(["gs://bucket/raw/dt=2026-11-01/part-0.parquet"], "gs://bucket/raw") == {}
