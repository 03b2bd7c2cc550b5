"""Which file — or model, a set of files — a result is about: realpath, size, mtime and an xxh3_128
hash of every byte (a set: of its members' identities, :func:`model_identity`).

Hashing a 20 GB model takes seconds, so the hash is cached in SQLite at
``$WORKBENCH_CACHE_DIR/identity.sqlite`` (default ``~/.cache/workbench``), keyed by what no user can
set: realpath, device, inode, size, and ``st_ctime_ns`` — which the kernel sets to now on every change
of a file's bytes or metadata, ``utime`` included (so a rewrite in place with its mtime put back still
gets a fresh hash; the mtime, which anyone can set, is recorded, not trusted). Linux exposes no change
counter to user space (``STATX_CHANGE_COOKIE`` stays inside the kernel, ``i_version`` is NFS's), so the
ctime is the key. A change within the same tick of the kernel's coarse clock as the file's previous one
keeps its ctime: a hash taken less than :data:`RACY_NS` after the file's last change is not cached
(git's "racily clean" rule), so such a file is hashed again next time.
The file is read untouched, so computing an identity never changes the cache state a run is about to
be measured in. The same database holds :func:`cached_json`, a small per-key cache (e.g. reference
checksums per file, keyed by the hash of the very bytes they were computed from:
:func:`hash_with_ranges`).
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any, Callable, Sequence

import xxhash

from workbench.settings import defaults
from workbench.errors import FormatError
from workbench.formats.index import FileIdentity, TensorIndex
from workbench.io.untouched import RangeHashers, iter_untouched

RACY_NS = 1_000_000_000  # past the coarse clock's tick (1-10 ms) and file systems that keep whole seconds
# The cache of issue 35 §4 on: keyed by ctime (the former ``identity`` table, keyed by mtime, is not read).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS file_hash (
    realpath TEXT NOT NULL, dev INTEGER NOT NULL, inode INTEGER NOT NULL, size INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, hash TEXT NOT NULL,
    PRIMARY KEY (realpath, dev, inode, size, ctime_ns, mtime_ns));
CREATE TABLE IF NOT EXISTS json_cache (
    kind TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (kind, key));
"""


def _connect() -> sqlite3.Connection | None:
    """The cache database, or None when it cannot be opened (the caller then just computes)."""
    try:
        defaults.cache_dir().mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(defaults.cache_dir() / "identity.sqlite", timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")  # several workers may hash at once
        conn.executescript(_SCHEMA)
        return conn
    except (OSError, sqlite3.Error):
        return None


def _stat(path: str | os.PathLike) -> os.stat_result:
    from workbench.io.pagecache import stat_regular

    return stat_regular(path)


def hash_file(path: str | os.PathLike) -> str:
    """``"xxh3_128:<hex>"`` over the whole file, read without touching its page-cache residency."""
    return hash_with_ranges(path, ())[0]


def hash_with_ranges(path: str | os.PathLike, ranges: Sequence[tuple[int, int]]) -> tuple[str, list[str]]:
    """The file's ``"xxh3_128:<hex>"`` and each ``(offset, nbytes)`` range's xxh3_64 hex digest, from
    one untouched pass over the file: checksums that come with the hash of the bytes they were taken from."""
    whole, parts = xxhash.xxh3_128(), RangeHashers(ranges, _stat(path).st_size, path)
    for pos, data in iter_untouched(path):
        whole.update(data)
        parts.feed(pos, data)
    return f"xxh3_128:{whole.hexdigest()}", parts.digests()


def _key(real: str, st: os.stat_result) -> tuple[str, int, int, int, int, int]:
    return real, st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns, st.st_mtime_ns


def file_identity(path: str | os.PathLike) -> FileIdentity:
    """The file's identity, its hash from the cache when realpath, device, inode, size, ctime and mtime
    match; ``path`` is the file as named, ``read_path`` the file read (a link's target)."""
    named, real = os.path.abspath(path), os.path.realpath(path)
    st = _stat(real)
    key = _key(real, st)
    conn = _connect()
    try:
        row = conn.execute("SELECT hash FROM file_hash WHERE realpath=? AND dev=? AND inode=? AND size=? "
                           "AND ctime_ns=? AND mtime_ns=?", key).fetchone() if conn else None
        if row:
            return FileIdentity(named, st.st_size, st.st_mtime_ns, row[0], read_path=real)
        started = time.time_ns()
        digest = hash_file(real)
        if _key(real, _stat(real)) != key:
            raise FormatError(real, "content", "file changed while it was being hashed")
        if conn and started - st.st_ctime_ns > RACY_NS:  # else a change in the same clock tick keeps the key
            with conn:
                conn.execute("INSERT OR REPLACE INTO file_hash VALUES (?, ?, ?, ?, ?, ?, ?)", (*key, digest))
        return FileIdentity(named, st.st_size, st.st_mtime_ns, digest, read_path=real)
    finally:
        if conn:
            conn.close()


def model_identity(model: "str | os.PathLike | TensorIndex") -> FileIdentity:
    """The identity of a model: of its one file, or of the set — each member's identity (and the index
    file's), hashed together by its logical name, the name the index or the directory gives it (not its
    directory, nor a link's target: a hub cache snapshot, whose files link to blobs named by hash, and a
    plain copy of it are the same model).

    ``model`` is a model path (resolved as :func:`workbench.formats.open_index` resolves it) or an index.
    """
    from workbench.formats import open_index

    index = model if isinstance(model, TensorIndex) else open_index(model)
    if not index.sharded and not index.index_file:
        return file_identity(index.files[0].path)
    members = [file_identity(f.path) for f in index.files]
    if index.index_file:
        members.append(file_identity(index.index_file))
    h = xxhash.xxh3_128()
    for m in members:
        h.update(f"{os.path.basename(m.path)}\0{m.size}\0{m.hash}\n".encode())
    data = members[: len(index.files)]
    return FileIdentity(index.path, sum(m.size for m in data), max(m.mtime_ns for m in members),
                        f"set:xxh3_128:{h.hexdigest()}", tuple(members), os.path.realpath(index.path))


def cached_json(kind: str, key: Any, compute: Callable[[], Any]) -> Any:
    """``compute()`` once per (kind, key), the JSON result kept in the identity database.

    ``key`` is any JSON-serialisable value (a FileIdentity's hash, a tuple of them, ...); it is stored
    in canonical form so equal keys hit the same row. Returns what was stored (JSON round-tripped).
    """
    skey = json.dumps(key, sort_keys=True, separators=(",", ":"), default=_default)
    conn = _connect()
    try:
        row = conn.execute("SELECT value FROM json_cache WHERE kind=? AND key=?",
                           (kind, skey)).fetchone() if conn else None
        if row:
            return json.loads(row[0])
        value = json.dumps(compute())
        if conn:
            with conn:
                conn.execute("INSERT OR REPLACE INTO json_cache VALUES (?, ?, ?)", (kind, skey, value))
        return json.loads(value)
    finally:
        if conn:
            conn.close()


def _default(obj: Any) -> Any:
    if isinstance(obj, FileIdentity):
        return [obj.path, obj.size, obj.mtime_ns, obj.hash]  # a set's hash covers its members
    raise TypeError(f"cache key part {obj!r} is not JSON-serialisable")
