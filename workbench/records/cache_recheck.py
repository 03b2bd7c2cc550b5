"""The worker's second look at the model's page cache, just before its load window.

The runner sets and verifies the cache state, then spawns the worker; the interpreter's start-up and
the device's init take ~0.7 s here, and reclaim in that time (memory pressure anywhere on the machine:
another process's allocations, a locked balloon) drops pages the runner saw resident. A warm run would
then load a partly cold model under a warm label, and a fast path gated on residency would read INERT
for no reason the run shows. So the worker looks again, puts back what moved, and says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from workbench.records.units import MiB


@dataclass(frozen=True)
class CacheRecheck:
    """``seen``: the model's resident fraction when the worker looked; ``now``: after it re-read the
    missing pages (warm) or dropped them again (cold); ``moved_bytes``: how much that moved;
    ``threshold``: the warm minimum or the cold maximum the runner holds the state to."""

    state: str  # "warm" or "cold"
    seen: float
    now: float
    moved_bytes: int
    threshold: float

    @property
    def reached(self) -> bool:
        """Whether the window opened in the state asked for."""
        return self.now >= self.threshold if self.state == "warm" else self.now <= self.threshold

    @property
    def decayed(self) -> bool:
        """Whether the state the runner verified had been lost by the time the worker looked."""
        return self.seen < self.threshold if self.state == "warm" else self.seen > self.threshold

    def line(self) -> str:
        """One line for a run whose state decayed (``""`` when it held)."""
        if not self.decayed:
            return ""
        how = "re-read" if self.state == "warm" else "dropped again"
        then = (f"{how} {self.moved_bytes / MiB:,.1f} MiB: {self.now:.1%} at the window" if self.reached else
                f"{how} {self.moved_bytes / MiB:,.1f} MiB, still {self.now:.1%}: not {self.state} at the window")
        cause = ("reclaim between the two: memory pressure on the machine" if self.state == "warm"
                 else "something read the model between the two")
        return (f"{self.state} decayed before the load window: {self.seen:.1%} resident when the worker looked, "
                f"after the runner's check ({cause}); {then}")

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "seen": self.seen, "now": self.now, "moved_bytes": self.moved_bytes,
                "threshold": self.threshold}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CacheRecheck:
        return cls(str(data["state"]), float(data["seen"]), float(data["now"]), int(data["moved_bytes"]),
                   float(data["threshold"]))
