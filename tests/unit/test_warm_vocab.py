"""Warm start by value for vocabulary tables (components/ctr/warm_vocab.py): which row of
the published table each of today's rows takes."""
from __future__ import annotations

from components.ctr.warm_vocab import read_vocabulary, row_sources


def test_rows_follow_their_values_and_oov_buckets_their_offsets():
    old = [b"c1", b"c2", b"c3"]                 # published: c1 c2 c3 | oov0 oov1 | spare
    new = [b"c3", b"c1", b"c9", b"c4"]          # today:     c3 c1 c9 c4 | oov0 oov1
    src = row_sources(old, new, oov_buckets=2, rows=6)
    assert list(src) == [2, 0, -1, -1, 3, 4]    # c9, c4: new values keep their fresh rows


def test_a_vocabulary_that_fills_the_table_leaves_no_room_for_shifted_oov_rows():
    src = row_sources([b"a"], [b"b", b"a", b"c"], oov_buckets=1, rows=3)
    assert list(src) == [-1, 0, -1]


def test_vocabulary_files_are_read_as_exact_bytes(tmp_path):
    (tmp_path / "v").write_bytes(b"\xc3\xa9\nplain\n\xff\n")
    assert read_vocabulary(tmp_path / "v") == [b"\xc3\xa9", b"plain", b"\xff"]
