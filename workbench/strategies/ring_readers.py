"""The ``ring`` strategy's reader threads: each takes a window, reads it and lands its pieces.

Staged (a GPU): pread the window into a free slot of the shared staging ring, issue the asynchronous
copies of its pieces from the reader itself, hand the slot back fenced behind them — or, with a
:class:`~workbench.upload.copier.Copier` (``copier=one``), hand the filled slot and its copies to the
copier's threads, the only ones that call the device. Direct (a device
whose memory is host memory, :meth:`~workbench.upload.base.Device.host_view`): pread each piece
straight into its tensor's buffer — the read is the upload, a staging hop would be a second memcpy of
every byte on the same cores.

Readers' time is summed per activity in the load's counters (``wait_us``: slot + fence, ``read_us``,
``issue_us``: copy calls, ``release_us``: fence records), and the first read's start is kept
(``first_read_ns``): what the readers' start cost the window before any byte streamed. ``lived_us`` sums
each reader's whole life (its first window to its last): what it spent outside every timed activity is
``lived_us`` less them (and less ``register_us``): its own Python between calls and waits for the GIL;
``end_spread_us`` is the first reader's end to the last's (imbalance: the window waits for the last);
``start_spread_us`` the first reader's start to the last's (the loading thread starts them one by one).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Sequence

from workbench.io.descriptors import ReaderFiles
from workbench.strategies.base import LoadContext
from workbench.strategies.toolkit import Evictor, StagingRing, pread_into, reader_opener
from workbench.upload.base import DeviceBuffer
from workbench.upload.copier import Copier
from workbench.upload.staged_read import Piece


class Readers:
    """What every reader thread shares: the ring (None: direct), the buffers, the evictor, the tallies."""

    TALLIES = ("wait_us", "read_us", "issue_us", "release_us")

    def __init__(self, ctx: LoadContext, ring: StagingRing | None, bufs: Sequence[DeviceBuffer],
                 evictor: Evictor, copier: Copier | None = None, together: bool = False):
        self.ctx, self.ring, self.bufs, self.evictor, self.copier = ctx, ring, bufs, evictor, copier
        self.go = threading.Event()  # together: set once every reader is started; otherwise set now
        if not together:
            self.go.set()
        self.views = None if ring is not None else [ctx.device.host_view(b) for b in bufs]
        self.first_read_ns: int | None = None  # perf_counter_ns of the earliest pread of any reader
        self.ends: list[int] = []  # perf_counter_ns each reader finished at
        self.births: list[int] = []  # perf_counter_ns each reader started at
        self._lock = threading.Lock()

    def run(self, windows: Any, stop: threading.Event) -> None:
        while not self.go.wait(0.05):  # start=together: held until every reader is started
            if stop.is_set():
                return
        born = time.perf_counter_ns()
        with self._lock:
            self.births.append(born)
        fds = ReaderFiles(reader_opener(self.ctx))  # this reader's own descriptors (its own readahead), a few at once
        ns = dict.fromkeys(self.TALLIES, 0)
        moved = 0
        one = self._direct if self.ring is None else self._staged if self.copier is None else self._handed
        try:
            for w in windows:
                if not one(fds.fd(w.file), w, stop, ns):
                    return
                moved += w.nbytes
        finally:
            fds.close()
            self.ctx.count("bytes", moved)
            for key, value in ns.items():
                self.ctx.count(key, value // 1000)
            end = time.perf_counter_ns()
            self.ctx.count("lived_us", (end - born) // 1000)
            with self._lock:
                self.ends.append(end)

    def _started(self, t: int, ns: dict[str, int]) -> None:
        if not ns["read_us"] and (self.first_read_ns is None or t < self.first_read_ns):
            with self._lock:
                if self.first_read_ns is None or t < self.first_read_ns:
                    self.first_read_ns = t

    def _direct(self, fd: int, w: Any, stop: threading.Event, ns: dict[str, int]) -> bool:
        if stop.is_set():
            return False
        t1 = time.perf_counter_ns()
        self._started(t1, ns)
        for p in w.pieces:
            with self.views[p.tensor][p.dst : p.dst + p.nbytes] as dst:
                pread_into(fd, dst, w.lo + p.start, w.file)
        self.evictor.drop(w.file, w.lo, w.hi - w.lo)  # only under the evict policy
        ns["read_us"] += time.perf_counter_ns() - t1
        return True

    def _take(self, stop: threading.Event, ns: dict[str, int]) -> tuple[Any, int] | None:
        """A free slot whose last copies are done (made now, the first time; with a copier its retirer
        waited the fence) and when it was had, the wait counted; None once ``stop`` is set."""
        t0 = time.perf_counter_ns()
        slot = self.ring.acquire(stop)
        if slot is None:
            return None
        t1 = time.perf_counter_ns()
        self._started(t1, ns)
        ns["wait_us"] += t1 - t0
        return slot, t1

    def _staged(self, fd: int, w: Any, stop: threading.Event, ns: dict[str, int]) -> bool:
        clock = time.perf_counter_ns
        taken = self._take(stop, ns)
        if taken is None:
            return False
        slot, t1 = taken
        try:
            with slot.view[: w.hi - w.lo] as view:
                pread_into(fd, view, w.lo, w.file)
                self.evictor.drop(w.file, w.lo, w.hi - w.lo)  # only under the evict policy
                t2 = clock()
                self.ring.filled(slot)  # first-read: registered now (counted in reader_provision_us)
                t2b = clock()
                copy = self.ctx.device.copy_h2d
                for p in w.pieces:
                    with view[p.start : p.start + p.nbytes] as src:
                        copy(self.bufs[p.tensor], p.dst, src, asynchronous=True)
                t3 = clock()
        finally:
            self.ring.release(slot)  # fenced behind the copies just issued, also on error
        t4 = clock()
        ns["read_us"] += t2 - t1
        ns["issue_us"] += t3 - t2b
        ns["release_us"] += t4 - t3
        return True

    def _handed(self, fd: int, w: Any, stop: threading.Event, ns: dict[str, int]) -> bool:
        """Staged with a :class:`Copier`: read into a free slot and hand it over with its copies — this
        thread makes no device call (``issue_us`` is the hand-over)."""
        clock = time.perf_counter_ns
        taken = self._take(stop, ns)
        if taken is None:
            return False
        slot, t1 = taken
        try:
            with slot.view[: w.hi - w.lo] as view:
                pread_into(fd, view, w.lo, w.file)
        except BaseException:
            self.ring.hand_back(slot)  # nothing was copied out of it: free as it is
            raise
        self.evictor.drop(w.file, w.lo, w.hi - w.lo)  # only under the evict policy
        t2 = clock()
        self.copier.submit(slot, [Piece(p.start, p.nbytes, self.bufs[p.tensor], p.dst) for p in w.pieces])
        ns["read_us"] += t2 - t1
        ns["issue_us"] += clock() - t2
        return True
