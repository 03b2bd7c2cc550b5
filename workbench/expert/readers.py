"""Readers that put one expert slice of a file into a destination region.

Contract of :meth:`SliceReader.read_into` ``(region, at, offset, nbytes, allow_in_place=False)``:
file bytes ``[offset, offset + nbytes)`` land at ``region[at : at + nbytes]``, and nothing outside
that range is written — unless the caller passes ``allow_in_place=True``, a promise (the write-up's
``allow_in_place``): any byte ``region[at + d]`` may receive file byte ``offset + d``, because the
region was placed for this read. An in-place reader may then let its aligned window overhang the
slice, but only inside ``region``. The promise is made per buffer by whoever placed it (the expert
cache for its own pages, ``odirect mode=inplace`` for a blob's reservation), never re-derived from
an address: a page-aligned tensor in an exactly sized buffer passes every alignment test and its
window still runs past the buffer's end (the dense-loader overrun of the write-up).

* ``pread`` — buffered ``preadv`` straight into the slice (no copy of ours; the page cache's own).
* ``pread-random`` — the same, on a descriptor advised ``POSIX_FADV_RANDOM``: the kernel reads the slice
  and no readahead around it. A miss is a random read of one expert; with the default readahead
  (read_ahead_kb 8192 on this workplace's 2-core VM) each one can fetch megabytes nobody asked for.
* ``direct-bounce`` — O_DIRECT reads the enclosing page-aligned window into a bounce buffer, then
  copies the payload out: ``nbytes`` of shift-copy per read.
* ``direct-inplace`` — where the caller promised the region, the destination carries the file's own
  remainder mod the page and the window fits the region, the window is read straight into the
  region: zero shift-copy bytes. Otherwise (no promise, wrong remainder, or a window that would
  overrun the region) it falls back to the bounce for that read and counts it.

Windows are whole pages: aligned for every logical block size up to a page, and the overhang of a
slice's window is exactly the partial pages at its ends.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from workbench.formats.opening import open_regular
from workbench.io.direct import AlignedBuffer, aligned_window, direct_io_support, open_direct, read_direct

PAGE = 4096
READERS = ("pread", "direct-bounce", "direct-inplace", "pread-random")


@dataclass(frozen=True)
class ReadOutcome:
    """One read: bytes moved from the file (the whole window for O_DIRECT), bytes memcpy'd out of a
    bounce buffer, whether the window went straight into place, and the seconds that copy took."""

    io_bytes: int
    shift_copy_bytes: int
    in_place: bool
    shift_copy_s: float = 0.0


class SliceReader(Protocol):
    """Puts file bytes into a region (see the module docstring for the in-place promise)."""

    name: str

    def read_into(self, region: memoryview, at: int, offset: int, nbytes: int,
                  allow_in_place: bool = False) -> ReadOutcome: ...

    def close(self) -> None: ...


def region_address(region: memoryview) -> int:
    """The address of a writable buffer's first byte."""
    return int(np.frombuffer(region, dtype=np.uint8).ctypes.data)


class BufferedReader:
    """Buffered ``preadv`` into the slice."""

    name = "pread"

    def __init__(self, path: str | os.PathLike):
        self._fd = open_regular(path)  # never waits on a FIFO or device put in the file's place

    def read_into(self, region: memoryview, at: int, offset: int, nbytes: int,
                  allow_in_place: bool = False) -> ReadOutcome:
        _check_request(region, at, nbytes)
        dest, done = region[at:at + nbytes], 0
        while done < nbytes:
            n = os.preadv(self._fd, [dest[done:]], offset + done)
            if n == 0:
                raise EOFError(f"file ends {nbytes - done} B short of slice [{offset}, {offset + nbytes})")
            done += n
        return ReadOutcome(nbytes, 0, False)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class RandomReader(BufferedReader):
    """Buffered ``preadv`` with readahead off for this descriptor (``POSIX_FADV_RANDOM``)."""

    name = "pread-random"

    def __init__(self, path: str | os.PathLike):
        super().__init__(path)
        os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)


