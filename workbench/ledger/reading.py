"""Opening a ledger to read it, changing nothing: no WAL switch, no table created, no upgrade.

A reading command (``ledger list``, ``show``, ``export``, a report) must work wherever ``sqlite3``
itself reads the file: on a read-only mount, on a full disk, beside another process that holds the
write lock. So the file is opened ``mode=ro``; where even that needs a write (a WAL ledger whose
``-shm`` index cannot be created: a read-only mount, a full disk) and no ``-wal`` file holds rows, it is
opened ``immutable=1``. (Like ``sqlite3 -readonly``, a read-only opening may leave SQLite's shared-memory
index and an empty ``-wal`` beside a WAL ledger; the ledger's own bytes never change.)
Before anything is read, the file is classified in one line: not SQLite, not a workbench ledger (an
empty file, another program's database), a version this workbench does not read, or an older ledger
that ``workbench ledger upgrade`` brings up to date.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from workbench.settings import defaults
from workbench.errors import LedgerError
from workbench.ledger.schema import CANNOT_READ, SCHEMA_VERSION, ledger_version, unreadable

UPGRADE_HINT = "run `workbench ledger upgrade --ledger {path}` (reading never changes a ledger)"


def read_version(path: Path) -> int:
    """The schema version of the workbench ledger at ``path``, read without changing anything."""
    if not path.is_file():
        raise LedgerError(path, "no ledger here; check --ledger or $WORKBENCH_LEDGER")
    conn = _checked(path)
    try:
        return ledger_version(conn, path)
    finally:
        conn.close()


def connect_readonly(path: Path) -> sqlite3.Connection:
    """``path`` opened read-only and checked to be a ledger of this workbench's schema version."""
    conn = _checked(path)
    version = ledger_version(conn, path)
    if version < SCHEMA_VERSION:
        conn.close()
        raise LedgerError(path, f"an older workbench ledger (schema version {version}; this workbench reads "
                                f"{SCHEMA_VERSION}): {UPGRADE_HINT.format(path=path)}")
    return conn


def _checked(path: Path) -> sqlite3.Connection:
    """A read-only connection to a workbench ledger of any version this workbench knows."""
    conn = _open(path, "mode=ro")
    try:
        ledger_version(conn, path)
    except LedgerError as exc:
        conn.close()
        if not exc.detail.startswith(CANNOT_READ) or _wal_holds_rows(path):
            raise
        conn = _open(path, "immutable=1")  # nothing in a -wal file: the main file is the whole ledger
        try:
            ledger_version(conn, path)
        except LedgerError:
            conn.close()
            raise
    return conn


def _open(path: Path, mode: str) -> sqlite3.Connection:
    timeout_s = defaults.ledger_busy_timeout()
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True, timeout=timeout_s,
                               isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {max(1, round(timeout_s * 1000))}")
        conn.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        raise LedgerError(path, unreadable(exc)) from None
    return conn


def _wal_holds_rows(path: Path) -> bool:
    try:
        return os.path.getsize(f"{path}-wal") > 0
    except OSError:
        return False
