"""What a load across several ranks reported: each rank's own numbers, and the run they make together.

A multi-rank run (``measure/ranks/``) is timed on one clock (CLOCK_MONOTONIC is system-wide on one
node) from the first rank's start to the last rank's bytes on its device; the slowest rank is the
result, and the spread between ranks is kept beside it. Each rank process prints one
:class:`RankReport`; the parent folds them into a :class:`RanksSummary`, carried by the run's
``WorkerReport.ranks`` (the ledger's ``runs.result`` column) so every surface reads the same numbers.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class RankReport:
    """One rank's load. ``start``/``end`` are CLOCK_MONOTONIC seconds (the node's one clock);
    ``bytes_read`` came from the model's files, ``bytes_interconnect`` went over the process group
    (sent + received by this rank), ``bytes_held`` is what the rank holds on its device (padding included)."""

    rank: int
    world: int
    pid: int
    start: float
    end: float
    bytes_read: int
    bytes_interconnect: int
    bytes_held: int
    n_slices: int
    verified: bool | None = None
    verify_detail: str = ""
    device: str = "host"
    transport: str = "gloo"
    notes: tuple[str, ...] = ()
    phases: Mapping[str, float] = field(default_factory=dict)
    digest: str = ""  # sha256 of the rank's device bytes read back, slices in plan order ('' unverified)

    @property
    def load_s(self) -> float:
        return self.end - self.start

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "world": self.world, "pid": self.pid, "start": self.start, "end": self.end,
                "load_s": self.load_s, "bytes_read": self.bytes_read, "bytes_interconnect": self.bytes_interconnect,
                "bytes_held": self.bytes_held, "n_slices": self.n_slices, "verified": self.verified,
                "verify_detail": self.verify_detail, "device": self.device, "transport": self.transport,
                "notes": list(self.notes), "phases": dict(self.phases), "digest": self.digest}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankReport:
        verified = data.get("verified")
        return cls(rank=int(data["rank"]), world=int(data["world"]), pid=int(data.get("pid") or 0),
                   start=float(data["start"]), end=float(data["end"]), bytes_read=int(data.get("bytes_read", 0)),
                   bytes_interconnect=int(data.get("bytes_interconnect", 0)),
                   bytes_held=int(data.get("bytes_held", 0)), n_slices=int(data.get("n_slices", 0)),
                   verified=None if verified is None else bool(verified),
                   verify_detail=str(data.get("verify_detail") or ""), device=str(data.get("device") or "host"),
                   transport=str(data.get("transport") or "gloo"), notes=tuple(map(str, data.get("notes") or ())),
                   phases={str(k): float(v) for k, v in (data.get("phases") or {}).items()},
                   digest=str(data.get("digest") or ""))


@dataclass(frozen=True)
class RanksSummary:
    """The ranks of one run together: layout, strategy, and every rank's report, in rank order."""

    layout: str
    strategy: str
    ranks: tuple[RankReport, ...]

    @property
    def world(self) -> int:
        return len(self.ranks)

    @property
    def window_s(self) -> float:
        """First rank's start → last rank's end: the run's load time."""
        return max(r.end for r in self.ranks) - min(r.start for r in self.ranks)

    @property
    def slowest(self) -> RankReport:
        return max(self.ranks, key=lambda r: r.end)

    @property
    def median_rank_s(self) -> float:
        return statistics.median(r.load_s for r in self.ranks)

    @property
    def straggler_ratio(self) -> float:
        """The slowest rank's load over the median rank's (1.0: no straggler)."""
        median = self.median_rank_s
        return max(r.load_s for r in self.ranks) / median if median > 0 else 0.0

    @property
    def start_skew_s(self) -> float:
        """How far apart the ranks started (released by one barrier)."""
        return max(r.start for r in self.ranks) - min(r.start for r in self.ranks)

    @property
    def bytes_held(self) -> int:
        return sum(r.bytes_held for r in self.ranks)

    @property
    def verified(self) -> bool | None:
        seen = [r.verified for r in self.ranks]
        return None if any(v is None for v in seen) else all(seen)

    def line(self) -> str:
        """One line: ranks, the slowest, the spread."""
        slow = self.slowest
        return (f"{self.world} ranks ({self.layout}): slowest rank {slow.rank} {slow.load_s * 1e3:.1f} ms, "
                f"median {self.median_rank_s * 1e3:.1f} ms ({self.straggler_ratio:.2f}x), "
                f"start skew {self.start_skew_s * 1e3:.2f} ms")

    def to_json(self) -> dict[str, Any]:
        return {"layout": self.layout, "strategy": self.strategy, "world": self.world, "window_s": self.window_s,
                "slowest_rank": self.slowest.rank, "median_rank_s": self.median_rank_s,
                "straggler_ratio": self.straggler_ratio, "start_skew_s": self.start_skew_s,
                "ranks": [r.to_json() for r in self.ranks]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RanksSummary:
        return cls(layout=str(data.get("layout") or ""), strategy=str(data.get("strategy") or ""),
                   ranks=tuple(RankReport.from_json(r) for r in data.get("ranks") or ()))
