"""Chain of custody (retrain/orchestration/custody.py): a partition's bytes are bound to the
validation that read them; a rewrite keeping names, sizes and mtimes is still refused,
names the day and the file, and quarantines the day."""
from __future__ import annotations

import json
import os

import pytest

from retrain.common import window
from retrain.orchestration import custody
from retrain.common.errors import BadData, kind_of


def _day(root, day, payload=b"a,b\n1,2\n"):
    d = root / "raw" / f"dt={day}"
    d.mkdir(parents=True)
    (d / "part-00000.jsonl").write_bytes(payload)
    (d / "part-00001.jsonl").write_bytes(payload * 2)
    (d / "_SUCCESS").write_text("{}")
    return d


def _record(root, day, run, content, mtime_ns=None):
    """The validate step's lineage record as the DAG factory writes it."""
    path = root / "runs" / f"dt={day}" / run / custody.VALIDATION_RECORD
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"figures": {"gate": "passed", "content": content}}))
    if mtime_ns:
        os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def _rewrite_same_size_and_mtime(path):
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_digest_covers_every_data_file_but_not_the_marker_or_temp_entries(tmp_path):
    d = _day(tmp_path, "2026-11-01")
    got = custody.content(d)
    assert sorted(got["files"]) == ["part-00000.jsonl", "part-00001.jsonl"]
    (d / "_SUCCESS").write_text('{"rows": 3}')
    (d / ".tmp-1").mkdir()
    (d / ".tmp-1" / "half").write_bytes(b"x")
    assert custody.content(d) == got


def test_a_rewrite_keeping_size_and_mtime_is_refused_naming_day_and_file(tmp_path):
    d = _day(tmp_path, "2026-11-01")
    validated = custody.content(d)
    _rewrite_same_size_and_mtime(d / "part-00001.jsonl")
    q = tmp_path / "quarantine"
    with pytest.raises(custody.ContentChanged) as e:
        custody.verify("2026-11-01", d, validated, stage="preprocess", quarantine_dir=str(q),
                       run_id="r9")
    msg = str(e.value)
    assert "2026-11-01" in msg and "part-00001.jsonl changed" in msg
    assert "part-00000.jsonl" not in msg and "preprocess" in msg
    assert isinstance(e.value, BadData) and kind_of(e.value) == "bad_data"   # never retried
    marker = json.loads((q / "dt=2026-11-01.json").read_text())
    assert marker["run_id"] == "r9" and "part-00001.jsonl changed" in marker["failed"][0]
    # the window screen then leaves the day out as quarantined
    out = window.screen(["2026-11-01", "2026-11-02"], "2026-11-02",
                        history_root=str(tmp_path / "runs"), quarantine_dir=str(q))
    assert out["left_out"][0]["span"] == "2026-11-01"
    assert out["left_out"][0]["reason"].startswith("quarantined")


def test_added_and_removed_files_are_named(tmp_path):
    d = _day(tmp_path, "2026-11-01")
    validated = custody.content(d)
    (d / "part-00000.jsonl").unlink()
    (d / "part-00002.jsonl").write_bytes(b"{}\n")
    with pytest.raises(custody.ContentChanged, match="part-00000.jsonl removed; "
                                                     "part-00002.jsonl added"):
        custody.verify("2026-11-01", d, validated, stage="train")
    assert custody.verify("2026-11-01", d, custody.content(d), stage="train")


def test_no_recorded_digest_is_refused_not_trusted(tmp_path):
    d = _day(tmp_path, "2026-11-01")
    with pytest.raises(custody.ContentChanged, match="no validation recorded"):
        custody.verify("2026-11-01", d, None, stage="preprocess")


def test_the_newest_validation_record_wins_and_a_run_reads_its_own(tmp_path):
    d = _day(tmp_path, "2026-11-01")
    old = {"digest": "old", "files": {}}
    _record(tmp_path, "2026-11-01", "r1", old, mtime_ns=1_000_000_000)
    new = custody.content(d)
    _record(tmp_path, "2026-11-01", "r2", new, mtime_ns=2_000_000_000)
    runs = tmp_path / "runs"
    assert custody.validated(runs, "2026-11-01") == new
    assert custody.validated(runs, "2026-11-01", run_dir=runs / "dt=2026-11-01" / "r1") == old
    assert custody.validated(runs, "2026-11-02") is None


