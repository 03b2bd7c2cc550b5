"""Opening a ledger from elsewhere, for a merge: a snapshot that writes nothing beside the file, and the
bounds every SQLite statement over it runs under.

**Nothing beside it.** Without a ``-wal`` file the source is opened ``immutable=1``; with a ``-wal``
and its ``-shm`` (a ledger some process has open) read-only through SQLite's own locking, which finds
both files there. A ``-wal`` without its ``-shm`` (the files of a live ledger copied over) would make
SQLite create the ``-shm`` beside it, outside the data root, and ``immutable=1`` would ignore the rows
the ``-wal`` holds: the pair is copied first into the temporary directory, under owner-named files
(:mod:`workbench.output.owned`: the next merge removes what a killed one left) deleted once copied.

**Bounded.** SQLite evaluates what a schema says, so the snapshot's schema is checked first
(:mod:`workbench.ledger.known_schema`), and everything over it runs under :func:`bounded`: SQLite's own
limits on that connection (one value at most :data:`MAX_VALUE` bytes, short statements, shallow
expressions), a progress handler that interrupts it past a deadline scaled by the file's size, and a
cap on SQLite's heap (``sqlite3_hard_heap_limit64``, process-wide, put back after; where the SQLite that
Python uses cannot be reached to set it, the other bounds hold alone).
"""
from __future__ import annotations

import ctypes
import os
import shutil
import sqlite3
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from workbench.errors import LedgerError
from workbench.output.owned import owned_name, reap_owned

MiB = 1 << 20
MAX_VALUE = 64 * MiB  # one string or blob: the largest column a ledger may hold is 1 MiB (limits.RESULT)
HEAP_CAP = 512 * MiB  # SQLite's whole heap while a merge checks and copies (a merge needs a few MiB)
DEADLINE_BASE_S = 60.0  # and one more second per DEADLINE_RATE bytes of the file
DEADLINE_RATE = 4 * MiB  # a whole merge of a 111 MB ledger: 2.1 s on the 2-core VM (52 MB/s; 2026-12-04)
COPY_PREFIX = ".wb-merge-"
_LIMITS = {  # what the workbench's own statements over a ledger need, with room to spare
    sqlite3.SQLITE_LIMIT_LENGTH: MAX_VALUE, sqlite3.SQLITE_LIMIT_SQL_LENGTH: 100_000,
    sqlite3.SQLITE_LIMIT_COLUMN: 100, sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 100,
    sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 4, sqlite3.SQLITE_LIMIT_VDBE_OP: 100_000,
    sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 8, sqlite3.SQLITE_LIMIT_ATTACHED: 0,
    sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 1, sqlite3.SQLITE_LIMIT_WORKER_THREADS: 0,
}


def limit(conn: sqlite3.Connection) -> None:
    """Put SQLite's per-connection limits (:data:`_LIMITS`) on ``conn``."""
    for category, value in _LIMITS.items():
        conn.setlimit(category, value)


def snapshot_ledger(source: Path, copy: sqlite3.Connection) -> None:
    """Copy ``source`` page by page into the open database ``copy`` without writing beside the source."""
    with _readable(source) as uri:
        try:
            src = sqlite3.connect(uri, uri=True)
            limit(src)
        except sqlite3.Error as exc:
            raise LedgerError(source, f"cannot open for merging: {exc}") from exc
        try:
            src.backup(copy)
        except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
            raise LedgerError(source, f"not a readable SQLite ledger: {exc}; nothing merged") from exc
        finally:
            src.close()


@contextmanager
def _readable(source: Path) -> Iterator[str]:
    """A URI that reads ``source`` (and the rows of its ``-wal``) and creates nothing beside it."""
    if not Path(f"{source}-wal").exists():
        yield f"{source.resolve().as_uri()}?immutable=1"
    elif Path(f"{source}-shm").exists():
        yield f"{source.resolve().as_uri()}?mode=ro"
    else:
        with _private_copy(source) as copied:
            yield f"{copied.as_uri()}?mode=ro"


