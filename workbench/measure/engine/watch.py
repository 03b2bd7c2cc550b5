"""A wake-up for the evidence sampler: inotify ``IN_OPEN`` on the model's files.

The sampler reads ``/proc`` every 0.1 s while the engine holds none of the model's files; an engine
that opens a shard, reads it and drops it inside that gap would be missed. With this watch the select
loop that waits for the engine's output also wakes the moment any of the model's files is opened, and
the sampler looks at the tree at once (and then often, while the file is held). inotify says only that
*some* process opened the file: it wakes the sampler, and its count of opens tells ``opened-only`` from
``none`` (grades that show no GB/s); it never credits a run. Where inotify is not available (another
kernel, a watch limit reached) the sampler keeps its fixed period.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Sequence

IN_OPEN = 0x00000020
_EVENT_HEADER = 16  # struct inotify_event: int wd; uint32 mask, cookie, len; then the name


class OpenWatch:
    """An inotify descriptor watching ``paths`` for opens; ``fileno()`` is readable after one."""

    def __init__(self, paths: Sequence[str]):
        self.fd = -1
        libc = _libc()
        if libc is None:
            return
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return
        watched = 0
        for path in paths:
            watched += libc.inotify_add_watch(fd, os.fsencode(path), IN_OPEN) >= 0
        if not watched:
            os.close(fd)
            return
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def drain(self) -> int:
        """Read every pending event; how many opens they reported."""
        opens = 0
        while self.fd >= 0:
            try:
                data = os.read(self.fd, 64 << 10)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            at = 0
            while at + _EVENT_HEADER <= len(data):
                length = int.from_bytes(data[at + 12:at + 16], "little")
                opens += bool(int.from_bytes(data[at + 4:at + 8], "little") & IN_OPEN)
                at += _EVENT_HEADER + length
        return opens

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes, libc.inotify_init1.restype = [ctypes.c_int], ctypes.c_int
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_add_watch.restype = ctypes.c_int
        return libc
    except (OSError, AttributeError):
        return None


__all__ = ["OpenWatch"]
