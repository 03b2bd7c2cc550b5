"""The ledger's SQLite schema, connection settings and transaction helper.

WAL lets readers run beside one writer; ``busy_timeout`` makes a second writer wait instead of
failing (for :func:`workbench.settings.defaults.ledger_busy_timeout`, 60 s unless set); every write is one short
``BEGIN IMMEDIATE`` transaction, so several processes (two sweeps, a notebook) can record at once and a
crash loses at most the row being written.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from workbench.settings import defaults
from workbench.errors import LedgerError

SCHEMA_VERSION = 3
CANNOT_READ = "cannot read the ledger"  # how a read failure that is not about the file's content begins

COLUMNS: dict[str, tuple[str, ...]] = {
    "campaigns": ("id", "name", "description", "created"),
    "attempts": (
        "id", "host", "campaign_id", "label", "hypothesis", "strategy", "params", "device",
        "device_info", "file_path", "file_size", "file_hash", "cache", "environment", "n", "n_failed",
        "median_s", "min_s", "max_s", "spread_pct", "gbps", "stable", "ceiling_name", "ceiling_gbps",
        "baseline_id", "speedup", "verdict", "auto_verdict", "notes", "created", "finished",
        "kind", "ci_low", "ci_high", "verdict_reason", "binary_path", "binary_hash",
    ),
    "runs": (
        "id", "attempt_id", "position", "pid", "load_s", "wall_s", "bytes", "resident_before",
        "cache_state", "cache_reached", "verified", "engaged", "phases", "minflt", "majflt",
        "lock_wait_s", "error", "result", "created", "resident_files",
    ),
    "ceilings": ("id", "host", "name", "gbps", "detail", "measured_at"),
    "verdict_history": ("id", "attempt_id", "old", "new", "note", "at"),
    "turns": (
        "id", "attempt_id", "turn", "tokens", "bytes_read", "hits", "misses", "evictions", "minflt",
        "majflt", "accounted_bytes", "actual_anon_bytes", "unreleased_pages", "seconds",
        "tokens_per_s", "extra", "created",
    ),
}

ATTEMPT_KINDS = ("strategy", "external", "session")  # what an attempt measured (attempts.kind)
ADDED_TABLES: dict[int, tuple[str, ...]] = {2: ("turns",)}

# Columns each version added, as (table, column, SQL type and default): a ledger of an older version
# gets them by ALTER TABLE when it is opened (one way: an older workbench then refuses it by version).
#   kind: what an attempt measured — a strategy load, an external engine, a long expert session;
#   ci_low/ci_high/verdict_reason: the speedup's confidence interval and why the verdict is what it is;
#   binary_path/binary_hash: the executable an external engine ran, hashed like the model file;
#   resident_files (3): a model is a set of files — each file's resident fraction before the run (JSON
#   object, file name → fraction; ``resident_before`` is the whole model's). Older runs read back {}.
ADDED_COLUMNS: dict[int, tuple[tuple[str, str, str], ...]] = {
    2: (
        ("attempts", "kind", "TEXT NOT NULL DEFAULT 'strategy'"),
        ("attempts", "ci_low", "REAL"),
        ("attempts", "ci_high", "REAL"),
        ("attempts", "verdict_reason", "TEXT NOT NULL DEFAULT ''"),
        ("attempts", "binary_path", "TEXT"),
        ("attempts", "binary_hash", "TEXT"),
    ),
    3: (("runs", "resident_files", "TEXT"),),
}

DDL = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version SELECT {version} WHERE NOT EXISTS (SELECT 1 FROM schema_version);
CREATE TABLE IF NOT EXISTS ledger_info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO ledger_info SELECT 'ledger_id', lower(hex(randomblob(16)))
    WHERE NOT EXISTS (SELECT 1 FROM ledger_info WHERE key = 'ledger_id');
CREATE TABLE IF NOT EXISTS campaigns (
    id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, description TEXT NOT NULL DEFAULT '',
    created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS attempts (
    id TEXT PRIMARY KEY, host TEXT NOT NULL, campaign_id TEXT NOT NULL REFERENCES campaigns(id),
    label TEXT NOT NULL DEFAULT '', hypothesis TEXT NOT NULL DEFAULT '', strategy TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '{{}}', device TEXT, device_info TEXT, file_path TEXT,
    file_size INTEGER, file_hash TEXT, cache TEXT, environment TEXT, n INTEGER, n_failed INTEGER,
    median_s REAL, min_s REAL, max_s REAL, spread_pct REAL, gbps REAL, stable INTEGER,
    ceiling_name TEXT, ceiling_gbps REAL, baseline_id TEXT, speedup REAL, verdict TEXT NOT NULL,
    auto_verdict TEXT, notes TEXT NOT NULL DEFAULT '', created TEXT NOT NULL, finished TEXT,
    kind TEXT NOT NULL DEFAULT 'strategy', ci_low REAL, ci_high REAL,
    verdict_reason TEXT NOT NULL DEFAULT '', binary_path TEXT, binary_hash TEXT);
CREATE INDEX IF NOT EXISTS attempts_campaign ON attempts(campaign_id);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, attempt_id TEXT NOT NULL REFERENCES attempts(id), position INTEGER,
    pid INTEGER, load_s REAL, wall_s REAL, bytes INTEGER, resident_before REAL, cache_state TEXT,
    cache_reached INTEGER, verified INTEGER, engaged TEXT, phases TEXT, minflt INTEGER,
    majflt INTEGER, lock_wait_s REAL, error TEXT, result TEXT, created TEXT NOT NULL, resident_files TEXT);
CREATE INDEX IF NOT EXISTS runs_attempt ON runs(attempt_id);
CREATE TABLE IF NOT EXISTS ceilings (
    id TEXT PRIMARY KEY, host TEXT NOT NULL, name TEXT NOT NULL, gbps REAL NOT NULL,
    detail TEXT, measured_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS verdict_history (
    id TEXT PRIMARY KEY, attempt_id TEXT NOT NULL REFERENCES attempts(id), old TEXT,
    new TEXT NOT NULL, note TEXT NOT NULL DEFAULT '', at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS turns (
    id TEXT PRIMARY KEY, attempt_id TEXT NOT NULL REFERENCES attempts(id), turn INTEGER NOT NULL,
    tokens INTEGER, bytes_read INTEGER, hits INTEGER, misses INTEGER, evictions INTEGER,
    minflt INTEGER, majflt INTEGER, accounted_bytes INTEGER, actual_anon_bytes INTEGER,
    unreleased_pages INTEGER, seconds REAL, tokens_per_s REAL, extra TEXT, created TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS turns_attempt ON turns(attempt_id);
"""