@contextmanager
def _private_copy(source: Path) -> Iterator[Path]:
    """``source`` and its ``-wal`` copied to owner-named files in the temporary directory, removed after."""
    where = Path(tempfile.gettempdir())
    for suffix in (".sqlite", ".sqlite-wal", ".sqlite-shm"):
        reap_owned(where, COPY_PREFIX, suffix)
    copied = where / owned_name(COPY_PREFIX, ".sqlite")
    made: list[Path] = []
    try:
        for src, dst in ((source, copied), (Path(f"{source}-wal"), Path(f"{copied}-wal"))):
            made.append(dst)
            _copy_exclusive(src, dst)
        made.append(Path(f"{copied}-shm"))  # SQLite makes it when it opens the copy
        yield copied
    except OSError as exc:
        raise LedgerError(source, f"cannot copy it and its -wal file to {where} to read them: "
                                  f"{exc.strerror or exc}; nothing merged") from exc
    finally:
        for path in made:
            try:
                path.unlink()
            except FileNotFoundError:
                pass


def _copy_exclusive(src: Path, dst: Path) -> None:
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "wb") as out, open(src, "rb") as inp:
        shutil.copyfileobj(inp, out, MiB)


@contextmanager
def bounded(conn: sqlite3.Connection, shown: Path, nbytes: int) -> Iterator[None]:
    """Run the block with ``conn`` (a snapshot of ``shown``, ``nbytes`` long) under SQLite's limits, a
    deadline and a heap cap; running past either is one LedgerError naming ``shown``."""
    budget_s = DEADLINE_BASE_S + nbytes / DEADLINE_RATE
    deadline = time.monotonic() + budget_s
    late: list[bool] = []

    def past_deadline() -> int:
        if time.monotonic() > deadline:
            late.append(True)
            return 1
        return 0

    limit(conn)
    conn.set_progress_handler(past_deadline, 1000)
    try:
        with _heap_capped():
            yield
    except (LedgerError, sqlite3.Error, MemoryError) as exc:
        if late:
            raise LedgerError(shown, f"merging it took longer than {budget_s:.0f} s ({DEADLINE_BASE_S:g} s and "
                                     f"1 s per {DEADLINE_RATE // MiB} MiB of the file); nothing merged") from exc
        if isinstance(exc, MemoryError):
            raise LedgerError(shown, f"merging it needed more than {HEAP_CAP / MiB:g} MiB of SQLite's memory; "
                                     "nothing merged") from exc
        raise
    finally:
        conn.set_progress_handler(None, 0)


@contextmanager
def _heap_capped() -> Iterator[None]:
    """SQLite's heap capped at :data:`HEAP_CAP` (or a lower cap already set) for the block, the cap that
    was there put back after (:func:`heap_cap_reaches_sqlite` says whether the library reached is the
    one Python's sqlite3 uses)."""
    setter = _hard_heap_limit()
    if setter is None:
        yield
        return
    before = setter(-1)  # a negative argument only reads the limit
    cap = HEAP_CAP if before <= 0 else min(before, HEAP_CAP)
    setter(cap)
    try:
        yield
    finally:
        setter(before)


def heap_cap_reaches_sqlite() -> bool:
    """Whether the heap cap reaches the SQLite that Python's sqlite3 uses in this process."""
    setter = _hard_heap_limit()
    if setter is None:
        return False
    probe = sqlite3.connect(":memory:")
    before = setter(-1)
    try:
        setter(before - 1 if before > 1 else 1 << 40)
        return probe.execute("PRAGMA hard_heap_limit").fetchone()[0] == setter(-1)
    finally:
        setter(before)
        probe.close()


def _hard_heap_limit() -> Callable[[int], int] | None:
    """``sqlite3_hard_heap_limit64`` of the SQLite library mapped into this process, or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            paths = {line.split(None, 5)[-1].strip() for line in fh if "libsqlite3" in line}
    except OSError:
        return None
    if len(paths) != 1:  # none (Python's sqlite3 built in), or two copies: which is Python's is unknown
        return None
    try:
        function = ctypes.CDLL(paths.pop()).sqlite3_hard_heap_limit64
    except (OSError, AttributeError):
        return None
    function.restype, function.argtypes = ctypes.c_int64, [ctypes.c_int64]
    return function
