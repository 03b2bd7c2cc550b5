"""``release_advice="recycle"`` (issue 34 §5): the miss that evicted pages takes them.

A warm miss's read into a slot the cache released with ``MADV_DONTNEED`` faults every page in and the
kernel zeroes it: on the 2-core VM that read runs 5–7× slower than the same read into resident pages
(docs/benchmarks/miss-host.md). Under ``recycle`` an :class:`~workbench.expert.cache.ExpertCache`
admission does not hand the pages its evictions free back at once; a :class:`Recycler` keeps them as
*spares* (still resident, touched by no live entry, uncommitted to the bookkeeping) and gives them to
the miss being admitted (:meth:`Recycler.finish`): a spare that lies in the miss's own pages (the slots
share it) stays where it is, and the miss's other uncommitted pages are filled by moving spares there
(:meth:`~workbench.expert.memory.Reservation.move_in`: mremap, no copy, no fault, no zeroing). The spares left over go back before the admission returns.

The moves run in the admission, on the decode thread, before any lane can see the miss: a lane filling
or copying a neighbour never meets a page being moved under it (a boundary page the two slots share is
committed by whichever was admitted first, and only uncommitted pages are moved into). Run instead on the
lane about to read the miss, just before its read, they raced a neighbour's read into the page both
slots share, and cost more (2-core VM, 2026-12-05: docs/benchmarks/miss-host.md). So what is resident is
what is committed whenever the decode thread looks, as under ``dontneed``, and no page outlives the
budget. The moved pages hold an evicted slice's stale bytes until the miss's read writes its own.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from workbench.expert.memory import Reservation

Spare = tuple[int, int, int]  # (reservation, first page, pages)


class Recycler:
    """Spares an admission's evictions free, and giving them to its miss (see the module docstring).
    ``committed``: the cache's per-reservation committed flags (read only). Not ``on`` (the other
    advices), it keeps nothing and every call is a no-op."""

    def __init__(self, maps: Sequence[Reservation], committed: Sequence[np.ndarray], on: bool = True):
        self.maps, self.committed, self.on = maps, committed, on
        self.spares: list[Spare] | None = None  # inside an admission: what its evictions freed
        self.recycled = 0  # pages misses took over: in place, or moved

    def start(self) -> None:
        """An admission begins: :meth:`evicted` keeps what its evictions free."""
        self.spares = [] if self.on else None

    def evicted(self, blob: int, first: int, n: int) -> bool:
        """Keep an eviction's released pages as spares (True) where an admission runs, else False."""
        if self.spares is None:
            return False
        self.spares.append((blob, first, n))
        return True

    def finish(self, blob: int, pages: range, ok: bool = True) -> None:
        """The admission of a miss whose slot spans ``pages`` of ``maps[blob]`` (not yet accounted) ends:
        with ``ok``, give it the spares; then hand back every spare it did not take."""
        spares, self.spares = self.spares or [], None
        try:
            if ok and spares:
                spares = self._give(blob, pages.start, pages.stop, spares)
        finally:
            for b, first, n in spares:
                self.maps[b].release(first, n)

    def _give(self, blob: int, lo: int, hi: int, spares: list[Spare]) -> list[Spare]:
        kept, left, mine = 0, [], set()
        for b, first, n in spares:  # pages the slots share: reused in place, and no longer spare
            a, z = (max(first, lo), min(first + n, hi)) if b == blob else (0, 0)
            if a >= z:
                left.append((b, first, n))
                continue
            kept += z - a
            mine.update(range(a, z))
            left += [(b, s0, s1 - s0) for s0, s1 in ((first, a), (z, first + n)) if s1 > s0]
        moved = 0
        for to, count in _runs(self.committed[blob], lo, hi, mine):
            while count and left:
                b, first, n = left.pop()
                k = min(count, n)
                if n > k:
                    left.append((b, first + k, n - k))
                try:
                    stuck = move(self.maps, b, first, blob, to, k)
                except OSError:  # out of mappings, say: no halving (each half would fail too); the read faults
                    stuck = [(first, k)]
                moved += k - sum(m for _, m in stuck)
                left += [(b, s0, m) for s0, m in stuck]  # stayed behind: handed back with the rest
                to, count = to + k, count - k
        self.recycled += kept + moved
        return left


def _runs(committed: np.ndarray, lo: int, hi: int, mine: set[int]) -> list[tuple[int, int]]:
    """The runs ``(first page, pages)`` of ``[lo, hi)`` not committed and not in ``mine`` (the spares kept
    in place, uncommitted too); the common case, a slot none of whose pages is committed, without numpy's
    per-call costs beyond one."""
    if not mine and not committed[lo:hi].any():
        return [(lo, hi - lo)]
    need = [p for p in (np.flatnonzero(~committed[lo:hi]) + lo).tolist() if p not in mine]
    out: list[tuple[int, int]] = []
    for p in need:
        if out and out[-1][0] + out[-1][1] == p:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((p, 1))
    return out


def move(maps: Sequence[Reservation], src: int, first: int, dst: int, to: int, n: int) -> list[tuple[int, int]]:
    """Move ``n`` pages from ``maps[src]`` to ``maps[dst]``, halving a run the kernel refuses whole (before
    Linux 6.17 a source spanning two mappings: a run of pages moved in at different times); the source
    runs that did not move at all. Any other refusal (OSError from ``move_in``) propagates."""
    if maps[dst].move_in(maps[src], first, to, n):
        return []
    if n == 1:
        return [(first, 1)]
    h = n // 2
    return move(maps, src, first, dst, to, h) + move(maps, src, first + h, dst, to + h, n - h)
