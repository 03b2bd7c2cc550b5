"""Staged reads: file ranges into device buffers through a :class:`~workbench.upload.staging.StagingRing`,
by reader threads that pread a window into a slot and issue the window's asynchronous copies themselves.

This is the ``ring`` strategy's pipeline as a piece anything can use — the ``experts`` strategy's
staged upload, a session's lanes — for any set of :class:`Extent` s (a range of a file bound for a
device buffer at an offset), not only a whole file's tensors:

* :func:`plan_windows` packs extents, file by file in the order given, into windows of at most
  ``size`` bytes starting on a page (an extent crossing a window edge is split there; a gap wider
  than ``max_gap`` starts a new window rather than being read). Consecutive pieces that continue each
  other in the file and in one device buffer (a packed expert blob's members) become one copy.
* :func:`split_shares` cuts windows into contiguous runs of about equal bytes, one per reader (the
  cold plan: each reader streams its own part of the file with its own readahead); :class:`SharedQueue`
  hands windows out in order to whichever reader asks next (the warm plan).
* :class:`StagedReader` runs readers over such sources (:meth:`~StagedReader.read`) or reads one window
  on the calling thread (:meth:`~StagedReader.read_window`, for a caller with its own threads). Each
  reader holds its own descriptor per file. Time per activity is summed in a :class:`StagedTally`.

The copies are in flight when a read returns: the caller synchronizes the device (or closes the ring,
which waits for every slot's fence) before it uses the bytes. Staging memory is only ever written by
the CPU (the preads) and read by the device: write-combined slots stay safe.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

from workbench.errors import FormatError
from workbench.formats.opening import open_regular
from workbench.io.descriptors import ReaderFiles
from workbench.upload.base import Device, DeviceBuffer
from workbench.upload.staging import StagingRing

PAGE = 4096
MAX_GAP = 64 << 10  # a gap up to this is read with its neighbours (one pread); a wider one splits


class Extent(NamedTuple):
    """``nbytes`` of ``file`` at ``offset``, bound for ``buffer`` at ``dst``."""

    file: str
    offset: int
    nbytes: int
    buffer: DeviceBuffer
    dst: int = 0


class Piece(NamedTuple):
    start: int  # offset inside the window
    nbytes: int
    buffer: DeviceBuffer
    dst: int


class Window(NamedTuple):
    file: str
    lo: int  # file offsets, [lo, hi): what one pread reads
    hi: int
    pieces: tuple[Piece, ...]

    @property
    def nbytes(self) -> int:
        """Bytes copied to the device (the read may be longer: page rounding, small gaps)."""
        return sum(p.nbytes for p in self.pieces)


def plan_windows(extents: Iterable[Extent], size: int, max_gap: int = MAX_GAP) -> list[Window]:
    """Windows of at most ``size`` bytes over ``extents`` (see the module docstring); zero-byte extents
    need no copy and are left out."""
    if size < PAGE:
        raise ValueError(f"a window must hold at least a page, got {size} B")
    windows: list[Window] = []
    file, lo, hi, pieces = "", 0, 0, []  # the window being filled
    for e in extents:
        pos, left, dst = e.offset, e.nbytes, e.dst
        while left > 0:
            if not pieces or e.file != file or pos - hi > max_gap or pos < hi or pos >= lo + size:
                if pieces:
                    windows.append(Window(file, lo, hi, tuple(pieces)))
                file, lo, pieces = e.file, pos - pos % PAGE, []
                hi = lo
            n = min(left, lo + size - pos)
            _add_piece(pieces, Piece(pos - lo, n, e.buffer, dst))
            hi = pos + n
            pos, dst, left = pos + n, dst + n, left - n
    if pieces:
        windows.append(Window(file, lo, hi, tuple(pieces)))
    return windows


def _add_piece(pieces: list[Piece], p: Piece) -> None:
    """Append ``p``, or extend the last piece when ``p`` continues it in the window and in its buffer."""
    if pieces:
        last = pieces[-1]
        if last.buffer is p.buffer and last.start + last.nbytes == p.start and last.dst + last.nbytes == p.dst:
            pieces[-1] = last._replace(nbytes=last.nbytes + p.nbytes)
            return
    pieces.append(p)


def split_shares(windows: Sequence[Window], readers: int) -> list[list[Window]]:
    """``windows`` in order, cut into at most ``readers`` contiguous runs of about equal bytes read."""
    total = sum(w.hi - w.lo for w in windows)
    share = max(1, -(-total // max(readers, 1)))
    shares: list[list[Window]] = [[]]
    done = 0
    for w in windows:
        if shares[-1] and done >= share * len(shares):
            shares.append([])
        shares[-1].append(w)
        done += w.hi - w.lo
    return [s for s in shares if s]


class SharedQueue:
    """Windows handed out in order to whichever reader asks next; iterate it from every reader."""

    def __init__(self, windows: Sequence[Window]):
        self.windows, self._next, self._lock = windows, 0, threading.Lock()

    def __iter__(self) -> Iterator[Window]:
        while True:
            with self._lock:
                i, self._next = self._next, self._next + 1
            if i >= len(self.windows):
                return
            yield self.windows[i]


@dataclass(frozen=True)
class StagedTally:
    """What staged reads did: windows, bytes copied, bytes read, and readers' time per activity (µs,
    summed over readers): waiting for a slot and its fence, pread, issuing copies, recording fences."""

    windows: int = 0
    bytes: int = 0
    read_bytes: int = 0
    wait_us: int = 0
    read_us: int = 0
    issue_us: int = 0
    release_us: int = 0

    def __add__(self, other: "StagedTally") -> "StagedTally":
        return StagedTally(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def counters(self) -> dict[str, int]:
        """As load counters (``bytes`` left out: a strategy counts its moved bytes itself)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "bytes"}


