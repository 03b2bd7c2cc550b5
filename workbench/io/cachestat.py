"""cachestat(2) (Linux 6.5+): how many pages of a file range sit in the page cache, counted from the
cache's own index — including pages still under read I/O, which mincore does not report until they
are up to date. The difference between the two is the readahead still in flight over the range."""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform

_SYSCALL = {"x86_64": 451, "aarch64": 451, "riscv64": 451, "ppc64le": 451, "s390x": 451}.get(platform.machine())
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [("nr_cache", ctypes.c_uint64), ("nr_dirty", ctypes.c_uint64),
                ("nr_writeback", ctypes.c_uint64), ("nr_evicted", ctypes.c_uint64),
                ("nr_recently_evicted", ctypes.c_uint64)]


_unsupported = _SYSCALL is None


def cached_pages(fd: int, offset: int, length: int) -> int | None:
    """Pages of ``[offset, offset + length)`` in the page cache, up to date or not; None where the
    kernel has no cachestat (ENOSYS) or refuses it for this file."""
    global _unsupported
    if _unsupported or length <= 0:
        return None if _unsupported else 0
    rng, out = _Range(offset, length), _Stat()
    if _libc.syscall(_SYSCALL, ctypes.c_int(fd), ctypes.byref(rng), ctypes.byref(out), ctypes.c_uint(0)) != 0:
        if ctypes.get_errno() == errno.ENOSYS:
            _unsupported = True
        return None
    return int(out.nr_cache)


def available() -> bool:
    """Whether this kernel answers cachestat (asked on a throwaway descriptor)."""
    fd = os.open("/proc/self/exe", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return cached_pages(fd, 0, 4096) is not None
    finally:
        os.close(fd)
