"""Bounds on what a ledger from elsewhere may hold before it is merged: text sizes and times.

This workbench never writes a 30 MB hypothesis or a run dated next year, so a merged ledger may not
either: each text column has a size bound (in bytes, checked in SQL before any value is loaded), and no
time may lie later than now plus :data:`MAX_CLOCK_SKEW_S` (another machine's clock may run a little
ahead; a row dated further ahead would sort after, and outrank, everything recorded here until then).
A time must also be written as this workbench writes one (UTC, ``2026-12-02T03:40:00.123456+00:00``):
the ledger orders rows by the text, so a time in another ISO 8601 form that Python still reads —
``20261201T000000`` (basic), ``2026-W48-1`` (week date), ``…T17:00:00+14:00`` (another offset) — would
sort after everything recorded here while its instant lies in the past.
"""
from __future__ import annotations

import re
import sqlite3
from datetime import datetime, timedelta, timezone
from typing import Iterable

KiB = 1 << 10
TIME_FORM = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00")  # schema.now()'s, sortable as text
MAX_CLOCK_SKEW_S = 300.0
NAME = 256  # ids, hosts, strategies, verdicts, hashes, cache labels' short forms
PATH = 4 * KiB  # PATH_MAX
PROSE = 64 * KiB  # hypotheses, notes, descriptions, errors: far more than anyone types
JSON = 256 * KiB  # environments, parameters, phases
RESULT = 1024 * KiB  # a run's whole worker report (an engine's phase lines included)

_BY_COLUMN = {
    "label": 4 * KiB, "cache": 4 * KiB, "file_path": PATH, "binary_path": 4 * PATH,
    "hypothesis": PROSE, "notes": PROSE, "description": PROSE, "error": PROSE, "note": PROSE,
    "verdict_reason": PROSE, "params": JSON, "device_info": JSON, "environment": JSON, "engaged": JSON,
    "phases": JSON, "detail": JSON, "extra": JSON, "resident_files": JSON, "result": RESULT,
}


def max_bytes(column: str) -> int:
    """The most bytes a text column of a merged ledger may hold."""
    return _BY_COLUMN.get(column, NAME)


def oversized(conn: sqlite3.Connection, table: str, columns: Iterable[str]) -> Iterable[str]:
    """A problem line for each column of ``table`` holding a value larger than its bound (the first
    such row), found without loading any value."""
    for column in columns:
        limit = max_bytes(column)
        row = conn.execute(f"SELECT id, length(CAST({column} AS BLOB)) FROM {table}"
                           f" WHERE length(CAST({column} AS BLOB)) > ? LIMIT 1", (limit,)).fetchone()
        if row is not None:
            yield (f"{table}.{column} holds {row[1]:,} bytes, more than the {limit:,} this workbench "
                   f"allows (row id {str(row[0])[:40]!r})")


def future_problem(value: datetime) -> str | None:
    """Why a time is refused ('too far in the future'), or None."""
    when = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    latest = datetime.now(timezone.utc) + timedelta(seconds=MAX_CLOCK_SKEW_S)
    if when > latest:
        return f"is in the future (more than {MAX_CLOCK_SKEW_S:g} s after now)"
    return None


def time_problem(value: object) -> str | None:
    """Why a merged time is refused (not this workbench's form, unreadable, too far in the future), or None."""
    if not isinstance(value, str) or not TIME_FORM.fullmatch(value):
        return ("is not a UTC time as this workbench writes it (YYYY-MM-DDTHH:MM:SS.ffffff+00:00; rows are "
                "ordered by this text)")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return "is not a valid time"
    return future_problem(when)
