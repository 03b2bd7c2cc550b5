"""What a load returns: frozen results, placements and phase times (engaged facts, ON/PARTIAL/INERT,
are :class:`~workbench.records.Engaged`, shared with the layers that report them)."""
from __future__ import annotations

import resource
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from workbench.records import PHASES, Engaged, LoadPath, LoadSummary
from workbench.upload.base import DeviceBuffer

__all__ = ["PHASES", "Engaged", "LoadResult", "PhaseClock", "Placement", "page_faults"]


@dataclass(frozen=True)
class Placement:
    """Where one tensor landed: ``buffer`` at ``offset``; verification reads it back from there."""

    tensor: str
    buffer: DeviceBuffer = field(compare=False)
    offset: int
    nbytes: int


@dataclass(frozen=True)
class LoadResult:
    """One load, frozen. ``placements`` stay in-process (device handles); the rest is JSON.

    ``counters`` are the strategy's own tallies (``shift_copy_bytes``, ``dontneed_calls``,
    ``warm_chunks``, …), kept as numbers so tests and notebooks need not parse notes.
    """

    strategy: str
    params: Mapping[str, Any]
    device: str
    bytes_moved: int
    n_tensors: int
    load_s: float
    phases: Mapping[str, float]
    minflt: int
    majflt: int
    evict: bool
    evict_source: str
    engaged: tuple[Engaged, ...]
    notes: tuple[str, ...] = ()
    placements: tuple[Placement, ...] = field(default=(), repr=False, compare=False)
    counters: Mapping[str, int] = field(default_factory=dict)
    path: Mapping[str, Any] = field(default_factory=dict)  # readers, copy_from, direct: picks the wall

    @property
    def gbps(self) -> float:
        return self.bytes_moved / self.load_s / 1e9 if self.load_s > 0 else 0.0

    def engaged_by(self, feature: str) -> Engaged | None:
        """The first engaged fact named ``feature``, if any."""
        return next((e for e in self.engaged if e.feature == feature), None)

    def summary(self) -> LoadSummary:
        """The load as JSON can carry it across the worker's process boundary (no device handles)."""
        return LoadSummary(
            strategy=self.strategy, params=dict(self.params), device=self.device, bytes=self.bytes_moved,
            n_tensors=self.n_tensors, load_s=self.load_s, gbps=self.gbps, phases=dict(self.phases),
            minflt=self.minflt, majflt=self.majflt, evict=self.evict, evict_source=self.evict_source,
            engaged=self.engaged, notes=self.notes, counters=dict(self.counters),
            path=LoadPath.from_json(self.path),
        )

    def to_json(self) -> dict[str, Any]:
        return self.summary().to_json()


class PhaseClock:
    """Accumulates wall time per phase; phases may repeat and interleave (read, upload, read, …).

    Only the loading thread uses it: worker threads' time shows up as the main thread's wait.
    """

    def __init__(self) -> None:
        self.totals: dict[str, float] = {p: 0.0 for p in PHASES}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.totals[phase] = self.totals.get(phase, 0.0) + time.perf_counter() - t0


def page_faults() -> tuple[int, int]:
    """(minor, major) page faults of this process so far, all threads included."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_minflt, ru.ru_majflt
