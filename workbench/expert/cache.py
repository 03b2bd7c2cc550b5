"""An expert-slice cache under a byte budget, with page accounting that can see the boundary leak.

Entries are (blob, expert) slices staged into their slot of the blob's :class:`Reservation` (slots
per placement: :mod:`workbench.expert.layout`). Staging commits the pages the entry touches;
eviction releases pages with ``madvise(MADV_DONTNEED)`` by one of two rules:

* ``boundary_release="off"`` — only the pages the entry *fully* covers: exact while slots own whole
  pages, but under the in-place placement every slice shares its first and last page with a
  neighbour, and those pages are never handed back, even once the neighbour is gone too. This is
  the leak of the second write-up, reproduced on purpose.
* ``"on"`` — :func:`~workbench.expert.placement.releasable_pages`: also a boundary page, once no live
  entry touches it.

The cache keeps a per-page count of live entries touching each page and whether it committed the
page, so it can say what it believes it holds (``accounted_pages``: pages some live entry touches)
and what it failed to give back (``unreleased_pages``: committed, touched by nobody); mincore over its
reservations measures what is really resident (:meth:`ExpertCache.memory`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Hashable, NamedTuple, Sequence

import numpy as np

from workbench.errors import ParamError
from workbench.expert.layout import PLACEMENTS, BlobLayout, layout_blobs
from workbench.expert.memory import PAGE, Reservation
from workbench.expert.placement import PlacementReport, pages_fully_covered, pages_touched, releasable_pages
from workbench.expert.policy import EvictionPolicy, make_policy
from workbench.expert.readers import READERS, open_reader
from workbench.formats.index import ExpertBlob

BOUNDARY_RELEASE = ("on", "off")
DEFAULT_READER = {"inplace": "direct-inplace", "bounce": "direct-bounce", "aligned": "pread"}


class SliceKey(NamedTuple):
    """One cache entry: expert ``expert`` of blob number ``blob`` (an index into the cache's blobs)."""

    blob: int
    expert: int


@dataclass(frozen=True)
class CacheCounters:
    """Cumulative since the cache opened; subtract two snapshots for a turn."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    bytes_read: int = 0  # payload bytes staged (the same whatever the reader)
    io_bytes: int = 0  # bytes the reader moved from the file (O_DIRECT: whole windows)
    shift_copy_bytes: int = 0  # bytes memcpy'd out of a bounce buffer
    inplace_reads: int = 0
    released_pages: int = 0

    def minus(self, earlier: "CacheCounters") -> "CacheCounters":
        return CacheCounters(*(a - b for a, b in zip(_astuple(self), _astuple(earlier))))


@dataclass(frozen=True)
class CacheMemory:
    """What the cache believes it holds against what is resident, in pages of its reservations."""

    live_entries: int
    live_bytes: int  # payload bytes of live entries (what the budget counts)
    accounted_pages: int  # pages some live entry touches
    committed_pages: int  # pages the cache wrote and has not released
    unreleased_pages: int  # committed but touched by no live entry: the leak
    resident_pages: int  # measured by mincore over the reservations

    @property
    def accounted_bytes(self) -> int:
        return self.accounted_pages * PAGE

    @property
    def resident_bytes(self) -> int:
        return self.resident_pages * PAGE


@dataclass(frozen=True)
class CacheFacts:
    """How the cache was set up: what it was asked for and what it could do."""

    placement: str
    placement_report: PlacementReport
    reader: str  # the reader in use
    reader_note: str  # why it is not the one asked for, "" when it is
    boundary_release: str
    policy: str
    budget_bytes: int
    reserved_bytes: int


class ExpertCache:
    """Expert slices of ``blobs`` (from the file at ``path``) under ``budget_bytes`` of payload.

    Parameters
    ----------
    path, blobs
        The model file and the expert blobs to cache (e.g. ``index.path, index.blobs``).
    budget_bytes
        Payload bytes the live entries may hold; at least the largest slice.
    placement
        ``"inplace"``, ``"bounce"`` or ``"aligned"`` (see :mod:`workbench.expert.layout`).
    boundary_release
        ``"on"`` (release a boundary page once no live entry touches it) or ``"off"`` (the leak).
    reader
        ``"pread"``, ``"direct-bounce"``, ``"direct-inplace"`` or ``"auto"`` (by placement:
        :data:`DEFAULT_READER`); O_DIRECT falls back to pread where refused, noted in :attr:`facts`.
    policy
        ``"lru"``, ``"fifo"`` or an :class:`~workbench.expert.policy.EvictionPolicy` instance.
    """

    def __init__(self, path: str | os.PathLike, blobs: Sequence[ExpertBlob], *, budget_bytes: int,
                 placement: str = "inplace", boundary_release: str = "on", reader: str = "auto",
                 policy: str | EvictionPolicy = "lru"):
        _check_args(blobs, budget_bytes, placement, boundary_release, reader)
        self.path, self.blobs, self.budget = os.fspath(path), tuple(blobs), budget_bytes
        self.layouts, report = layout_blobs(self.blobs, placement, PAGE)
        self._policy = make_policy(policy)
        self._release_all = boundary_release == "on"
        self._reader, note = open_reader(DEFAULT_READER[placement] if reader == "auto" else reader, self.path)
        self._maps = [Reservation(lay.reserve) for lay in self.layouts]
        self._refs = [np.zeros(m.pages, dtype=np.int32) for m in self._maps]
        self._committed = [np.zeros(m.pages, dtype=bool) for m in self._maps]
        self._live: dict[SliceKey, int] = {}  # key → payload bytes
        self._live_bytes = 0
        self._c = _Counters()
        self.facts = CacheFacts(placement, report, self._reader.name, note, boundary_release,
                                getattr(self._policy, "name", type(self._policy).__name__), budget_bytes,
                                sum(m.nbytes for m in self._maps))

    # --- staging and eviction -------------------------------------------------------------------
    def stage(self, key: SliceKey) -> bool:
        """Make ``key`` live (reading it on a miss, evicting as the budget needs); True on a hit."""
        if key in self._live:
            self._c.hits += 1
            self._policy.touch(key)
            return True
        lay = self.layouts[key.blob]
        offset, nbytes = lay.slice(key.expert)
        while self._live and self._live_bytes + nbytes > self.budget:
            self.evict(self._policy.victim())
        self._read(key, lay, offset, nbytes)
        pages = self._touched(key)
        self._refs[key.blob][pages.start:pages.stop] += 1
        self._committed[key.blob][pages.start:pages.stop] = True
        self._live[key] = nbytes
        self._live_bytes += nbytes
        self._policy.admit(key)
        self._c.misses += 1
        self._c.bytes_read += nbytes
        return False

    def evict(self, key: SliceKey) -> None:
        """Drop a live entry and release its pages by the boundary rule."""
        nbytes = self._live.pop(key)
        self._policy.forget(key)
        self._live_bytes -= nbytes
        refs, committed = self._refs[key.blob], self._committed[key.blob]
        touched = self._touched(key)
        refs[touched.start:touched.stop] -= 1
        slot, extent = self._extent(key)
        if self._release_all:
            left_live, right_live = refs[touched.start] > 0, refs[touched.stop - 1] > 0
            pages = releasable_pages(slot, extent, bool(left_live), bool(right_live), PAGE)
        else:
            pages = pages_fully_covered(slot, extent, PAGE)
        if len(pages):
            self._maps[key.blob].release(pages.start, len(pages))
            committed[pages.start:pages.stop] = False
            self._c.released_pages += len(pages)
        self._c.evictions += 1

    def _read(self, key: SliceKey, lay: BlobLayout, offset: int, nbytes: int) -> None:
        touched = self._touched(key)
        lo, hi = touched.start * PAGE, touched.stop * PAGE
        view = self._maps[key.blob].view[lo:hi]  # the entry's own pages: all an overhang may touch
        try:
            # The promise holds for every placement: the region is the pages this entry commits, and
            # inside it slot and file differ by a constant, so overhung bytes get their own contents.
            out = self._reader.read_into(view, lay.slots[key.expert] - lo, offset, nbytes, allow_in_place=True)
        finally:
            view.release()
        self._c.io_bytes += out.io_bytes
        self._c.shift_copy_bytes += out.shift_copy_bytes
        self._c.inplace_reads += out.in_place

    def _extent(self, key: SliceKey) -> tuple[int, int]:
        lay = self.layouts[key.blob]
        return lay.slots[key.expert], lay.extents[key.expert]

    def _touched(self, key: SliceKey) -> range:
        return pages_touched(*self._extent(key), PAGE)

    # --- reading back and accounting ------------------------------------------------------------
    def __contains__(self, key: Hashable) -> bool:
        return key in self._live

    def __len__(self) -> int:
        return len(self._live)

    @property
    def reservations(self) -> tuple[Reservation, ...]:
        """The per-blob reservations, in blob order (e.g. to page-lock them for DMA)."""
        return tuple(self._maps)

    def view(self, key: SliceKey) -> memoryview:
        """The live entry's bytes in its slot (release the view before :meth:`close`)."""
        if key not in self._live:
            raise KeyError(f"{key} is not in the cache")
        slot = self.layouts[key.blob].slots[key.expert]
        return self._maps[key.blob].view[slot:slot + self._live[key]]

    def counters(self) -> CacheCounters:
        return self._c.snapshot()

    def memory(self, measure: bool = True) -> CacheMemory:
        """Accounted vs committed vs unreleased pages, and (``measure``) mincore-resident pages."""
        accounted = sum(int(np.count_nonzero(r > 0)) for r in self._refs)
        committed = sum(int(np.count_nonzero(c)) for c in self._committed)
        unreleased = sum(int(np.count_nonzero(c & (r == 0))) for c, r in zip(self._committed, self._refs))
        resident = sum(int(np.count_nonzero(m.resident_map())) for m in self._maps) if measure else -1
        return CacheMemory(len(self._live), self._live_bytes, accounted, committed, unreleased, resident)

    def close(self) -> None:
        self._reader.close()
        for m in self._maps:
            m.close()

    def __enter__(self) -> "ExpertCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Counters:
    """Mutable tallies behind :class:`CacheCounters`."""

    def __init__(self) -> None:
        for name in CacheCounters.__dataclass_fields__:
            setattr(self, name, 0)

    def snapshot(self) -> CacheCounters:
        return CacheCounters(**{name: getattr(self, name) for name in CacheCounters.__dataclass_fields__})


def _astuple(c: CacheCounters) -> tuple[int, ...]:
    return tuple(getattr(c, name) for name in CacheCounters.__dataclass_fields__)


def _check_args(blobs: Sequence[ExpertBlob], budget: int, placement: str, release: str, reader: str) -> None:
    if not blobs:
        raise ParamError("cache", "blobs", "no expert blobs: the model is not a MoE")
    if placement not in PLACEMENTS:
        raise ParamError("cache", "placement", f"{placement!r} is not one of {', '.join(PLACEMENTS)}")
    if release not in BOUNDARY_RELEASE:
        raise ParamError("cache", "boundary_release", f"{release!r} is not one of on, off")
    if reader != "auto" and reader not in READERS:
        raise ParamError("cache", "reader", f"{reader!r} is not one of auto, {', '.join(READERS)}")
    empty = next((b for b in blobs if any(n <= 0 for _, n in b.slices)), None)
    if empty is not None:
        raise ParamError("cache", "blobs", f"layer {empty.layer} {empty.name} has an empty expert slice")
    largest = max(n for b in blobs for _, n in b.slices)
    if budget < largest:
        raise ParamError("cache", "budget", f"{budget} B cannot hold one expert slice ({largest} B)")