def test_a_pass_recorded_without_a_digest_is_validated_again(tmp_path):
    """Records from before digests were kept bind no bytes: the window screen validates
    such a day again instead of trusting its old verdict."""
    path = tmp_path / "runs" / "dt=2026-11-01" / "r1" / custody.VALIDATION_RECORD
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"figures": {"gate": "passed"}}))
    asked = []
    out = window.screen(["2026-11-01", "2026-11-02"], "2026-11-02",
                        history_root=str(tmp_path / "runs"), quarantine_dir=str(tmp_path / "q"),
                        validate_days=lambda ds: asked.append(ds) or dict.fromkeys(ds, False))
    assert asked == [["2026-11-01"]] and out["used"] == ["2026-11-02"]


def _counting_digests(monkeypatch) -> list:
    """Spy on the hashing (the real function still runs): which files were read."""
    read, real = [], custody.file_digest

    def spy(path):
        read.append(path.name)
        return real(path)
    monkeypatch.setattr(custody, "file_digest", spy)
    return read


def test_unchanged_files_are_hashed_once_and_a_rewrite_is_still_seen(tmp_path, monkeypatch):
    """A check of an unchanged day reads no bytes (at the seed's scale every check of the
    window re-read ~TBs in one process); a rewrite keeping size and mtime still changes
    the kernel's ctime, so it is hashed again and refused."""
    monkeypatch.setattr(custody, "RACY_NS", 0)
    read = _counting_digests(monkeypatch)
    d, cache = _day(tmp_path, "2026-11-01"), tmp_path / "cache"
    first = custody.content(d, cache)
    assert sorted(read) == ["part-00000.jsonl", "part-00001.jsonl"]
    read.clear()
    assert custody.content(d, cache) == first and read == []
    _rewrite_same_size_and_mtime(d / "part-00001.jsonl")
    again = custody.content(d, cache)
    assert read == ["part-00001.jsonl"] and again["digest"] != first["digest"]
    assert custody.differences(first, again) == ["part-00001.jsonl changed"]
    # A file replaced by another one (a new inode) is read again too.
    (d / "new").write_bytes((d / "part-00000.jsonl").read_bytes())
    os.replace(d / "new", d / "part-00000.jsonl")
    read.clear()
    assert custody.content(d, cache)["digest"] == again["digest"] and read == ["part-00000.jsonl"]


def test_recently_changed_files_and_a_damaged_cache_are_hashed_every_time(tmp_path,
                                                                           monkeypatch):
    read = _counting_digests(monkeypatch)
    d, cache = _day(tmp_path, "2026-11-01"), tmp_path / "cache"
    custody.content(d, cache)
    custody.content(d, cache)            # written just now: racily clean, never trusted
    assert len(read) == 4 and not list(cache.glob("*.json"))
    monkeypatch.setattr(custody, "RACY_NS", 0)
    first = custody.content(d, cache)
    (entry,) = cache.glob("*.json")
    entry.write_text('{"part-00000.jsonl": [[0, 0, 0, 0, 0], "forged"]}')
    read.clear()
    assert custody.content(d, cache) == first and len(read) == 2
    entry.write_text("{truncated")
    read.clear()
    assert custody.content(d, cache) == first and len(read) == 2


@pytest.mark.timeout(30)
def test_a_fifo_in_a_day_is_refused_by_the_digest_without_waiting(tmp_path):
    """custody.verify hashes the day itself when no content is handed in: a FIFO that
    appeared after the first listing must be refused, not waited on."""
    from retrain.common.digests import NotRegularFile
    d = _day(tmp_path, "2026-11-01")
    os.mkfifo(d / "part-00002.jsonl")
    with pytest.raises(NotRegularFile, match="part-00002.jsonl"):
        custody.content(d, tmp_path / "cache")