class StagedReader:
    """Reads windows into ``ring``'s slots and issues their copies to ``device``.

    ``open_file(path) -> fd`` opens a reader's own descriptor of a file (default: ``os.open``
    read-only; a strategy passes one that also checks the file did not change since indexing);
    ``after_read(file, offset, nbytes)`` runs after each pread (a strategy's eviction policy).
    """

    def __init__(self, device: Device, ring: StagingRing, *, open_file: Callable[[str], int] | None = None,
                 after_read: Callable[[str, int, int], None] | None = None):
        self.device, self.ring = device, ring
        self.open_file = open_file or _open_read_only
        self.after_read = after_read
        self._lock = threading.Lock()
        self.tally = StagedTally()

    def read(self, sources: Sequence[Iterable[Window]]) -> StagedTally:
        """One reader thread per source (a list of windows, or the same :class:`SharedQueue` given
        several times); blocks until every window is read and its copies issued. The first error any
        reader raises stops the others and is raised here. Returns what these readers did."""
        stop = threading.Event()
        errors: list[BaseException] = []
        tallies: list[StagedTally] = []

        def run(source: Iterable[Window]) -> None:
            try:
                tallies.append(self._run(source, stop))
            except BaseException as exc:  # noqa: BLE001 - raised by read(), in the calling thread
                errors.append(exc)
                stop.set()

        threads = [threading.Thread(target=run, args=(s,), daemon=True, name=f"staged-{k}")
                   for k, s in enumerate(sources)]
        try:
            for t in threads:
                t.start()
        finally:
            for t in threads:
                if t.ident is not None:
                    t.join()
        if errors:
            raise errors[0]
        total = sum(tallies, StagedTally())
        with self._lock:
            self.tally = self.tally + total
        return total

    def _run(self, windows: Iterable[Window], stop: threading.Event) -> StagedTally:
        fds = ReaderFiles(self.open_file)  # this reader's own descriptors (its own readahead), a few at once
        tally = StagedTally()
        try:
            for w in windows:
                if stop.is_set():  # another reader failed: stop at a window boundary
                    break
                one = self.read_window(fds.fd(w.file), w, stop)
                if one is None:
                    break
                tally = tally + one
        finally:
            fds.close()
        return tally

    def read_window(self, fd: int, w: Window, stop: threading.Event | None = None) -> StagedTally | None:
        """Read window ``w`` through ``fd`` (a descriptor of ``w.file``) into a slot and issue its copies;
        None when ``stop`` was set while waiting for a slot."""
        clock = time.perf_counter_ns
        t0 = clock()
        slot = self.ring.acquire(stop)  # a free slot whose last copies are done
        if slot is None:
            return None
        t1 = clock()
        try:
            with slot.view[: w.hi - w.lo] as view:
                _pread_full(fd, view, w.lo, w.file)
                if self.after_read is not None:
                    self.after_read(w.file, w.lo, w.hi - w.lo)
                t2 = clock()
                self.ring.filled(slot)  # first-read: registered now (counted in the ring's reader_provision_s)
                t2b = clock()
                copy = self.device.copy_h2d
                for p in w.pieces:
                    with view[p.start : p.start + p.nbytes] as src:
                        copy(p.buffer, p.dst, src, asynchronous=True)
                t3 = clock()
        finally:
            self.ring.release(slot)  # fenced behind the copies just issued, also on error
        t4 = clock()
        return StagedTally(1, w.nbytes, w.hi - w.lo, (t1 - t0) // 1000, (t2 - t1) // 1000,
                           (t3 - t2b) // 1000, (t4 - t3) // 1000)


def _open_read_only(path: str) -> int:
    return open_regular(path)  # never waits on a FIFO or device put in the file's place


def _pread_full(fd: int, view: Any, offset: int, path: str) -> None:
    """Fill all of ``view`` from the file at ``offset``, looping over short reads."""
    done, total = 0, len(view)
    while done < total:
        with view[done:] as rest:
            n = os.preadv(fd, [rest], offset + done)
        if n == 0:
            raise FormatError(path, "size", f"end of file at {offset + done}, wanted {offset + total}: "
                                            "truncated since it was indexed?")
        done += n
