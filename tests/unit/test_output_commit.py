"""The marker commit of a job's output: a reader sees a whole attempt or none, and nothing
relies on rename, which object stores do not have.

`FakeObjectStore` stands in for gs:// / s3:// (no cloud account here): a Beam filesystem of
flat keys with no folders, whose rename fails, registered under the scheme `fakeobj`.
"""
from __future__ import annotations

import io

import pytest
from apache_beam.io.filesystem import FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems

from components import output_commit as oc

_OBJECTS: dict[str, bytes] = {}


class _Upload(io.BytesIO):
    def __init__(self, key: str):
        super().__init__()
        self.key = key

    def close(self):
        if not self.closed:
            _OBJECTS[self.key] = self.getvalue()     # visible whole, at close (one PUT)
        super().close()


class FakeObjectStore(FileSystem):
    """An object store as tests need it: keys, whole-object writes, prefix listing."""

    @classmethod
    def scheme(cls):
        return "fakeobj"

    def join(self, base, *paths):
        return "/".join([base.rstrip("/"), *[p.strip("/") for p in paths]])

    def split(self, path):
        head, _, tail = path.rpartition("/")
        return head, tail

    def mkdirs(self, path):
        raise AssertionError("an object store has no folders to make")

    def has_dirs(self):
        return False

    def _list(self, prefix):
        for key, data in sorted(_OBJECTS.items()):
            if key.startswith(prefix):
                yield FileMetadata(key, len(data), 0.0)

    def create(self, path, mime_type="application/octet-stream", compression_type=None):
        return _Upload(path)

    def open(self, path, mime_type="application/octet-stream", compression_type=None):
        return io.BytesIO(_OBJECTS[path])

    def copy(self, sources, destinations):
        for s, d in zip(sources, destinations):
            _OBJECTS[d] = _OBJECTS[s]

    def rename(self, sources, destinations):
        raise AssertionError("rename is not atomic on an object store: never used")

    def exists(self, path):
        return path in _OBJECTS or any(k.startswith(path.rstrip("/") + "/") for k in _OBJECTS)

    def size(self, path):
        return len(_OBJECTS[path])

    def last_updated(self, path):
        return 0.0

    def metadata(self, path):
        return FileMetadata(path, len(_OBJECTS[path]), 0.0)

    def checksum(self, path):
        return str(hash(_OBJECTS[path]))

    def delete(self, paths):
        for p in paths:
            for key in [k for k in _OBJECTS if k == p or k.startswith(p.rstrip("/") + "/")]:
                del _OBJECTS[key]


@pytest.fixture(autouse=True)
def empty_store():
    _OBJECTS.clear()
    yield
    _OBJECTS.clear()


def _write(uri: str, text: str) -> None:
    with FileSystems.create(uri) as f:
        f.write(text.encode())


def test_an_object_store_output_commits_by_marker_without_rename():
    target = "fakeobj://bucket/runs/pre"
    assert oc.mode_for(target) == "marker" and oc.committed(target) is None
    with oc.output_commit(target) as out:
        _write(f"{out}/train/part-0.tfrecord.gz", "rows")
        _write(f"{out}/summary.json", "{}")
        assert oc.committed(target) is None          # not visible before the commit
    result = oc.committed(target)
    assert result == out and result.startswith(f"{target}/attempt-")
    marker = oc.read_json(f"{target}/_SUCCESS")
    assert marker["files"] == 2 and marker["bytes"] == 6
    assert oc.read_json(f"{out}/_MANIFEST.json")["files"] == {
        "train/part-0.tfrecord.gz": 4, "summary.json": 2}


def test_a_failed_attempt_is_never_read_and_the_last_commit_stays():
    target = "fakeobj://bucket/pre"
    with oc.output_commit(target) as first:
        _write(f"{first}/a.txt", "v1")
    with pytest.raises(RuntimeError, match="killed"):
        with oc.output_commit(target) as second:
            _write(f"{second}/a.txt", "half of v2")
            raise RuntimeError("killed")
    assert oc.committed(target) == first
    assert not any(k.startswith(second) for k in _OBJECTS)     # its files are gone


def test_a_new_commit_replaces_the_old_attempt():
    target = "fakeobj://bucket/pre"
    with oc.output_commit(target) as first:
        _write(f"{first}/a.txt", "v1")
    with oc.output_commit(target) as second:
        _write(f"{second}/a.txt", "v2")
    assert oc.committed(target) == second
    assert sorted(_OBJECTS) == sorted([f"{target}/_SUCCESS", f"{second}/_MANIFEST.json",
                                       f"{second}/a.txt"])


def test_a_committed_output_with_a_missing_file_is_an_error_not_half_a_read():
    target = "fakeobj://bucket/pre"
    with oc.output_commit(target) as out:
        _write(f"{out}/a.txt", "x")
        _write(f"{out}/b.txt", "y")
    del _OBJECTS[f"{out}/b.txt"]
    with pytest.raises(FileNotFoundError, match="1 of its files are missing"):
        oc.committed(target)


def test_local_folders_keep_the_rename_commit_and_can_use_the_marker(tmp_path):
    with oc.output_commit(str(tmp_path / "renamed")) as out:
        (tmp_path / "renamed").exists() and pytest.fail("visible before the rename")
        _write(f"{out}/a.txt", "x")
    assert (tmp_path / "renamed" / "a.txt").read_text() == "x"
    with oc.output_commit(str(tmp_path / "marked"), "marker") as out:
        _write(f"{out}/a.txt", "y")
    assert oc.committed(str(tmp_path / "marked")) == out
    with pytest.raises(ValueError, match="no atomic rename"):
        oc.mode_for("gs://bucket/x", "rename")
