"""Page-cache control for one file: measure residency (mincore), evict (fadvise), warm, and a verified
``prepare(path, "cold" | "warm")`` so a run is labelled with the cache state it really had.

mincore needs an address, and Python's ``mmap`` neither exposes one for a read-only map nor wraps
mincore, so the three calls go through ctypes on libc. Files are mapped and probed in windows of
:data:`MINCORE_WINDOW` bytes: a 100 GiB model is never mapped at once, and the map is never touched,
so probing does not fault a single page in.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np

from workbench.errors import CacheStateError, FormatError
from workbench.formats.opening import open_regular
from workbench.io.mounts import filesystem_type, mount_of  # noqa: F401 (mount_of: callers read it here too)

MINCORE_WINDOW = 1 << 30  # bytes mapped per mincore probe; tests shrink it
WARM_CHUNK = 8 << 20
COLD_SETTLE_S = 1.0  # how long eviction is retried before a cold state is called unreachable
# File systems whose file pages *are* the file: fadvise(DONTNEED) cannot drop them.
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"})
STATES = ("cold", "warm", "asis")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int64]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_MAP_FAILED = ctypes.c_void_p(-1).value


def page_size() -> int:
    """The kernel page size: the unit of residency, eviction and mincore."""
    return mmap.PAGESIZE


def stat_regular(path: str | os.PathLike) -> os.stat_result:
    """``os.stat`` of a regular file; FormatError for a missing path, a directory, a FIFO or a device."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FormatError(path, "path", "no such file") from None
    if not stat.S_ISREG(st.st_mode):
        what = "is a directory, not a file" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise FormatError(path, "path", what)
    return st


def _open_regular(path: str | os.PathLike) -> tuple[int, os.stat_result]:
    fd = open_regular(path)  # O_NONBLOCK, then fstat: a FIFO or device in its place is refused, never waited on
    return fd, os.fstat(fd)


def _span(size: int, offset: int, length: int | None) -> tuple[int, int]:
    """[first byte, end byte) of the request, clamped to the file."""
    if offset < 0 or (length is not None and length < 0):
        raise ValueError(f"negative offset/length: {offset}, {length}")
    end = size if length is None else min(size, offset + length)
    return min(offset, size), max(end, min(offset, size))


def _check_visible(path: str | os.PathLike, st: os.stat_result) -> None:
    # Since Linux 5.2 mincore reports page-cache residency of a file mapping only to its owner or to
    # someone who could open it for writing; anyone else sees zeros, which would read as "cold".
    if os.geteuid() == 0 or st.st_uid == os.geteuid() or os.access(path, os.W_OK):
        return
    raise CacheStateError(path, "measured", "mincore hides page-cache residency of files you neither "
                          "own nor can write (Linux >= 5.2); run as the file's owner")


