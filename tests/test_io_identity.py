"""File identity: the hash is right, cached by (realpath, device, inode, size, ctime, mtime), and renewed when the file changes;
it names the file as it was named and the file that was read."""
from __future__ import annotations

import os

import pytest
import xxhash

from workbench.errors import FormatError
from workbench.io import identity
from workbench.io.identity import cached_json, file_identity
from workbench.io.pagecache import evict_file_pages, resident_fraction


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(d))
    return d


@pytest.fixture
def hash_calls(monkeypatch):
    calls = []
    real = identity.hash_file

    def counting(path):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(identity, "hash_file", counting)
    return calls


def test_identity_fields_and_hash(tmp_path, cache_dir):
    data = os.urandom(300_000)
    path = tmp_path / "m.bin"
    path.write_bytes(data)
    link = tmp_path / "link.bin"
    link.symlink_to(path)
    ident = file_identity(link)
    st = os.stat(path)
    assert ident.path == str(link) and ident.read_path == str(path.resolve())  # as named; what was read
    assert (ident.size, ident.mtime_ns) == (len(data), st.st_mtime_ns)
    assert ident.hash == "xxh3_128:" + xxhash.xxh3_128(data).hexdigest()
    assert (cache_dir / "identity.sqlite").exists()


def test_second_call_uses_the_cache(tmp_path, hash_calls, monkeypatch):
    monkeypatch.setattr(identity, "RACY_NS", -1)  # the file was just written (the racy rule: below)
    path = tmp_path / "m.bin"
    path.write_bytes(b"a" * 5000)
    first = file_identity(path)
    second = file_identity(str(path))
    assert first == second and len(hash_calls) == 1


def test_changed_file_gets_a_new_hash(tmp_path, hash_calls):
    path = tmp_path / "m.bin"
    path.write_bytes(b"a" * 5000)
    first = file_identity(path)
    path.write_bytes(b"b" * 5000)  # same size
    os.utime(path, ns=(first.mtime_ns + 10**9, first.mtime_ns + 10**9))
    second = file_identity(path)
    assert second.hash != first.hash and second.mtime_ns != first.mtime_ns
    assert second.hash == "xxh3_128:" + xxhash.xxh3_128(b"b" * 5000).hexdigest()
    path.write_bytes(b"b" * 5001)
    assert file_identity(path).size == 5001
    assert len(hash_calls) == 3


def test_hashing_leaves_a_cold_file_cold(tmp_path):
    path = tmp_path / "m.bin"
    path.write_bytes(os.urandom(1 << 20))
    evict_file_pages(path)
    file_identity(path)
    assert resident_fraction(path) < 0.02


def test_unwritable_cache_still_computes(tmp_path, monkeypatch, hash_calls):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(blocker / "sub"))
    path = tmp_path / "m.bin"
    path.write_bytes(b"z" * 100)
    assert file_identity(path) == file_identity(path)
    assert len(hash_calls) == 2


def test_missing_and_directory(tmp_path):
    with pytest.raises(FormatError, match="no such file"):
        file_identity(tmp_path / "missing.gguf")
    with pytest.raises(FormatError, match="directory"):
        file_identity(tmp_path)


def test_cached_json(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"sums": ["ab", "cd"], "n": 2}

    ident_key = {"file": "xxh3_128:00", "ranges": [[0, 10], [10, 5]]}
    assert cached_json("ref-checksums", ident_key, compute) == {"sums": ["ab", "cd"], "n": 2}
    # key order does not matter; the stored value comes back
    assert cached_json("ref-checksums", {"ranges": [[0, 10], [10, 5]], "file": "xxh3_128:00"},
                       compute)["n"] == 2
    assert len(calls) == 1
    assert cached_json("other-kind", ident_key, lambda: 7) == 7
    path = tmp_path / "m.bin"
    path.write_bytes(b"q")
    ident = file_identity(path)
    assert cached_json("per-file", ident, lambda: [1, 2]) == [1, 2]
    assert cached_json("per-file", ident, lambda: pytest.fail("recomputed")) == [1, 2]
