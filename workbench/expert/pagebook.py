"""The pages of an :class:`~workbench.expert.cache.ExpertCache` under a per-blob placement (``inplace``,
``bounce``, ``aligned``): each blob's reservation, which of its pages live entries touch and which are
committed, and how an eviction hands pages back (the boundary rule, the release advice, recycle's moves).

An admission commits the pages its slot touches (:meth:`PageBook.take`); an eviction releases the pages
the boundary rule allows (:meth:`PageBook.give`): with ``boundary_release="off"`` only the pages the entry
fully covers (the second write-up's leak, on purpose), with ``"on"`` a boundary page too once no live entry
touches it (:func:`~workbench.expert.placement.releasable_pages`). Under ``release_advice="recycle"`` the
pages an admission's evictions free are kept for the miss itself (:mod:`workbench.expert.recycle`). The
other store is :class:`~workbench.expert.pool.FramePool` (``placement="pool"``); both answer the same calls.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from workbench.expert.cache_state import CacheMemory
from workbench.expert.layout import BlobLayout, leak_bound_pages
from workbench.expert.memory import PAGE, Reservation, resident_and_lazyfree
from workbench.expert.placement import pages_fully_covered, pages_touched, releasable_pages
from workbench.expert.recycle import Recycler


class PageBook:
    """Reservations of ``layouts`` with their page accounting (see the module docstring)."""

    in_place = True  # a slot's region is its own pages, file and slot a constant apart: an overhang is safe

    def __init__(self, layouts: Sequence[BlobLayout], release_advice: str, boundary_release: str):
        self.layouts = layouts
        self.maps = [Reservation(lay.reserve, release_advice) for lay in layouts]
        self.refs = [np.zeros(m.pages, dtype=np.int32) for m in self.maps]
        self.committed = [np.zeros(m.pages, dtype=bool) for m in self.maps]
        self.recycler = Recycler(self.maps, self.committed, on=release_advice == "recycle")
        self.release_all = boundary_release == "on"
        self.nbytes = sum(m.nbytes for m in self.maps)
        self.leak_bound = leak_bound_pages(layouts, PAGE)

    @property
    def recycled(self) -> int:
        return self.recycler.recycled

    @property
    def reservations(self) -> tuple[Reservation, ...]:
        return tuple(self.maps)

    def full(self) -> bool:
        return False  # only the budget limits a page book

    def _extent(self, key: Any) -> tuple[int, int]:
        lay = self.layouts[key.blob]
        return lay.slots[key.expert], lay.extents[key.expert]

    def _touched(self, key: Any) -> range:
        return pages_touched(*self._extent(key), PAGE)

    def begin(self) -> None:
        """An admission begins (recycle: what its evictions free is kept for it)."""
        self.recycler.start()

    def end(self, key: Any, ok: bool) -> None:
        """The admission of ``key`` ends (``ok``: it goes ahead): recycle gives it the spares."""
        self.recycler.finish(key.blob, self._touched(key), ok)

    def take(self, key: Any, nbytes: int) -> None:
        pages = self._touched(key)
        self.refs[key.blob][pages.start:pages.stop] += 1
        self.committed[key.blob][pages.start:pages.stop] = True

    def give(self, key: Any) -> int:
        """``key`` was evicted: release the pages the boundary rule allows; how many."""
        refs, committed = self.refs[key.blob], self.committed[key.blob]
        touched = self._touched(key)
        refs[touched.start:touched.stop] -= 1
        slot, extent = self._extent(key)
        if self.release_all:
            left_live, right_live = refs[touched.start] > 0, refs[touched.stop - 1] > 0
            pages = releasable_pages(slot, extent, bool(left_live), bool(right_live), PAGE)
        else:
            pages = pages_fully_covered(slot, extent, PAGE)
        if len(pages):
            if not self.recycler.evicted(key.blob, pages.start, len(pages)):
                self.maps[key.blob].release(pages.start, len(pages))
            committed[pages.start:pages.stop] = False
        return len(pages)

    def region(self, key: Any) -> tuple[memoryview, int]:
        """The entry's own pages (all an overhang may touch) and where its slot starts in them."""
        touched = self._touched(key)
        lo, hi = touched.start * PAGE, touched.stop * PAGE
        return self.maps[key.blob].view[lo:hi], self.layouts[key.blob].slots[key.expert] - lo

    def view(self, key: Any, nbytes: int) -> memoryview:
        slot = self.layouts[key.blob].slots[key.expert]
        return self.maps[key.blob].view[slot:slot + nbytes]

    def memory(self, live: int, live_bytes: int, measure: bool) -> CacheMemory:
        accounted = sum(int(np.count_nonzero(r > 0)) for r in self.refs)
        committed = sum(int(np.count_nonzero(c)) for c in self.committed)
        unreleased = sum(int(np.count_nonzero(c & (r == 0))) for c, r in zip(self.committed, self.refs))
        resident, lazy = resident_and_lazyfree(self.maps) if measure else (-1, -1)
        return CacheMemory(live, live_bytes, accounted, committed, unreleased, resident, lazy)

    def close(self) -> None:
        for m in self.maps:
            m.close()