def _mincore_window(fd: int, path: object, start: int, nbytes: int, out: np.ndarray) -> None:
    addr = _libc.mmap(None, nbytes, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if addr in (None, _MAP_FAILED):
        err = ctypes.get_errno()
        raise OSError(err, f"mmap for mincore failed: {os.strerror(err)}", str(path))
    try:
        if _libc.mincore(addr, nbytes, out.ctypes.data) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mincore failed: {os.strerror(err)}", str(path))
    finally:
        _libc.munmap(addr, nbytes)


def _windows(first_page: int, n_pages: int) -> Iterator[tuple[int, int]]:
    """(page index, page count) windows of at most MINCORE_WINDOW bytes."""
    per = max(1, MINCORE_WINDOW // page_size())
    for i in range(0, n_pages, per):
        yield first_page + i, min(per, n_pages - i)


def resident_map(path: str | os.PathLike, offset: int = 0, length: int | None = None) -> np.ndarray:
    """Per-page residency of ``[offset, offset + length)`` (clamped to the file).

    Returns
    -------
    numpy.ndarray of bool, one entry per page from page ``offset // page_size()`` to the page holding
    the last byte; empty for an empty range.
    """
    fd, st = _open_regular(path)
    try:
        _check_visible(path, st)
        lo, hi = _span(st.st_size, offset, length)
        ps = page_size()
        first, n_pages = lo // ps, (-(-hi // ps) - lo // ps) if hi > lo else 0
        vec = np.zeros(n_pages, dtype=np.uint8)
        for page, count in _windows(first, n_pages):
            _mincore_window(fd, path, page * ps, count * ps, vec[page - first : page - first + count])
        return (vec & 1).astype(bool)
    finally:
        os.close(fd)


def resident_pages(path: str | os.PathLike, offset: int = 0, length: int | None = None) -> tuple[int, int]:
    """(resident pages, total pages) of the range, via mincore."""
    rmap = resident_map(path, offset, length)
    return int(np.count_nonzero(rmap)), int(rmap.size)


def resident_fraction(path: str | os.PathLike, offset: int = 0, length: int | None = None) -> float:
    """Fraction of the range's pages in the page cache; 1.0 for an empty range (nothing to read)."""
    resident, total = resident_pages(path, offset, length)
    return resident / total if total else 1.0


def sampled_resident_fraction(path: str | os.PathLike, offset: int = 0, length: int | None = None,
                              samples: int = 256, pages: int = 16) -> float:
    """:func:`resident_fraction` from ``samples`` evenly spaced runs of ``pages`` pages.

    mincore costs ~0.1 µs per page in the kernel (14 ms for 512 MiB here, ~0.2 s for an 8 GB model):
    too slow inside a load window whose warm target is 0.2 s. 4096 sampled pages decide a gate. One
    mapping, one mincore per sample (never touched: nothing is faulted in). The whole range is
    probed when it is no bigger than the sample.
    """
    fd, st = _open_regular(path)
    try:
        _check_visible(path, st)
        lo, hi = _span(st.st_size, offset, length)
        ps = page_size()
        first, n_pages = lo // ps, (-(-hi // ps) - lo // ps) if hi > lo else 0
        if n_pages <= samples * pages:
            return resident_fraction(path, offset, length)
        return _mincore_samples(fd, path, first * ps, n_pages, samples, pages) / (samples * pages)
    finally:
        os.close(fd)


def _mincore_samples(fd: int, path: object, start: int, n_pages: int, samples: int, pages: int) -> int:
    ps, step = page_size(), (n_pages - pages) // max(1, samples - 1)
    addr = _libc.mmap(None, n_pages * ps, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if addr in (None, _MAP_FAILED):
        err = ctypes.get_errno()
        raise OSError(err, f"mmap for mincore failed: {os.strerror(err)}", str(path))
    vec, resident = np.zeros(pages, dtype=np.uint8), 0
    out = vec.ctypes.data
    try:
        for k in range(samples):
            if _libc.mincore(addr + k * step * ps, pages * ps, out) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore failed: {os.strerror(err)}", str(path))
            resident += int(np.count_nonzero(vec & 1))
    finally:
        _libc.munmap(addr, n_pages * ps)
    return resident


def evict_file_pages(path: str | os.PathLike, offset: int = 0, length: int | None = None) -> None:
    """Drop the range's clean pages from the page cache (fdatasync, then fadvise DONTNEED).

    The kernel drops whole folios only: it keeps a page the range covers partly (a neighbour may still
    need it), a large folio the range cuts (ext4 on Linux >= 6.16 caches freshly *written* data in
    large folios; data read back with readahead off sits in single pages) and any page a process has
    mapped or locked. :func:`prepare` verifies the result instead of trusting this.
    """
    fd, st = _open_regular(path)
    try:
        lo, hi = _span(st.st_size, offset, length)
        if hi <= lo:
            return
        try:
            os.fdatasync(fd)  # dirty pages cannot be dropped until written back
        except OSError as exc:  # squashfs, iso9660 …: no fsync at all, and nothing dirty to write
            if exc.errno not in (errno.EINVAL, errno.EROFS):
                raise
        os.posix_fadvise(fd, lo, 0 if hi >= st.st_size else hi - lo, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _read_chunks(fd: int, starts: list[int], hi: int) -> None:
    buf = bytearray(WARM_CHUNK)
    for s in starts:
        os.preadv(fd, [memoryview(buf)[: min(WARM_CHUNK, hi - s)]], s)


def warm_file(path: str | os.PathLike, offset: int = 0, length: int | None = None, threads: int = 1) -> None:
    """Read the range through the page cache so its pages become resident (``threads`` readers)."""
    fd, st = _open_regular(path)
    try:
        lo, hi = _span(st.st_size, offset, length)
        starts = list(range(lo, hi, WARM_CHUNK))
        threads = max(1, min(threads, len(starts)))
        if threads == 1:
            _read_chunks(fd, starts, hi)
            return
        with ThreadPoolExecutor(threads) as pool:  # interleaved chunks: readers stay near each other
            list(pool.map(lambda k: _read_chunks(fd, starts[k::threads], hi), range(threads)))
    finally:
        os.close(fd)


def _make_cold(path: str | os.PathLike, cold_max: float) -> float:
    fs = filesystem_type(path)
    if fs in MEMORY_FILESYSTEMS:
        raise CacheStateError(path, "cold", f"the file lives on {fs}, whose pages are the file itself "
                              "and cannot be dropped; put it on a disk-backed file system",
                              resident_fraction(path))
    deadline = time.monotonic() + COLD_SETTLE_S  # later passes catch pages under writeback during the
    while True:  # first, or still mapped by a process that is exiting (an engine killed just before)
        evict_file_pages(path)
        if (got := resident_fraction(path)) <= cold_max or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if got <= cold_max:
        return got
    raise CacheStateError(path, "cold", f"{got:.1%} of pages stay resident after fadvise(DONTNEED) on "
                          f"{fs} (mapped or locked by a process?); allowed {cold_max:.1%}", got)


def _make_warm(path: str | os.PathLike, warm_min: float) -> float:
    warm_file(path, threads=min(4, os.cpu_count() or 1))
    got = resident_fraction(path)
    if got >= warm_min:
        return got
    size = os.stat(path).st_size
    avail = os.sysconf("SC_AVPHYS_PAGES") * page_size()
    raise CacheStateError(path, "warm", f"only {got:.1%} resident after reading the whole file "
                          f"({size / 2**30:.2f} GiB file, {avail / 2**30:.2f} GiB free memory); "
                          f"needed {warm_min:.1%}", got)


def prepare(path: str | os.PathLike, state: str, *, cold_max: float = 0.02, warm_min: float = 0.98) -> float:
    """Put the file's pages in ``state`` ("cold", "warm" or "asis"), verify with mincore.

    Returns
    -------
    float
        The resident fraction measured after preparing (for an empty file: 0.0 cold, 1.0 otherwise).

    Raises
    ------
    CacheStateError
        When the state cannot be reached (a memory file system, too little memory to hold the file,
        pages pinned by a mapping) or mincore cannot see the file's residency.
    """
    if state not in STATES:
        raise CacheStateError(path, state, f"unknown cache state; expected one of {', '.join(STATES)}")
    if os.path.isfile(path) and os.stat(path).st_size == 0:
        return 0.0 if state == "cold" else 1.0
    try:
        if state == "cold":
            return _make_cold(path, cold_max)
        if state == "warm":
            return _make_warm(path, warm_min)
        return resident_fraction(path)
    except CacheStateError as exc:
        if exc.wanted != "measured":
            raise
        raise CacheStateError(path, state, exc.detail) from None


def page_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) index runs where ``mask`` is True."""
    if mask.size == 0:
        return []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))
