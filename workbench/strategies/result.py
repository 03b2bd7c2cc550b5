"""What a load returns: frozen results, engaged facts (ON/PARTIAL/INERT), placements, phase times."""
from __future__ import annotations

import dataclasses
import resource
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from workbench.upload.base import DeviceBuffer

PHASES = ("index", "prefetch", "read", "upload", "sync")


@dataclass(frozen=True)
class Engaged:
    """What a fast path actually did: ``zero_copy: 92/92 tensors`` (ON), ``0/92`` (INERT)."""

    feature: str
    done: int
    total: int
    unit: str = "tensors"
    note: str = ""

    @property
    def state(self) -> str:
        if self.total == 0 or self.done == 0:
            return "INERT"
        return "ON" if self.done == self.total else "PARTIAL"

    def __str__(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"{self.feature}: {self.done}/{self.total} {self.unit} — {self.state}{note}"

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "state": self.state, "text": str(self)}


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

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "params": dict(self.params),
            "device": self.device,
            "bytes": self.bytes_moved,
            "n_tensors": self.n_tensors,
            "load_s": self.load_s,
            "gbps": self.gbps,
            "phases": dict(self.phases),
            "minflt": self.minflt,
            "majflt": self.majflt,
            "evict": self.evict,
            "evict_source": self.evict_source,
            "engaged": [e.to_json() for e in self.engaged],
            "notes": list(self.notes),
            "counters": dict(self.counters),
            "path": dict(self.path),
        }


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