class DirectBounceReader:
    """O_DIRECT window into a (growing, reused) bounce buffer, then the payload copied out. ``fd``: a
    descriptor of ``path`` the caller opened O_DIRECT and keeps (shared by readers; not closed here)."""

    name = "direct-bounce"

    def __init__(self, path: str | os.PathLike, fd: int | None = None):
        self._owns = fd is None
        self._fd = open_direct(path) if fd is None else fd
        self._bounce: AlignedBuffer | None = None

    def read_into(self, region: memoryview, at: int, offset: int, nbytes: int,
                  allow_in_place: bool = False) -> ReadOutcome:
        _check_request(region, at, nbytes)
        start, length, shift = aligned_window(offset, nbytes, PAGE)
        if self._bounce is None or self._bounce.nbytes < length:
            if self._bounce is not None:
                self._bounce.close()
            self._bounce = AlignedBuffer(length, PAGE)
        got = read_direct(self._fd, self._bounce.view, start, length)
        _check_got(got, shift + nbytes, offset, nbytes)
        t0 = time.perf_counter()
        region[at:at + nbytes] = self._bounce.view[shift:shift + nbytes]
        return ReadOutcome(got, nbytes, False, time.perf_counter() - t0)

    def close(self) -> None:
        if self._bounce is not None:
            self._bounce.close()
            self._bounce = None
        if self._fd >= 0 and self._owns:
            os.close(self._fd)
        self._fd = -1


class DirectInplaceReader(DirectBounceReader):
    """O_DIRECT window straight into the region when the caller promised it (``allow_in_place``), the
    destination's remainder matches the file's and the window fits; the bounce otherwise (counted in
    :attr:`fallbacks`)."""

    name = "direct-inplace"

    def __init__(self, path: str | os.PathLike, fd: int | None = None):
        super().__init__(path, fd)
        self.fallbacks = 0

    def read_into(self, region: memoryview, at: int, offset: int, nbytes: int,
                  allow_in_place: bool = False) -> ReadOutcome:
        _check_request(region, at, nbytes)
        start, length, shift = aligned_window(offset, nbytes, PAGE)
        lo = at - shift  # where the window's first byte would land in the region
        if not allow_in_place or (region_address(region) + at - offset) % PAGE:
            self.fallbacks += 1  # not promised, or not placed: the payload must be shifted
            return super().read_into(region, at, offset, nbytes)
        if lo < 0 or lo + length > len(region):
            self.fallbacks += 1  # the guard: the window would overhang the region the caller gave us
            return super().read_into(region, at, offset, nbytes)
        got = read_direct(self._fd, region[lo:lo + length], start, length)
        _check_got(got, shift + nbytes, offset, nbytes)
        return ReadOutcome(got, 0, True)


def resolve_reader(kind: str, path: str | os.PathLike) -> tuple[str, str]:
    """(the reader that can run on ``path``, note): ``kind``, or ``pread`` where O_DIRECT is refused
    (tmpfs, …) with a one-line note saying so ("" when it is the one asked for)."""
    if kind not in READERS:
        raise ValueError(f"unknown reader {kind!r}; known: {', '.join(READERS)}")
    if kind.startswith("pread"):
        return kind, ""
    support = direct_io_support(path)
    if not support:
        return "pread", f"{kind}: O_DIRECT refused ({support.reason}); buffered pread instead"
    return kind, ""


def make_reader(kind: str, path: str | os.PathLike) -> SliceReader:
    """A reader of ``kind`` on ``path`` as it is (no probe: :func:`resolve_reader` first)."""
    cls = {"pread": BufferedReader, "direct-bounce": DirectBounceReader, "direct-inplace": DirectInplaceReader,
           "pread-random": RandomReader}
    if kind not in cls:
        raise ValueError(f"unknown reader {kind!r}; known: {', '.join(READERS)}")
    return cls[kind](path)


def open_reader(kind: str, path: str | os.PathLike) -> tuple[SliceReader, str]:
    """(reader, note): the reader asked for, or buffered pread where O_DIRECT is refused (tmpfs, …),
    with a one-line note saying so ("" when the reader is the one asked for)."""
    resolved, note = resolve_reader(kind, path)
    return make_reader(resolved, path), note


def _check_request(region: memoryview, at: int, nbytes: int) -> None:
    if at < 0 or nbytes < 0 or at + nbytes > len(region):
        raise ValueError(f"slice of {nbytes} B at {at} does not fit a {len(region)} B region")


def _check_got(got: int, need: int, offset: int, nbytes: int) -> None:
    if got < need:
        raise EOFError(f"file ends {need - got} B short of slice [{offset}, {offset + nbytes})")
