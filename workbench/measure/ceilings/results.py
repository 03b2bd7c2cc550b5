"""What a ``workbench ceilings`` run found: each wall measured (:class:`Ceiling`) and the run's report."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class Ceiling:
    """One measured wall: ``name`` (e.g. ``page_cache_read_2t``), GB/s, and how it was measured."""

    name: str
    gbps: float
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CeilingsReport:
    """Every wall measured in one ``workbench ceilings`` run, and what could not be measured, why."""

    host: str
    directory: str
    size: int
    ceilings: tuple[Ceiling, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "directory": self.directory, "size": self.size,
                "ceilings": [{"name": c.name, "gbps": c.gbps, "detail": dict(c.detail)}
                             for c in self.ceilings],
                "skipped": [{"name": n, "reason": r} for n, r in self.skipped]}
