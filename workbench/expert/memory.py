"""Anonymous reservations an expert cache lives in, and what the process really holds.

A :class:`Reservation` is a private anonymous mapping: reserving it commits nothing, a page is
committed the first time it is written, and :meth:`Reservation.release` hands it back with its
``release_advice``: ``"dontneed"`` (``MADV_DONTNEED``: the kernel takes the page now; the next write
faults a fresh zeroed page in) or ``"free"`` (``MADV_FREE``, Linux >= 4.5: the kernel keeps the page
until memory pressure and takes lazily-freed pages first; a write before then reuses it without a
fault or zeroing, and the page is the process's again). Either way the cache counts the page as
released. ``"recycle"`` hands back with ``MADV_DONTNEED`` too, but first lets the cache move an evicted
slot's pages, still resident, into the slot of the miss that evicted it (:meth:`Reservation.move_in`:
``mremap`` with ``MREMAP_DONTUNMAP``, Linux >= 5.7), so the miss's read writes resident pages without a
fault or zeroing and no page outlives the budget (:class:`~workbench.expert.cache.ExpertCache`). Transparent huge pages are switched off for it — with THP one written byte could
commit 2 MiB and a 4 KiB release would split or keep it, and page accounting would mean nothing.

What is really resident is measured two ways: :meth:`Reservation.resident_map` asks mincore about the
reservation's own pages (exact, and blind to everything else the process does), and
:func:`process_memory` reads the whole process's ``Rss`` / ``Anonymous`` from
``/proc/self/smaps_rollup`` (what an operator or the OOM killer sees). Both still count a
lazily-freed page as resident until the kernel reclaims it, so :func:`lazyfree_bytes` reads the
reservations' own ``LazyFree:`` from ``/proc/self/smaps`` for the comparisons to take out.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from workbench.errors import ParamError

PAGE = mmap.PAGESIZE
SMAPS_ROLLUP = "/proc/self/smaps_rollup"
SMAPS = "/proc/self/smaps"
# how a released page is handed back: the madvise advice's name in mmap, None where the platform has none
# ("recycle": what is left over after the moves goes back with MADV_DONTNEED)
RELEASE_ADVICES = {"dontneed": "MADV_DONTNEED", "free": "MADV_FREE", "recycle": "MADV_DONTNEED"}
MREMAP_MAYMOVE, MREMAP_FIXED, MREMAP_DONTUNMAP = 1, 2, 4

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
# mremap goes through PyDLL: the call keeps the GIL (it takes microseconds). Through CDLL every move gave
# the GIL up and queued behind the reading lanes to get it back: on the 2-core VM (2026-12-05) the decode
# thread's bookkeeping grew 4.6× with the moves there, and a lane's read with its moves took 2.5× as long
# as when the call keeps the GIL (docs/benchmarks/miss-host.md)
_pylibc = ctypes.PyDLL(ctypes.util.find_library("c") or None, use_errno=True)
_pylibc.mremap.restype = ctypes.c_void_p
_pylibc.mremap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
_MAP_FAILED = ctypes.c_void_p(-1).value
_recycle_refusal: str | None = None  # probed once: "" where pages can be moved, else why not


def move_pages(src: int, dst: int, nbytes: int) -> int:
    """Move ``nbytes`` of pages from ``src`` to ``dst`` (both page-aligned; before Linux 6.17 the source
    one mapping), leaving the source mapped and empty; 0 on success, else the errno."""
    got = _pylibc.mremap(ctypes.c_void_p(src), nbytes, nbytes, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP,
                       ctypes.c_void_p(dst))
    return ctypes.get_errno() or -1 if got in (None, _MAP_FAILED) else 0


def recycle_refusal() -> str:
    """Why this platform cannot move a page between two anonymous mappings (mremap with
    ``MREMAP_DONTUNMAP``: Linux >= 5.7), or "" where it can: probed once with two scratch pages."""
    global _recycle_refusal
    if _recycle_refusal is None:
        a = mmap.mmap(-1, PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        b = mmap.mmap(-1, PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        try:
            a[:1] = b"\x5a"
            src, dst = (ctypes.addressof(ctypes.c_char.from_buffer(m)) for m in (a, b))
            err = move_pages(src, dst, PAGE)
            _recycle_refusal = ("" if err == 0 and b[:1] == b"\x5a" else
                                f"mremap cannot move pages here ({os.strerror(err) if err > 0 else 'wrong bytes'}; "
                                "MREMAP_DONTUNMAP needs Linux >= 5.7)")
        finally:
            a.close()
            b.close()
    return _recycle_refusal


def release_advice_flag(advice: str, scope: str = "cache") -> int:
    """The madvise flag for ``advice``; a one-line ParamError for an unknown advice or one this
    platform lacks (``MADV_FREE`` needs Linux >= 4.5 and a Python built against it, ``recycle`` an
    mremap that moves pages: Linux >= 5.7): no fallback."""
    if advice not in RELEASE_ADVICES:
        raise ParamError(scope, "release_advice", f"{advice!r} is not one of {', '.join(RELEASE_ADVICES)}")
    flag = getattr(mmap, RELEASE_ADVICES[advice], None)
    if flag is None:
        raise ParamError(scope, "release_advice", f"{advice}: this platform's mmap has no "
                         f"{RELEASE_ADVICES[advice]} (Linux >= 4.5 needed)")
    if advice == "recycle" and recycle_refusal():
        raise ParamError(scope, "release_advice", f"recycle: {recycle_refusal()}")
    return flag



class Reservation:
    """``nbytes`` (rounded up to whole pages) of reserved, uncommitted anonymous memory.

    ``view`` is a writable memoryview of all of it; ``address`` is its (page-aligned) start. One more
    page is mapped after it and made inaccessible (``PROT_NONE``): a guard that keeps the kernel from
    merging it with an adjacent reservation into one mapping, so smaps reports each one's own pages.
    """

    def __init__(self, nbytes: int, release_advice: str = "dontneed"):
        if nbytes <= 0:
            raise ValueError(f"Reservation({nbytes}): need a positive size")
        self.release_advice, self._advice = release_advice, release_advice_flag(release_advice)
        self.nbytes = -(-nbytes // PAGE) * PAGE
        self._map = mmap.mmap(-1, self.nbytes + PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            self._map.madvise(mmap.MADV_NOHUGEPAGE)
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self._map))  # export dropped at once
        _libc.mprotect(ctypes.c_void_p(self.address + self.nbytes), PAGE, 0)  # PROT_NONE: the guard (best effort)
        self._whole = memoryview(self._map)
        self.view = self._whole[:self.nbytes]

    @property
    def pages(self) -> int:
        return self.nbytes // PAGE

    def release(self, first_page: int, n_pages: int) -> None:
        """Hand whole pages back with the release advice (``MADV_DONTNEED``: now; ``MADV_FREE``: lazily)."""
        if n_pages > 0:
            self._map.madvise(self._advice, first_page * PAGE, n_pages * PAGE)

    def move_in(self, source: "Reservation", first_page: int, to_page: int, n_pages: int) -> bool:
        """Move ``source``'s pages ``[first_page, +n_pages)`` to this reservation's ``[to_page, +n_pages)``
        (what was mapped there goes; the source pages are left mapped and empty, as after MADV_DONTNEED):
        no copy, no fault, no zeroing. False where the kernel refused because the source range spans two
        mappings (before Linux 6.17: ``EFAULT``), OSError for any other refusal (``ENOMEM``: the process
        is out of mappings, ``vm.max_map_count``): nothing moved either way."""
        if not (0 <= first_page and first_page + n_pages <= source.pages and 0 <= to_page
                and to_page + n_pages <= self.pages and n_pages > 0):
            raise ValueError(f"move_in({first_page}, {to_page}, {n_pages}): outside the reservations")
        err = move_pages(source.address + first_page * PAGE, self.address + to_page * PAGE, n_pages * PAGE)
        if err in (0, errno.EFAULT):
            return err == 0
        raise OSError(err, f"mremap of {n_pages} pages: {os.strerror(err) if err > 0 else 'failed'}")

    def resident_map(self) -> np.ndarray:
        """Per-page residency (bool) of the whole reservation, from mincore."""
        vec = np.zeros(self.pages, dtype=np.uint8)
        if _libc.mincore(ctypes.c_void_p(self.address), ctypes.c_size_t(self.nbytes), vec.ctypes.data) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mincore failed: {os.strerror(err)}")
        return (vec & 1).astype(bool)

    @property
    def span(self) -> tuple[int, int]:
        """Its address range, ``[start, end)``."""
        return self.address, self.address + self.nbytes

    def close(self) -> None:
        """Unmap; raises BufferError while slices of ``view`` are still alive."""
        if self._map.closed:
            return
        self.view.release()
        self._whole.release()
        self._map.close()


@dataclass(frozen=True)
class ProcessMemory:
    """The process's resident and anonymous bytes (``/proc/self/smaps_rollup``); -1 where unreadable."""

    rss_bytes: int
    anon_bytes: int