def resolve_path(path: str | os.PathLike[str] | None) -> Path:
    """The argument, else :func:`workbench.settings.defaults.ledger_path` (``$WORKBENCH_LEDGER``, else
    ``ledger.sqlite`` in the data root)."""
    return Path(path).expanduser() if path is not None else defaults.ledger_path()


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating if missing) the ledger at ``path`` with WAL and the current schema."""
    timeout_s = defaults.ledger_busy_timeout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise LedgerError(path, f"cannot open the ledger: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {max(1, round(timeout_s * 1000))}")
        _refuse_foreign(conn, path)  # before the WAL switch: another program's database stays as it was
        _retry_locked(lambda: conn.execute("PRAGMA journal_mode = WAL"))
        conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable across process crashes
        conn.execute("PRAGMA foreign_keys = ON")
        with transaction(conn, path):
            for statement in DDL.format(version=SCHEMA_VERSION).split(";"):
                if statement.strip():
                    conn.execute(statement)
            check_version(conn, path)
            migrate(conn)
    except sqlite3.Error as exc:
        conn.close()
        raise LedgerError(path, f"not a usable ledger: {exc}{_unwritable(path)}") from exc
    except LedgerError:
        conn.close()
        raise
    return conn


def _refuse_foreign(conn: sqlite3.Connection, path: Path) -> None:
    """An SQLite file that holds tables but no ledger is another program's: never made into a ledger."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if tables and "schema_version" not in tables:
        raise LedgerError(path, _foreign(path, tables))


FULL_BELOW = 1 << 20  # free bytes under which a file system counts as full for the ledger's -wal/-shm


def _unwritable(path: Path) -> str:
    """Why SQLite cannot write there, when the reason is the file system rather than the file."""
    for place in (path.parent, path):
        if place.exists() and not os.access(place, os.W_OK):
            what = "directory" if place.is_dir() else "file"
            return (f" (the ledger's {what} {place} is read-only; the ledger needs to write itself and "
                    "its -wal and -shm files beside it)")
    try:  # SQLite words a full disk as "disk I/O error" when it fails to grow its -wal or -shm file
        fs = os.statvfs(path.parent)
    except OSError:
        return ""
    free = fs.f_bavail * fs.f_frsize
    if free < FULL_BELOW:
        return (f" (the file system holding {path.parent} is full: {free:,} bytes free; the ledger needs "
                "room for itself and its -wal and -shm files)")
    return ""


def check_version(conn: sqlite3.Connection, path: Path, schema: str = "main") -> None:
    """Refuse a ledger written by a newer workbench (its columns may mean something else), or a file
    that is no workbench ledger."""
    ledger_version(conn, path, schema)


