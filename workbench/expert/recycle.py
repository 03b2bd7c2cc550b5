"""``release_advice="recycle"`` (issue 34 §5): the miss that evicted pages takes them.

A warm miss's read into a slot the cache released with ``MADV_DONTNEED`` faults every page in and the
kernel zeroes it: on the 2-core VM that read runs 5–7× slower than the same read into resident pages
(docs/benchmarks/miss-host.md). Under ``recycle`` an :class:`~workbench.expert.cache.ExpertCache`
admission does not hand the pages its evictions free back at once; it keeps them as *spares* (still
resident, touched by no live entry, uncommitted to the bookkeeping) and :func:`refill` gives them to the
miss being admitted: a spare that lies in the miss's own pages (the slots share it) stays where it is,
and the miss's other uncommitted pages are filled by moving spares there
(:meth:`~workbench.expert.memory.Reservation.move_in`: mremap, no copy, no fault, no zeroing). The
cache hands back the spares left over before the admission returns, so what is resident is what is
committed whenever the decode thread looks, as under ``dontneed``, and no page outlives the budget.
The moved pages hold an evicted slice's stale bytes until the miss's read writes its own.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from workbench.expert.memory import Reservation

Spare = tuple[int, int, int]  # (reservation, first page, pages)


def refill(maps: Sequence[Reservation], committed: np.ndarray, spares: list[Spare], blob: int, pages: range) -> int:
    """Give the miss whose slot spans ``pages`` of ``maps[blob]`` (``committed``: that reservation's
    committed flags, before the miss is accounted) the ``spares``; ``spares`` is left holding what it
    did not take (to be handed back) and the pages it took are returned."""
    lo, hi = pages.start, pages.stop
    kept, left, mine = 0, [], set()
    for b, first, n in spares:  # pages the slots share: reused in place, and no longer spare
        a, z = (max(first, lo), min(first + n, hi)) if b == blob else (0, 0)
        if a >= z:
            left.append((b, first, n))
            continue
        kept += z - a
        mine.update(range(a, z))
        left += [(b, s0, s1 - s0) for s0, s1 in ((first, a), (z, first + n)) if s1 > s0]
    need = np.flatnonzero(~committed[lo:hi]) + lo  # the spares kept in place are among them: uncommitted
    if mine:
        need = np.array([p for p in need if p not in mine], dtype=np.int64)
    moved = 0
    for run in np.split(need, np.flatnonzero(np.diff(need) != 1) + 1) if len(need) else []:
        to, count = int(run[0]), len(run)
        while count and left:
            b, first, n = left.pop()
            k = min(count, n)
            if n > k:
                left.append((b, first + k, n - k))
            stuck = move(maps, b, first, blob, to, k)
            moved += k - sum(m for _, m in stuck)
            left += [(b, s0, m) for s0, m in stuck]  # stayed behind: handed back with the rest
            to, count = to + k, count - k
    spares[:] = left
    return kept + moved


def move(maps: Sequence[Reservation], src: int, first: int, dst: int, to: int, n: int) -> list[tuple[int, int]]:
    """Move ``n`` pages from ``maps[src]`` to ``maps[dst]``, halving a run the kernel refuses whole (before
    Linux 6.17 a source spanning two mappings: a run of pages moved in at different times); the source
    runs that did not move at all (their places in ``dst`` stay empty: the read faults them in)."""
    if maps[dst].move_in(maps[src], first, to, n):
        return []
    if n == 1:
        return [(first, 1)]
    h = n // 2
    return move(maps, src, first, dst, to, h) + move(maps, src, first + h, dst, to + h, n - h)
