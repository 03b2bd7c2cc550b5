"""``release_advice="recycle"`` (issue 34 §5): the miss that evicted pages takes them.

A warm miss's read into a slot the cache released with ``MADV_DONTNEED`` faults every page in and the
kernel zeroes it: on the 2-core VM that read runs 5–7× slower than the same read into resident pages
(docs/benchmarks/miss-host.md). Under ``recycle`` an :class:`~workbench.expert.cache.ExpertCache`
admission does not hand the pages its evictions free back at once; a :class:`Recycler` keeps them as
*spares* (still resident, touched by no live entry, uncommitted to the bookkeeping) and gives them to
the miss being admitted (:meth:`Recycler.finish`): a spare that lies in the miss's own pages (the slots
share it) stays where it is, and the miss's other uncommitted pages are planned to be filled by moving
spares there (:meth:`~workbench.expert.memory.Reservation.move_in`: mremap, no copy, no fault, no
zeroing). The spares left over go back before the admission returns.

The moves themselves run on the thread that reads the miss, just before its read (:meth:`Recycler.take`,
from the cache's ``fill``): run in the admission, on the decode thread, they added ~27 µs a miss to the
session's critical path on the 2-core VM (2026-12-05). Until a move has run its source pages are *pending*:
an admission whose pages include one runs that move first, and an entry evicted before its read runs
its own, so no page is moved out from under a slot that owns it. Once every admitted miss is read, what
is resident is what is committed, as under ``dontneed``, and no page outlives the budget. The moved pages
hold an evicted slice's stale bytes until the miss's read writes its own.
"""
from __future__ import annotations

import threading
from typing import Hashable, Sequence

import numpy as np

from workbench.expert.memory import Reservation

Spare = tuple[int, int, int]  # (reservation, first page, pages)
Move = tuple[int, int, int, int, int]  # (source reservation, first page, destination reservation, to page, pages)


class Recycler:
    """Spares an admission's evictions free, the moves planned for its miss, and running them (see the
    module docstring). ``committed``: the cache's per-reservation committed flags (read only). Not ``on``
    (the other advices), it keeps nothing and every call is a no-op."""

    def __init__(self, maps: Sequence[Reservation], committed: Sequence[np.ndarray], on: bool = True):
        self.maps, self.committed, self.on = maps, committed, on
        self.spares: list[Spare] | None = None  # inside an admission: what its evictions freed
        self._pending: dict[Hashable, list[Move]] = {}
        self._source = [np.zeros(m.pages if on else 0, dtype=bool) for m in maps]  # pages a pending move will take
        self._lock = threading.Lock()  # the pending moves, and running them (lanes and the decode thread)
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

    def finish(self, key: Hashable, blob: int, pages: range, ok: bool = True) -> None:
        """The admission of ``key`` (its slot spans ``pages`` of ``maps[blob]``, not yet accounted) ends:
        with ``ok``, plan its moves (a pending move whose source lies in ``pages`` is run first); then
        hand back every spare it did not take."""
        spares, self.spares = self.spares or [], None
        try:
            if ok and self.on:
                lo, hi = pages.start, pages.stop
                if self._source[blob][lo:hi].any():
                    self._run_pending(blob, lo, hi)
                if spares:
                    spares = self._plan(key, blob, lo, hi, spares)
        finally:
            for b, first, n in spares:
                self.maps[b].release(first, n)

    def take(self, key: Hashable) -> None:
        """Run ``key``'s planned moves (the thread about to read it, or the decode thread evicting it)."""
        if key in self._pending:
            with self._lock:
                self._run(self._pending.pop(key, ()))

    def _plan(self, key: Hashable, blob: int, lo: int, hi: int, spares: list[Spare]) -> list[Spare]:
        kept, left, mine = 0, [], set()
        for b, first, n in spares:  # pages the slots share: reused in place, and no longer spare
            a, z = (max(first, lo), min(first + n, hi)) if b == blob else (0, 0)
            if a >= z:
                left.append((b, first, n))
                continue
            kept += z - a
            mine.update(range(a, z))
            left += [(b, s0, s1 - s0) for s0, s1 in ((first, a), (z, first + n)) if s1 > s0]
        need = np.flatnonzero(~self.committed[blob][lo:hi]) + lo  # the spares kept in place are among them
        if mine:
            need = np.array([p for p in need if p not in mine], dtype=np.int64)
        moves: list[Move] = []
        for run in np.split(need, np.flatnonzero(np.diff(need) != 1) + 1) if len(need) else []:
            to, count = int(run[0]), len(run)
            while count and left:
                b, first, n = left.pop()
                k = min(count, n)
                if n > k:
                    left.append((b, first + k, n - k))
                moves.append((b, first, blob, to, k))
                self._source[b][first:first + k] = True
                to, count = to + k, count - k
        with self._lock:
            self.recycled += kept
            if moves:
                self._pending[key] = moves
        return left

    def _run_pending(self, blob: int, lo: int, hi: int) -> None:
        """Run every pending move that takes a page of ``maps[blob]`` in ``[lo, hi)`` (the decode thread)."""
        with self._lock:
            for key in [k for k, ms in self._pending.items()
                        if any(b == blob and first < hi and lo < first + n for b, first, _, _, n in ms)]:
                self._run(self._pending.pop(key))

    def _run(self, moves: Sequence[Move]) -> None:
        """Run ``moves`` (the lock held); a source page that will not move goes back to the kernel."""
        for src, first, dst, to, n in moves:
            stuck = move(self.maps, src, first, dst, to, n)
            self._source[src][first:first + n] = False
            self.recycled += n - sum(m for _, m in stuck)
            for s0, m in stuck:  # its place in dst stays empty: the read faults it in
                self.maps[src].release(s0, m)


def move(maps: Sequence[Reservation], src: int, first: int, dst: int, to: int, n: int) -> list[tuple[int, int]]:
    """Move ``n`` pages from ``maps[src]`` to ``maps[dst]``, halving a run the kernel refuses whole (before
    Linux 6.17 a source spanning two mappings: a run of pages moved in at different times); the source
    runs that did not move at all."""
    if maps[dst].move_in(maps[src], first, to, n):
        return []
    if n == 1:
        return [(first, 1)]
    h = n // 2
    return move(maps, src, first, dst, to, h) + move(maps, src, first + h, dst, to + h, n - h)