def ledger_version(conn: sqlite3.Connection, path: Path, schema: str = "main") -> int:
    """The schema version of a workbench ledger, or a LedgerError saying in one line what the file is."""
    try:
        tables = {r[0] for r in conn.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table'")}
        if "schema_version" not in tables:
            raise LedgerError(path, _foreign(path, tables))
        values = [r[0] for r in conn.execute(f"SELECT version FROM {schema}.schema_version")]
    except sqlite3.DatabaseError as exc:
        raise LedgerError(path, unreadable(exc)) from None
    if len(values) != 1 or not isinstance(values[0], int) or isinstance(values[0], bool):
        shown = ", ".join(repr(v)[:20] for v in values[:3]) or "none"
        raise LedgerError(path, f"not a workbench ledger: its schema version is {shown}, not one whole number")
    if values[0] > SCHEMA_VERSION or values[0] < 1:
        raise LedgerError(path, f"ledger schema version {values[0]}; this workbench reads {SCHEMA_VERSION}")
    return values[0]


def _foreign(path: Path, tables: set[str]) -> str:
    if not tables and os.path.getsize(path) == 0:
        return "not a workbench ledger: an empty file (only commands that record create a ledger)"
    names = ", ".join(sorted(tables)[:5]) + (" …" if len(tables) > 5 else "")
    return f"not a workbench ledger: an SQLite database without a schema_version table (tables: {names or 'none'})"


def unreadable(exc: sqlite3.Error) -> str:
    text = str(exc)
    if "not a database" in text:
        return "not a workbench ledger: not an SQLite database"
    return f"{CANNOT_READ}: {text}"


def columns_at(version: int) -> dict[str, tuple[str, ...]]:
    """The tables and columns a ledger of schema ``version`` has (an older one lacks later additions)."""
    later_tables = {t for v, tables in ADDED_TABLES.items() if v > version for t in tables}
    later_columns = {(t, c) for v, cols in ADDED_COLUMNS.items() if v > version for t, c, _ in cols}
    return {table: tuple(c for c in cols if (table, c) not in later_columns)
            for table, cols in COLUMNS.items() if table not in later_tables}


def migrate(conn: sqlite3.Connection) -> None:
    """Bring an older ledger to :data:`SCHEMA_VERSION` in place (inside the caller's transaction)."""
    found = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
    for version in range(found + 1, SCHEMA_VERSION + 1):
        for table, column, decl in ADDED_COLUMNS.get(version, ()):
            if column not in table_columns(conn, table):
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
    if found < SCHEMA_VERSION:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))


def table_columns(conn: sqlite3.Connection, table: str, schema: str = "main") -> tuple[str, ...]:
    """The columns ``table`` has in the attached database ``schema`` (older ledgers have fewer)."""
    return tuple(row[1] for row in conn.execute(f"PRAGMA {schema}.table_info({table})"))


@contextmanager
def transaction(conn: sqlite3.Connection, path: Path) -> Iterator[sqlite3.Connection]:
    """One short write transaction; taken IMMEDIATE so writers queue on the lock, not deadlock."""
    try:
        _retry_locked(lambda: conn.execute("BEGIN IMMEDIATE"))
    except sqlite3.Error as exc:
        waited = " (waited out the busy timeout)" if "locked" in str(exc) else ""
        raise LedgerError(path, f"cannot start a write: {exc}{waited}") from exc
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise LedgerError(path, f"write failed: {exc}") from exc
        raise


def _retry_locked(call: Any, attempts: int = 20) -> Any:
    # busy_timeout covers ordinary lock waits; a WAL switch racing another opener can still report
    # "locked" at once, so retry briefly rather than fail the whole run — but never past the busy
    # timeout in all: a lock held longer than that is an error the caller must see.
    deadline = time.monotonic() + defaults.ledger_busy_timeout()
    for i in range(attempts):
        try:
            return call()
        except sqlite3.OperationalError as exc:
            pause = 0.05 * (i + 1)
            if "locked" not in str(exc) or i == attempts - 1 or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)


def new_id() -> str:
    """A globally unique row id (uuid4 hex), so ledgers from several machines merge cleanly."""
    return uuid.uuid4().hex


def now() -> str:
    """UTC time, ISO 8601 with microseconds: sorts as text and reads without a time zone guess."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def encode(value: Any) -> str | None:
    """JSON text for a dict/list column (None stays NULL)."""
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def decode(text: str | None) -> Any:
    """The Python value of a JSON column."""
    return None if text is None else json.loads(text)


def tristate(value: bool | None) -> int | None:
    """Store True/False/None (e.g. ``verified``) as 1/0/NULL."""
    return None if value is None else int(bool(value))
