"""Merge another machine's ledger into this one: several test rigs, one history.

Rows carry globally unique ids, so a merge inserts the rows it does not have and nothing else;
merging the same file twice adds nothing. Campaigns are matched by name (two rigs that both ran
"cold-start" share one campaign). Two things are reconciled rather than only inserted, because
a copy taken mid-campaign would otherwise freeze: an attempt still ``running`` here that the other
ledger has finished takes the finished row, and an attempt's verdict follows the latest entry of
its (merged) verdict history.
"""
from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from workbench.errors import LedgerError
from workbench.ledger.schema import COLUMNS, table_columns, transaction
from workbench.ledger.validate import check_ledger, snapshot_ledger

_PLAIN_TABLES = ("runs", "ceilings", "verdict_history", "turns")


def merge_into(conn: sqlite3.Connection, own_path: Path, other_path: Path) -> dict[str, int]:
    """Import ``other_path`` into the open ledger ``conn``; returns rows added per table.

    The other file is snapshotted and checked whole first (:mod:`workbench.ledger.validate`); any
    problem is one LedgerError and this ledger is not written at all.
    """
    if not other_path.is_file():
        raise LedgerError(other_path, "no such ledger file")
    if other_path.resolve() == own_path.resolve():
        raise LedgerError(other_path, "cannot merge a ledger into itself")
    with tempfile.TemporaryDirectory(prefix="wb-merge-") as tmp:
        copy = Path(tmp) / "other.sqlite"
        snapshot_ledger(other_path, copy)
        check_ledger(copy, other_path, conn)
        try:
            conn.execute("ATTACH DATABASE ? AS other", (str(copy),))
        except sqlite3.Error as exc:
            raise LedgerError(other_path, f"cannot open for merging: {exc}") from exc
        try:
            with transaction(conn, own_path):
                return _copy_rows(conn)
        finally:
            conn.execute("DETACH DATABASE other")


def _copy_rows(conn: sqlite3.Connection) -> dict[str, int]:
    counts = {"campaigns": _insert_campaigns(conn), "attempts": _insert_attempts(conn)}
    counts["attempts_finished"] = _take_finished(conn)
    for table in _PLAIN_TABLES:
        cols = ", ".join(_shared_columns(conn, table))
        if not cols:  # a table the other (older) ledger does not have
            counts[table] = 0
            continue
        cur = conn.execute(f"INSERT OR IGNORE INTO main.{table} ({cols}) SELECT {cols} FROM other.{table}")
        counts[table] = cur.rowcount
    counts["verdicts_updated"] = _follow_history(conn)
    return counts


def _shared_columns(conn: sqlite3.Connection, table: str) -> tuple[str, ...]:
    """Our columns that the other ledger has too: an older ledger lacks the newer ones, which then
    take their defaults here."""
    theirs = set(table_columns(conn, table, "other"))
    return tuple(c for c in COLUMNS[table] if c in theirs)


def _insert_campaigns(conn: sqlite3.Connection) -> int:
    cols = ", ".join(COLUMNS["campaigns"])
    cur = conn.execute(
        f"INSERT OR IGNORE INTO main.campaigns ({cols}) SELECT {cols} FROM other.campaigns"
        " WHERE name NOT IN (SELECT name FROM main.campaigns)"
    )
    return cur.rowcount


def _mapped_attempt_columns(conn: sqlite3.Connection, alias: str) -> str:
    """The other ledger's attempt columns with its campaign id replaced by ours of the same name."""
    mapped = (
        f"(SELECT m.id FROM main.campaigns m JOIN other.campaigns o ON o.name = m.name"
        f" WHERE o.id = {alias}.campaign_id)"
    )
    return ", ".join(mapped if c == "campaign_id" else f"{alias}.{c}" for c in _shared_columns(conn, "attempts"))


def _insert_attempts(conn: sqlite3.Connection) -> int:
    cols = ", ".join(_shared_columns(conn, "attempts"))
    cur = conn.execute(
        f"INSERT OR IGNORE INTO main.attempts ({cols}) SELECT {_mapped_attempt_columns(conn, 'a')} FROM other.attempts a"
    )
    return cur.rowcount


def _take_finished(conn: sqlite3.Connection) -> int:
    cols = ", ".join(_shared_columns(conn, "attempts"))
    cur = conn.execute(
        f"UPDATE main.attempts SET ({cols}) = (SELECT {_mapped_attempt_columns(conn, 'o')} FROM other.attempts o"
        " WHERE o.id = main.attempts.id)"
        " WHERE verdict = 'running' AND id IN (SELECT id FROM other.attempts WHERE verdict != 'running')"
    )
    return cur.rowcount


def _follow_history(conn: sqlite3.Connection) -> int:
    latest = (
        "(SELECT h.new FROM main.verdict_history h WHERE h.attempt_id = main.attempts.id"
        " ORDER BY h.at DESC, h.id DESC LIMIT 1)"
    )
    cur = conn.execute(
        f"UPDATE main.attempts SET verdict = {latest}"
        f" WHERE id IN (SELECT attempt_id FROM main.verdict_history) AND verdict IS NOT {latest}"
    )
    return cur.rowcount
