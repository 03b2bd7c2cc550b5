"""Anonymous reservations an expert cache lives in, and what the process really holds.

A :class:`Reservation` is a private anonymous mapping: reserving it commits nothing, a page is
committed the first time it is written, and ``madvise(MADV_DONTNEED)`` hands it back (the next read
of it sees zeros). Transparent huge pages are switched off for it — with THP one written byte could
commit 2 MiB and a 4 KiB release would split or keep it, and page accounting would mean nothing.

What is really resident is measured two ways: :meth:`Reservation.resident_map` asks mincore about the
reservation's own pages (exact, and blind to everything else the process does), and
:func:`process_memory` reads the whole process's ``Rss`` / ``Anonymous`` from
``/proc/self/smaps_rollup`` (what an operator or the OOM killer sees).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from dataclasses import dataclass

import numpy as np

PAGE = mmap.PAGESIZE
SMAPS_ROLLUP = "/proc/self/smaps_rollup"

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


class Reservation:
    """``nbytes`` (rounded up to whole pages) of reserved, uncommitted anonymous memory.

    ``view`` is a writable memoryview of all of it; ``address`` is its (page-aligned) start.
    """

    def __init__(self, nbytes: int):
        if nbytes <= 0:
            raise ValueError(f"Reservation({nbytes}): need a positive size")
        self.nbytes = -(-nbytes // PAGE) * PAGE
        self._map = mmap.mmap(-1, self.nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            self._map.madvise(mmap.MADV_NOHUGEPAGE)
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self._map))  # export dropped at once
        self.view = memoryview(self._map)

    @property
    def pages(self) -> int:
        return self.nbytes // PAGE

    def release(self, first_page: int, n_pages: int) -> None:
        """``madvise(MADV_DONTNEED)`` over whole pages: the kernel takes them back now."""
        if n_pages > 0:
            self._map.madvise(mmap.MADV_DONTNEED, first_page * PAGE, n_pages * PAGE)

    def resident_map(self) -> np.ndarray:
        """Per-page residency (bool) of the whole reservation, from mincore."""
        vec = np.zeros(self.pages, dtype=np.uint8)
        if _libc.mincore(ctypes.c_void_p(self.address), ctypes.c_size_t(self.nbytes), vec.ctypes.data) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mincore failed: {os.strerror(err)}")
        return (vec & 1).astype(bool)

    def close(self) -> None:
        """Unmap; raises BufferError while slices of ``view`` are still alive."""
        if self._map.closed:
            return
        self.view.release()
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
