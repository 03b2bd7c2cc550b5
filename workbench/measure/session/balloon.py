"""A locked balloon for machines where no memory cgroup can be made, and the working set it must leave.

A balloon squeezes the *whole machine*, not the session: mlock what is available beyond a limit and
the kernel reclaims wherever its LRU points — the H200 run of 2026-12-03 left the session's anonymous
peak + 32 MiB for everything, and turns paid up to 2,208 major faults re-reading the process's own
libraries (``compute_s`` 2.7–8.3 s against 0.05–0.4 s). So a balloon leaves the session its limit
**plus the machine's own working set**, measured when it inflates:

    left = limit + working set,   working set = Mapped + the session worker's file-backed set

* ``Mapped`` (/proc/meminfo): file pages mapped into some process's page tables — every running
  process's libraries and executables (this runner's among them): what reclaim would turn into
  major faults. Unmapped page cache (``Active(file)`` beyond it: files read earlier, other models)
  is not a working set a process faults on; it is recorded beside the rule, not left room for.
* the worker's own mapped file pages (``RssFile``: Python, numpy, a device's libraries, touched by a
  warm-up turn) — it does not run yet when the balloon inflates, so the caller passes what it
  measured (an unlimited session's largest ``file_rss_bytes``); without one, this runner's own
  ``RssFile`` stands in (the same interpreter and libraries; a worker that opens a GPU maps more),
  and the detail says which. Libraries both processes map are counted twice: an overestimate of at
  most this runner's ``RssFile``, which leaves the machine more room, never less.

The worker's part is also what it may lock: after its warm-up turn it locks (``mlock``) its own resident
file pages, at most that many bytes (:mod:`workbench.io.own_pages`), so the squeeze cannot take its
libraries the way a cgroup's limit would not. Locking adds no memory (the pages are already resident
and already counted in the room left), it only takes them off the reclaim lists.

Inflating is mlock of the balloon in chunks from several threads at once (the page zeroing and the
reclaim it forces are the cost: ~60 s for ~123 GB from one thread on the H200): it is done once,
before the session's worker starts, so no turn is timed while it fills; hold one balloon over all the
cells of an A/B (:func:`workbench.measure.session.runner.measure_session`'s ``pressure``). Locked memory
is the process's: it is freed by the kernel when the process dies, however it dies.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from workbench.io.proc_status import status_bytes

MiB = 1 << 20
_MLOCK_ONFAULT, _MADV_POPULATE_WRITE = 1, 23
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


@dataclass(frozen=True)
class WorkingSet:
    """What a balloon leaves for the machine beside the session's limit, and how it was measured."""

    mapped_bytes: int  # /proc/meminfo Mapped at inflation
    worker_file_bytes: int  # the session worker's RssFile (measured by the caller, or this runner's)
    worker_measured: bool  # True: the caller measured the worker's; False: this runner's stood in
    active_file_bytes: int  # /proc/meminfo Active(file): recorded, not left room for

    @property
    def bytes(self) -> int:
        return self.mapped_bytes + self.worker_file_bytes

    def text(self) -> str:
        who = "the worker's file-backed set as measured" if self.worker_measured else \
            "this runner's file-backed set standing in for the worker's"
        return (f"the machine's working set {self.bytes / MiB:,.0f} MiB = Mapped {self.mapped_bytes / MiB:,.0f} MiB + "
                f"{who} {self.worker_file_bytes / MiB:,.0f} MiB (Active(file) {self.active_file_bytes / MiB:,.0f} "
                "MiB, not left room for)")


def measure_working_set(worker_file_bytes: int | None = None) -> WorkingSet:
    """The machine's working set now (see the module doc)."""
    own = status_bytes("RssFile") or 0
    measured = worker_file_bytes is not None and worker_file_bytes >= 0
    return WorkingSet(meminfo("Mapped"), int(worker_file_bytes) if measured else own, measured,
                      meminfo("Active(file)"))


class Balloon:
    """``size`` bytes of anonymous memory, locked (and so resident) until :meth:`deflate`."""

    def __init__(self, size: int, threads: int | None = None):
        if size <= 0:
            raise OSError(0, "nothing to lock")
        self.size = size
        self.threads = max(1, min(threads or os.cpu_count() or 1, 16, size // (64 * MiB) or 1))
        self._map: mmap.mmap | None = None
        self.addr = 0
        self.inflate_s = 0.0

    def inflate(self) -> "Balloon":
        """Lock the whole range (on fault), then fault it in chunk by chunk from :attr:`threads` threads;
        OSError (the balloon gone) when refused."""
        t0 = time.perf_counter()
        self._map = mmap.mmap(-1, self.size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._map.madvise(mmap.MADV_DONTFORK)  # a worker forked now must not copy its page tables (GBs of them)
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        # one VMA flag change for all of it, then populating takes only the read side of mmap_lock, so the
        # threads fault in parallel (a mlock per chunk would queue each on the write side)
        onfault = _libc.mlock2(ctypes.c_void_p(self.addr), ctypes.c_size_t(self.size), _MLOCK_ONFAULT) == 0
        chunk = -(-self.size // self.threads // mmap.PAGESIZE) * mmap.PAGESIZE
        spans = [(off, min(chunk, self.size - off)) for off in range(0, self.size, chunk)]
        with ThreadPoolExecutor(len(spans)) as pool:  # ctypes releases the GIL: the chunks fault in parallel
            errors = [e for e in pool.map(lambda s: self._lock(*s, onfault), spans) if e]
        if errors:
            self.deflate()
            raise OSError(errors[0], f"mlock of {self.size / MiB:,.0f} MiB refused ({os.strerror(errors[0])})")
        self.inflate_s = time.perf_counter() - t0
        return self

    def _lock(self, offset: int, length: int, onfault: bool) -> int:
        where, n = ctypes.c_void_p(self.addr + offset), ctypes.c_size_t(length)
        if onfault and _libc.madvise(where, n, _MADV_POPULATE_WRITE) == 0:
            return 0
        return 0 if _libc.mlock(where, n) == 0 else ctypes.get_errno()  # no MADV_POPULATE_WRITE (< 5.14)

    def deflate(self) -> None:
        if self._map is not None:
            _libc.munlock(ctypes.c_void_p(self.addr), ctypes.c_size_t(self.size))
            self._map.close()
            self._map = None


def meminfo(key: str) -> int:
    """One /proc/meminfo field in bytes (0 where absent)."""
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0
