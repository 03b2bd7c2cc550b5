"""What a long session records: one :class:`TurnRecord` per turn and a :class:`SessionReport`.

``SessionReport.to_json()`` is the document ``workbench session --json`` prints, exactly the issue's
shape: ``{"turns": [...], "summary": {...}}`` where each turn has the keys :data:`ISSUE_TURN_KEYS`
(``turn, tokens, bytes_read, hits, misses, evictions, minflt, majflt, accounted_bytes,
actual_anon_bytes, unreleased_pages, seconds, tokens_per_s``) in that order and nothing else. A turn's
two further measurements, ``shift_copy_bytes`` and ``resident_bytes`` (mincore over the cache's own
reservations), are in the summary as per-turn lists (``summary["per_turn"]``), and in
:meth:`TurnRecord.to_json`, which is what the ledger and the session worker carry.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, fields
from typing import Any, Sequence


ISSUE_TURN_KEYS = ("turn", "tokens", "bytes_read", "hits", "misses", "evictions", "minflt", "majflt",
                   "accounted_bytes", "actual_anon_bytes", "unreleased_pages", "seconds", "tokens_per_s")
TURN_EXTRAS = ("shift_copy_bytes", "resident_bytes")


@dataclass(frozen=True)
class TurnRecord:
    """One turn of ``tokens`` decode tokens. Counts are this turn's; memory is as the turn ended.

    ``hits``/``misses``/``evictions`` count cache entries (one expert of one blob); ``bytes_read`` is
    payload staged from the file; ``minflt``/``majflt`` are getrusage deltas over the turn;
    ``accounted_bytes`` the pages live entries touch; ``actual_anon_bytes`` the process's anonymous
    memory (smaps_rollup, -1 where unreadable); ``unreleased_pages`` pages the cache committed and no
    live entry touches; ``resident_bytes`` what mincore finds resident in the cache's reservations.
    """

    turn: int
    tokens: int
    bytes_read: int
    hits: int
    misses: int
    evictions: int
    minflt: int
    majflt: int
    accounted_bytes: int
    actual_anon_bytes: int
    unreleased_pages: int
    seconds: float
    tokens_per_s: float
    shift_copy_bytes: int
    resident_bytes: int

    def to_json(self) -> dict[str, Any]:
        """Every field (the issue's keys first): what the ledger's turns rows and the worker carry."""
        return asdict(self)

    def issue_json(self) -> dict[str, Any]:
        """Exactly the issue's keys, in its order: one element of ``session --json``'s ``turns``."""
        return {key: getattr(self, key) for key in ISSUE_TURN_KEYS}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TurnRecord":
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class SessionFacts:
    """How the session ran: what was asked, what engaged, and from where the routing came."""

    placement: str
    placement_report: str  # "odirect-zero-copy ON — n/m layer buffers placed" (reason when not all)
    placement_state: str  # ON | PARTIAL | INERT
    reader: str
    reader_note: str  # why the reader is not the one asked for ("" when it is)
    boundary_release: str
    policy: str
    cache_bytes: int
    reserved_bytes: int
    experts_per_token: int
    trace: str  # the trace's source
    trace_note: str  # e.g. a file trace replayed because the session is longer
    device: str
    verify: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "SessionFacts":
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class SessionSummary:
    """Totals over the turns, and the numbers that tell a leak from a cost."""

    turns: int
    tokens: int
    bytes_read: int
    hits: int
    misses: int
    hit_rate: float
    evictions: int
    minflt: int
    majflt: int
    shift_copy_bytes: int
    unreleased_pages_first: int
    unreleased_pages_last: int
    unreleased_pages_per_turn: float  # growth from the first turn to the last, per turn
    resident_minus_accounted_bytes: int  # last turn: what the cache failed to give back, measured
    anon_minus_accounted_growth_bytes: int  # (actual_anon - accounted), last turn minus first
    tokens_per_s_median: float
    tokens_per_s_min: float
    tokens_per_s_max: float
    verified_slices: int
    facts: SessionFacts

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["facts"] = self.facts.to_json()
        return out


@dataclass(frozen=True)
class SessionReport:
    """Every turn and the summary: the session's one typed result."""

    turns: tuple[TurnRecord, ...]
    summary: SessionSummary

    def to_json(self) -> dict[str, Any]:
        """``session --json``: turns with exactly the issue's keys; the other per-turn numbers in the summary."""
        summary = self.summary.to_json()
        summary["per_turn"] = {key: [getattr(t, key) for t in self.turns] for key in TURN_EXTRAS}
        return {"turns": [t.issue_json() for t in self.turns], "summary": summary}


def summarize(records: Sequence[TurnRecord], facts: SessionFacts, verified_slices: int = 0) -> SessionSummary:
    """Totals and leak indicators over ``records`` (at least one turn)."""
    if not records:
        raise ValueError("a session summary needs at least one turn")
    first, last = records[0], records[-1]
    hits, misses = sum(r.hits for r in records), sum(r.misses for r in records)
    rates = [r.tokens_per_s for r in records]
    spread = max(1, len(records) - 1)
    return SessionSummary(
        turns=len(records), tokens=sum(r.tokens for r in records), bytes_read=sum(r.bytes_read for r in records),
        hits=hits, misses=misses, hit_rate=hits / max(1, hits + misses),
        evictions=sum(r.evictions for r in records), minflt=sum(r.minflt for r in records),
        majflt=sum(r.majflt for r in records), shift_copy_bytes=sum(r.shift_copy_bytes for r in records),
        unreleased_pages_first=first.unreleased_pages, unreleased_pages_last=last.unreleased_pages,
        unreleased_pages_per_turn=(last.unreleased_pages - first.unreleased_pages) / spread,
        resident_minus_accounted_bytes=last.resident_bytes - last.accounted_bytes,
        anon_minus_accounted_growth_bytes=((last.actual_anon_bytes - last.accounted_bytes)
                                           - (first.actual_anon_bytes - first.accounted_bytes)),
        tokens_per_s_median=statistics.median(rates), tokens_per_s_min=min(rates), tokens_per_s_max=max(rates),
        verified_slices=verified_slices, facts=facts,
    )
