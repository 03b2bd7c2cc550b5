"""What an :class:`~workbench.expert.cache.ExpertCache` reports: counters, memory and how it was set up."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from workbench.expert.memory import PAGE
from workbench.expert.placement import PlacementReport

if TYPE_CHECKING:
    from workbench.expert.readers import ReadOutcome


@dataclass(frozen=True)
class CacheCounters:
    """Cumulative since the cache opened; subtract two snapshots for a turn."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    bytes_read: int = 0  # payload bytes staged (the same whatever the reader)
    io_bytes: int = 0  # bytes the reader moved from the file (O_DIRECT: whole windows)
    shift_copy_bytes: int = 0  # bytes memcpy'd out of a bounce buffer
    shift_copy_s: float = 0.0  # seconds those copies took (on whichever thread read: a lane's, or this one)
    inplace_reads: int = 0
    released_pages: int = 0
    hit_bytes: int = 0  # payload bytes served by live entries (no read)
    gated_reads: int = 0  # misses read buffered because the gate found them resident in the page cache
    recycled_pages: int = 0  # release_advice="recycle": evicted pages a miss's slot took instead of fresh ones

    def minus(self, earlier: "CacheCounters") -> "CacheCounters":
        return CacheCounters(*(getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)))


@dataclass(frozen=True)
class CacheMemory:
    """What the cache believes it holds against what is resident, in pages of its reservations."""

    live_entries: int
    live_bytes: int  # payload bytes of live entries (what the budget counts)
    accounted_pages: int  # pages some live entry touches
    committed_pages: int  # pages the cache wrote and has not released
    unreleased_pages: int  # committed but touched by no live entry: the leak
    resident_pages: int  # measured by mincore over the reservations
    # of those, handed back with MADV_FREE and not yet reclaimed (smaps LazyFree): resident to mincore and
    # RSS, released to the cache and the kernel's to take at will; 0 under MADV_DONTNEED, -1 unknown
    lazyfree_pages: int = 0

    @property
    def accounted_bytes(self) -> int:
        return self.accounted_pages * PAGE

    @property
    def resident_bytes(self) -> int:
        return self.resident_pages * PAGE

    @property
    def lazyfree_bytes(self) -> int:
        return self.lazyfree_pages * PAGE if self.lazyfree_pages >= 0 else -1

    @property
    def held_pages(self) -> int:
        """Resident pages the kernel may not take back at will: resident less lazily freed."""
        return self.resident_pages - max(0, self.lazyfree_pages) if self.resident_pages >= 0 else -1


@dataclass(frozen=True)
class CacheFacts:
    """How the cache was set up: what it was asked for and what it could do."""

    placement: str
    placement_report: PlacementReport
    reader: str  # the reader in use (the first file's, when files differ: see reader_note)
    reader_note: str  # why it is not the one asked for, "" when it is
    boundary_release: str
    policy: str
    budget_bytes: int
    reserved_bytes: int
    leak_bound_pages: int = 0  # pages some slot only partly covers: what release=off can leak at most
    files: int = 1
    release_advice: str = "dontneed"  # how released pages are handed back: dontneed | free (MADV_FREE) | recycle


class MutableCounters:
    """Mutable tallies behind :class:`CacheCounters` (the decode thread's alone)."""

    def __init__(self) -> None:
        for f in fields(CacheCounters):
            setattr(self, f.name, 0)

    def snapshot(self) -> CacheCounters:
        return CacheCounters(**{f.name: getattr(self, f.name) for f in fields(CacheCounters)})

    def count_read(self, outcome: ReadOutcome) -> None:
        """A filled miss: the bytes its reader moved and shifted, the shift's time, whether it went in place."""
        self.io_bytes += outcome.io_bytes
        self.shift_copy_bytes += outcome.shift_copy_bytes
        self.shift_copy_s += outcome.shift_copy_s
        self.inplace_reads += outcome.in_place