def process_memory(path: str = SMAPS_ROLLUP) -> ProcessMemory:
    """Read ``Rss`` and ``Anonymous`` (kB) from smaps_rollup; -1 each where the kernel has none (< 4.14)."""
    fields = {"Rss": -1, "Anonymous": -1}
    try:
        with open(path, encoding="ascii") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in fields:
                    fields[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return ProcessMemory(fields["Rss"], fields["Anonymous"])


def lazyfree_bytes(spans: Iterable[tuple[int, int]], path: str = SMAPS) -> int:
    """``LazyFree:`` summed over the mappings of ``/proc/self/smaps`` that overlap ``spans`` (address
    ranges): pages handed back with ``MADV_FREE`` that the kernel has not reclaimed yet, which mincore
    and RSS still count. A mapping the kernel merged with an adjacent one (only another anonymous
    mapping with the same flags: in practice another reservation) is counted whole, once. -1 where the
    kernel reports no ``LazyFree`` (< 4.12) or smaps is unreadable."""
    wanted = sorted(spans)
    total, seen, overlap = 0, False, False
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            for line in fh:
                head = line.split(None, 1)[0] if line.strip() else ""
                if "-" in head and not head.endswith(":"):  # a mapping's header: start-end perms ...
                    lo, _, hi = head.partition("-")
                    start, end = int(lo, 16), int(hi, 16)
                    overlap = any(a < end and start < b for a, b in wanted)
                elif head == "LazyFree:":
                    seen = True
                    if overlap:
                        total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return -1
    return total if seen else -1


def resident_and_lazyfree(maps: Iterable[Reservation]) -> tuple[int, int]:
    """Pages of ``maps`` mincore finds resident, and of those the lazily-freed ones (``LazyFree``): 0 when
    none was released with ``MADV_FREE`` (smaps is not read: ``MADV_DONTNEED`` leaves none), -1 where
    the kernel cannot say."""
    maps = list(maps)
    resident = sum(int(np.count_nonzero(m.resident_map())) for m in maps)
    lazy = [m.span for m in maps if m.release_advice == "free"]
    if not lazy:
        return resident, 0
    found = lazyfree_bytes(lazy)
    return resident, found // PAGE if found >= 0 else -1
