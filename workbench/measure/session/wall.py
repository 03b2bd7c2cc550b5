"""The wall a session's misses are held against, per turn and for the whole session.

A turn's misses are read from the disk (cold: most of the bytes its readers moved came from storage)
or from the page cache (warm). Cold, the wall is the disk's best read of the kind the readers use
(O_DIRECT or buffered); warm, the page cache read by as many threads as the session has lanes —
O_DIRECT readers always read the disk. The walls are those ``workbench ceilings`` recorded for this
machine; where none were, each turn says so (:data:`NO_WALL`) rather than a fraction of nothing.
A turn without misses has nothing to hold against a wall (:data:`NO_MISSES`).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Mapping, Sequence

from workbench.expert.session_records import SessionFacts, TurnRecord

if TYPE_CHECKING:
    from workbench.ledger import Ledger

NO_WALL = "no wall: run `workbench ceilings`"
NO_MISSES = "no misses"


def machine_walls(ledger: Ledger, model: str) -> dict[str, float]:
    """The walls recorded for this machine (whole-model reads only of ``model``); empty where none."""
    from workbench.measure.ceilings.bounds import host_ceilings

    try:
        return host_ceilings(ledger, model=model)
    except Exception:  # noqa: BLE001 - no ceilings table in an old ledger: no wall, not a failure
        return {}


def reads_state(disk_bytes: float, io_bytes: float) -> str:
    """``cold`` when at least half the bytes the readers moved came from the disk, else ``warm``."""
    return "cold" if io_bytes and disk_bytes >= io_bytes / 2 else "warm"


def wall_for(walls: Mapping[str, float], state: str, facts: SessionFacts) -> tuple[str, float] | None:
    """(name, GB/s) of the wall reads of ``state`` by the session's lanes are held against."""
    from workbench.measure.ceilings.bounds import read_wall

    return read_wall(walls, state, facts.lanes, facts.reader.startswith("direct")) if walls else None


def turn_wall(walls: Mapping[str, float], record: TurnRecord, facts: SessionFacts) -> TurnRecord:
    """``record`` with its wall: name, GB/s, its misses' staged GB/s over it, or why there is none."""
    if not record.misses or record.read_busy_s <= 0 or record.staged_gbps <= 0:
        return dataclasses.replace(record, wall_note=NO_MISSES)
    state = reads_state(record.disk_bytes_per_token * record.tokens, record.io_bytes)
    wall = wall_for(walls, state, facts)
    if wall is None or wall[1] <= 0:
        return dataclasses.replace(record, wall_note=NO_WALL)
    return dataclasses.replace(record, wall_name=wall[0], wall_gbps=wall[1],
                               staged_of_wall=record.staged_gbps / wall[1], wall_note="")


def session_wall(walls: Mapping[str, float], records: Sequence[TurnRecord],
                 facts: SessionFacts | None) -> tuple[str, float] | None:
    """The whole session's wall: cold when most of its readers' bytes came from the disk."""
    if not records or facts is None:
        return None
    disk = sum(r.disk_bytes_per_token * r.tokens for r in records)
    return wall_for(walls, reads_state(disk, sum(r.io_bytes for r in records)), facts)


def wall_text(record: TurnRecord) -> str:
    """``97% of cold_read_direct_4t (1.40 GB/s)``, or why the turn has no fraction."""
    if record.staged_of_wall is None:
        return record.wall_note or NO_WALL
    return f"{record.staged_of_wall:.0%} of {record.wall_name} ({record.wall_gbps:.2f} GB/s)"
