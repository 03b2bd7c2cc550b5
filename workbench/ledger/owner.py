"""Which process records an attempt, so a later reader can tell a live ``running`` attempt from one
whose runner died (SIGKILL, OOM, power cut) and will never finish it.

A pid alone is not enough: pids are reused, and a process in another container or after a reboot may
carry the same number. The identity is the host, the kernel's boot id, the pid namespace, the pid and
the process's start time in clock ticks since boot; a reader judges only an owner on its own host, boot
and pid namespace, and calls it gone when no process with that pid and start time exists. Anything
else (another machine, an older ledger without an owner) stays ``unknown``: never reaped on a guess.
"""
from __future__ import annotations

import os
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from workbench.settings.defaults import host_id
from workbench.output.owned import boot_id as _boot_id, pid_ns as _pid_ns, start_ticks as _start_ticks
from workbench.ledger.schema import decode, now, transaction

RUNNING = "running"  # verdict of an attempt whose runner has not finished it (yet, or ever)
_OK_RUN = "error IS NULL AND load_s IS NOT NULL"
_MISSED = "(SELECT COUNT(*) FROM runs WHERE attempt_id = attempts.id AND cache_reached = 0)"

ALIVE, GONE, UNKNOWN = "alive", "gone", "unknown"


@dataclass(frozen=True)
class Owner:
    """The process recording an attempt (stored as ``environment.runner`` with the attempt)."""

    host: str
    boot_id: str
    pid_ns: str
    pid: int
    start_ticks: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Owner | None:
        """The owner recorded with an attempt, or None when there is none (or it is malformed)."""
        if not isinstance(data, Mapping):
            return None
        try:
            return cls(str(data["host"]), str(data["boot_id"]), str(data["pid_ns"]), int(data["pid"]),
                       int(data["start_ticks"]))
        except (KeyError, TypeError, ValueError):
            return None


def current_owner() -> Owner:
    """This process, as :class:`Owner`."""
    pid = os.getpid()
    return Owner(host_id(), _boot_id(), _pid_ns("self"), pid, _start_ticks(pid) or 0)


def owner_state(owner: Owner | None, here: Owner | None = None) -> str:
    """``alive``, ``gone`` or ``unknown`` (another host, boot or pid namespace; no owner recorded)."""
    if owner is None or not owner.boot_id:
        return UNKNOWN
    here = here or current_owner()
    if (owner.host, owner.pid_ns) != (here.host, here.pid_ns) or not here.boot_id:
        return UNKNOWN
    if owner.boot_id != here.boot_id:
        return GONE  # this machine rebooted since: every process of that boot is gone
    ticks = _start_ticks(owner.pid)
    if ticks is None or ticks != owner.start_ticks:
        return GONE  # no such pid, or a new process that reused it
    return ALIVE


def abandoned(conn: sqlite3.Connection) -> dict[str, Owner]:
    """Every ``running`` attempt whose owner is gone, with that owner (reads only)."""
    here, gone = current_owner(), {}
    rows = conn.execute("SELECT id, environment FROM attempts WHERE verdict = ?", (RUNNING,)).fetchall()
    for attempt_id, text in rows:
        try:
            env = decode(text)
        except ValueError:
            continue
        owner = Owner.from_json(env.get("runner") if isinstance(env, dict) else None)
        if owner_state(owner, here) == GONE:
            gone[attempt_id] = owner
    return gone


def reap_abandoned(conn: sqlite3.Connection, path: Path) -> list[str]:
    """Mark failed (interrupted) every ``running`` attempt whose owner is gone; returns their ids."""
    return [attempt_id for attempt_id, owner in abandoned(conn).items()
            if _mark_interrupted(conn, path, attempt_id, owner)]


# What an abandoned attempt reads once reaped: column → SQL over its row and runs. One definition for
# the writer (an UPDATE) and a read-only reader (a SELECT), so both say the same.
_INTERRUPTED = {
    "verdict": "'failed'", "auto_verdict": "'failed'", "finished": ":at", "verdict_reason": "'interrupted'",
    "n": f"(SELECT COUNT(*) FROM runs WHERE attempt_id = attempts.id AND {_OK_RUN})",
    "n_failed": f"(SELECT COUNT(*) FROM runs WHERE attempt_id = attempts.id AND NOT ({_OK_RUN}))",
    "notes": "CASE WHEN notes = '' THEN :note ELSE notes || char(10) || :note END",
    # a state some recorded run missed must not stay labelled as reached
    "cache": (f"CASE WHEN cache IN ('cold', 'warm') AND {_MISSED} > 0 THEN 'asis(unreachable: ' || cache"
              f" || ', ' || {_MISSED} || '/' || (SELECT COUNT(*) FROM runs WHERE attempt_id = attempts.id)"
              " || ' runs)' ELSE cache END"),
}


def _note(owner: Owner) -> str:
    return (f"interrupted: its runner (pid {owner.pid} on {owner.host}) is gone, killed or crashed "
            "before it finished; the runs it recorded are kept")


def interrupted_values(conn: sqlite3.Connection, attempt_id: str, owner: Owner) -> dict[str, Any]:
    """The columns of an abandoned attempt as reaping would write them, computed without writing."""
    exprs = ", ".join(f"{sql} AS {col}" for col, sql in _INTERRUPTED.items())
    cur = conn.execute(f"SELECT {exprs} FROM attempts WHERE id = :id",
                       {"at": now(), "note": _note(owner), "id": attempt_id})
    return dict(zip(_INTERRUPTED, cur.fetchone()))


def _mark_interrupted(conn: sqlite3.Connection, path: Path, attempt_id: str, owner: Owner) -> bool:
    """Close one abandoned attempt as failed, counting the runs it kept (unless another reader did)."""
    sets = ", ".join(f"{col} = {sql}" for col, sql in _INTERRUPTED.items())
    with transaction(conn, path) as c:
        cur = c.execute(f"UPDATE attempts SET {sets} WHERE id = :id AND verdict = :running",
                        {"at": now(), "note": _note(owner), "id": attempt_id, "running": RUNNING})
        return cur.rowcount == 1
