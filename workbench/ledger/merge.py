"""Merge another machine's ledger into this one: several test rigs, one history.

A merge only adds. It brings the attempts this ledger does not hold, each with its own runs, turns and
verdict history, and the ceilings of other machines; nothing it brings attaches to, outranks or
rewrites a row this ledger already holds:

- a run, turn or verdict-history row naming an attempt this ledger already holds is not taken (such a
  row could add a fake run to a local attempt, or outrank a local verdict with a later date);
- an attempt this ledger holds stays exactly as it is, even ``running`` here and finished there
  (``attempts_running_here``: merge that later state into a ledger that does not hold the attempt yet);
- nothing it says about this machine is taken: no attempt recorded under any name this machine goes by
  (``$WORKBENCH_HOST`` and its own hostname + machine-id; in any case, with spaces around)
  (``skipped_attempts``: it would pass for a local measurement, and as the latest of its configuration
  outrank the local one in the PR table) and no ceiling of it (it would bound every later result). Two
  ledgers of one machine merge when each names its rig (``WORKBENCH_HOST``);
- campaigns are matched by name, and a campaign's description here is kept.

Rows carry globally unique ids, so merging the same file twice adds nothing. The other file is first
copied page by page into a private temporary database (SQLite unlinks it as soon as it is opened, so a
merge killed at any point leaves no copy behind; nothing is created beside the file:
:mod:`workbench.ledger.foreign`) and checked whole there (:mod:`workbench.ledger.validate`: its schema
first, before SQLite evaluates anything in it), every statement under SQLite's limits, a deadline and a
heap cap; any problem is one LedgerError and this ledger is not written at all.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Iterable

from workbench.settings.defaults import host_id, machine_host_id
from workbench.errors import LedgerError
from workbench.ledger.schema import COLUMNS, table_columns, transaction
from workbench.ledger.foreign import bounded, snapshot_ledger
from workbench.ledger.validate import check_ledger

CHILD_TABLES = ("runs", "turns", "verdict_history")  # rows that belong to one attempt (attempt_id)


def merge_into(conn: sqlite3.Connection, own_path: Path, other_path: Path) -> dict[str, int]:
    """Import ``other_path`` into the open ledger ``conn``; returns rows added per table and rows not
    taken (``skipped_*``, ``attempts_running_here``)."""
    if not other_path.is_file():
        raise LedgerError(other_path, "no such ledger file")
    if own_path.exists() and os.path.samefile(other_path, own_path):
        raise LedgerError(other_path, "cannot merge a ledger into itself")
    snapshot = sqlite3.connect("", isolation_level=None)  # a private temporary database, unlinked at once
    try:
        with bounded(snapshot, other_path, other_path.stat().st_size):
            snapshot_ledger(other_path, snapshot)
            check_ledger(snapshot, other_path, conn)
            with transaction(conn, own_path):
                return _copy_rows(conn, snapshot)
    finally:
        snapshot.close()


def _copy_rows(conn: sqlite3.Connection, other: sqlite3.Connection) -> dict[str, int]:
    campaign_ids, counts = _campaigns(conn, other)
    ours = {r[0] for r in conn.execute("SELECT id FROM attempts")}
    theirs = _rows(other, "attempts", _shared(conn, other, "attempts"))
    here = this_machine()
    new = [a for a in theirs if a["id"] not in ours and _name(a["host"]) not in here]
    counts["skipped_attempts"] = sum(a["id"] not in ours and _name(a["host"]) in here for a in theirs)
    for attempt in new:
        attempt["campaign_id"] = campaign_ids[attempt["campaign_id"]]
    counts["attempts"] = _insert(conn, "attempts", new)
    finished_there = {a["id"] for a in theirs if a["verdict"] != "running"}
    counts["attempts_running_here"] = sum(attempt_id in finished_there for (attempt_id,) in conn.execute(
        "SELECT id FROM attempts WHERE verdict = 'running'"))
    brought = {a["id"] for a in new}
    for table in CHILD_TABLES:
        rows = _rows(other, table, _shared(conn, other, table))
        held = {r[0] for r in conn.execute(f"SELECT id FROM {table}")}
        counts[table] = _insert(conn, table, [r for r in rows if r["attempt_id"] in brought])
        # new rows for an attempt held here would attach to it: not taken (a row held already is no news)
        counts[f"skipped_{table}"] = sum(r["attempt_id"] in ours and r["id"] not in held for r in rows)
    ceilings = _rows(other, "ceilings", _shared(conn, other, "ceilings"))
    counts["ceilings"] = _insert(conn, "ceilings", [c for c in ceilings if _name(c["host"]) not in here])
    counts["skipped_ceilings"] = sum(_name(c["host"]) in here for c in ceilings)
    return counts


def this_machine() -> set[str]:
    """Every name this machine goes by (``$WORKBENCH_HOST`` and its own hostname + machine-id, which it
    records under when the variable is unset), as :func:`_name` compares them."""
    return {_name(host_id()), _name(machine_host_id())}


def _name(host: str) -> str:
    """A host name as compared: case and surrounding spaces do not make another machine on screen."""
    return str(host).strip().casefold()


def _campaigns(conn: sqlite3.Connection, other: sqlite3.Connection) -> tuple[dict[str, str], dict[str, int]]:
    """Their campaign ids mapped to ours of the same name, inserting the campaigns we lack."""
    by_name = dict(conn.execute("SELECT name, id FROM campaigns").fetchall())
    theirs = _rows(other, "campaigns", COLUMNS["campaigns"])
    new = [c for c in theirs if c["name"] not in by_name]
    added = _insert(conn, "campaigns", new)
    by_name.update({c["name"]: c["id"] for c in new})
    return {c["id"]: by_name[c["name"]] for c in theirs}, {"campaigns": added}


def _shared(conn: sqlite3.Connection, other: sqlite3.Connection, table: str) -> tuple[str, ...]:
    """Our columns that the other ledger has too: an older ledger lacks the newer ones, which then take
    their defaults here."""
    theirs = set(table_columns(other, table))
    return tuple(c for c in COLUMNS[table] if c in theirs)


def _rows(other: sqlite3.Connection, table: str, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    if not columns:  # a table the other (older) ledger does not have
        return []
    cur = other.execute(f"SELECT {', '.join(columns)} FROM {table}")
    return [dict(zip(columns, row)) for row in cur]


def _insert(conn: sqlite3.Connection, table: str, rows: Iterable[dict[str, Any]]) -> int:
    """Insert rows whose id is new here; returns how many went in."""
    added = 0
    for row in rows:
        names = ", ".join(row)
        cur = conn.execute(f"INSERT OR IGNORE INTO {table} ({names}) VALUES ({', '.join('?' * len(row))})",
                           tuple(row.values()))
        added += cur.rowcount
    return added
