"""Read a file without changing its page-cache residency — for hashing and verification, which must
not warm a file that the next run expects cold, nor evict one it expects warm.

O_DIRECT when the file system takes it (the page cache is bypassed); otherwise buffered reads with
readahead off, after which exactly the pages that were not resident before the window are evicted.
"""
from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator, Sequence

import xxhash

from workbench.errors import FormatError
from workbench.formats.opening import open_regular
from workbench.io import pagecache
from workbench.io.cachestat import cached_pages
from workbench.io.direct import (
    AlignedBuffer,
    logical_block_size,
    open_direct,
    read_direct,
)

CHUNK = 8 << 20
MERGE_GAP = 1 << 20  # ranges closer than this are streamed as one span rather than two
RA_MARGIN = 64 << 20  # how far past a range the kernel's readahead may reach
MODES = ("auto", "direct", "buffered")


def _size(path: str | os.PathLike) -> int:
    return pagecache.stat_regular(path).st_size


def _iter_windows(lo: int, hi: int, align: int, chunk: int) -> Iterator[tuple[int, int]]:
    """(start, length) windows aligned to ``align`` that cover [lo, hi)."""
    chunk = max(align, chunk - chunk % align)
    pos, end = lo - lo % align, -(-hi // align) * align
    while pos < end:
        yield pos, min(chunk, end - pos)
        pos += chunk


def _iter_direct(path, lo: int, hi: int, chunk: int) -> Iterator[tuple[int, memoryview]]:
    fd = open_direct(path)
    block = max(logical_block_size(path), pagecache.page_size())
    buf = AlignedBuffer(max(block, chunk - chunk % block), block)
    try:
        for start, length in _iter_windows(lo, hi, block, chunk):
            got = read_direct(fd, buf.view, start, length)
            a, b = max(lo, start), min(hi, start + got)
            if b < min(hi, start + length):
                raise FormatError(path, "size", f"file shrank while reading (EOF at {start + got})")
            piece = buf.view[a - start : b - start]
            try:
                yield a, piece
            finally:
                piece.release()
    finally:
        os.close(fd)
        buf.close()


def _evict_missing(fd: int, start: int, before) -> None:
    ps = pagecache.page_size()
    for a, b in pagecache.page_runs(~before):
        os.posix_fadvise(fd, start + a * ps, (b - a) * ps, os.POSIX_FADV_DONTNEED)


RESTORE_DEADLINE_S = 5.0  # how long to wait out in-flight readahead before giving up (a loaded 2-core CI VM)


def _restore(path, fd: int, first: int, before) -> None:
    """Evict every page of the snapshot's span that was not resident in it (retrying pages under I/O)."""
    # An async readahead may still hold its pages locked (undroppable) or not have landed yet; on a
    # loaded machine that takes longer than a few ms, so retry against a deadline, backing off.
    # A clean look counts only when a second one, a moment later, agrees: readahead our reads
    # triggered can still be landing after the first (seen as a 1-in-6 test failure on this VM).
    # Where the kernel has cachestat, pages still under read I/O (in the cache, not yet up to date, so
    # invisible to mincore and not droppable) are counted too: a look is clean only when none are left.
    span = before.size * pagecache.page_size()
    deadline, pause, clean = time.monotonic() + RESTORE_DEADLINE_S, 0.002, 0
    while clean < 2 and time.monotonic() <= deadline:
        now = pagecache.resident_map(path, first, span)
        extra = now & ~before
        if extra.any():
            clean = 0
            _evict_missing(fd, first, ~extra)
        elif (cached_pages(fd, first, span) or 0) > int(now.sum()):
            clean = 0  # readahead still landing (no cachestat: None, mincore alone decides)
        else:
            clean += 1
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _iter_buffered(path, lo: int, hi: int, chunk: int) -> Iterator[tuple[int, memoryview]]:
    ps = pagecache.page_size()
    first = lo - lo % ps
    # One snapshot up front, reaching past the range: a page marked for async readahead (left by an
    # earlier ordinary read) starts readahead even under FADV_RANDOM, and the pages it brings in
    # must not pass for "resident before" when their window comes.
    before = pagecache.resident_map(path, first, min(_size(path), hi + RA_MARGIN) - first)
    fd = open_regular(path)  # never waits on a FIFO or device put in the file's place
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead of our own
    buf = bytearray(max(ps, chunk - chunk % ps))
    try:
        for start, length in _iter_windows(lo, hi, ps, chunk):
            a, b = max(lo, start), min(hi, start + length)
            view = memoryview(buf)[: b - a]
            try:
                if os.preadv(fd, [view], a) < b - a:
                    raise FormatError(path, "size", "file shrank while reading")
                yield a, view
            finally:
                view.release()
                k = (start - first) // ps  # evict as we go, so a cold 100 GiB read never fills memory
                _evict_missing(fd, start, before[k : k + length // ps])
    finally:
        try:
            _restore(path, fd, first, before)
        finally:
            os.close(fd)


def iter_untouched(path: str | os.PathLike, start: int = 0, end: int | None = None, chunk: int = CHUNK,
                   *, mode: str = "auto") -> Iterator[tuple[int, memoryview]]:
    """Yield ``(offset, bytes)`` covering ``[start, end)`` without changing the file's page-cache residency.

    Each memoryview is valid only until the next item (the buffer is reused). ``mode`` is "auto"
    (buffered when every page is resident already — nothing to evict, and faster than the disk —
    else O_DIRECT if it works here, else buffered), "direct" or "buffered".
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    size = _size(path)
    hi = size if end is None else min(end, size)
    if start < 0 or start > hi:
        raise FormatError(path, "range", f"start {start} outside [0, {hi}]")
    if hi == start:
        return
    if mode == "auto" and pagecache.resident_fraction(path, start, hi - start) == 1.0:
        mode = "buffered"
    if mode != "buffered":
        done = start
        try:
            for pos, data in _iter_direct(path, start, hi, chunk):
                yield pos, data
                done = pos + len(data)
            return
        except OSError as exc:
            # O_DIRECT refused (EINVAL where unsupported): in auto mode carry on buffered from where it stopped.
            if mode == "direct" or exc.errno != errno.EINVAL:
                raise
        start = done
    yield from _iter_buffered(path, start, hi, chunk)


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans: list[list[int]] = []
    for off, n in sorted(ranges):
        if spans and off <= spans[-1][1] + MERGE_GAP:
            spans[-1][1] = max(spans[-1][1], off + n)
        else:
            spans.append([off, off + n])
    return [(a, b) for a, b in spans if b > a]


class RangeHashers:
    """An xxh3_64 per ``(offset, nbytes)`` range of a ``size``-byte file, fed the file's bytes in order
    (``feed(offset, data)``, as :func:`iter_untouched` yields them, any chunking)."""

    def __init__(self, ranges: Sequence[tuple[int, int]], size: int, path: str | os.PathLike = ""):
        for off, n in ranges:
            if off < 0 or n < 0 or off + n > size:
                raise FormatError(path, "range", f"({off}, {n}) lies outside the {size}-byte file")
        self.ranges = [tuple(r) for r in ranges]
        self._hashers = [xxhash.xxh3_64() for _ in ranges]
        self._order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
        self._next, self._active = 0, []

    def feed(self, pos: int, data: memoryview) -> None:
        stop = pos + len(data)
        while self._next < len(self._order) and self.ranges[self._order[self._next]][0] < stop:
            self._active.append(self._order[self._next])
            self._next += 1
        for i in self._active:
            off, n = self.ranges[i]
            a, b = max(off, pos), min(off + n, stop)
            if b > a:
                self._hashers[i].update(data[a - pos : b - pos])
        self._active = [i for i in self._active if sum(self.ranges[i]) > stop]

    def digests(self) -> list[str]:
        return [h.hexdigest() for h in self._hashers]


def range_checksums(path: str | os.PathLike, ranges: Sequence[tuple[int, int]], *,
                    mode: str = "auto") -> list[str]:
    """xxh3_64 hex digest of each ``(offset, nbytes)`` range, in the order given, in one untouched pass.

    Compare with ``xxhash.xxh3_64(device_bytes).hexdigest()``.
    """
    hashers = RangeHashers(ranges, _size(path), path)
    for lo, hi in _merge([tuple(r) for r in ranges]):
        for pos, data in iter_untouched(path, lo, hi, mode=mode):
            hashers.feed(pos, data)
    return hashers.digests()
