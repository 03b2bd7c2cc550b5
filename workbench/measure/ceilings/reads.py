"""Timed reads for the walls: ``threads`` threads preading one file, or every file of a model laid end
to end (a sharded model's read is its N files, one descriptor each), each thread its own contiguous share.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Sequence

from workbench.records import MiB

CHUNK = 4 * MiB  # per read call: large enough that syscall cost vanishes, small enough to stay in L2/L3


def read_all(path: str, size: int, threads: int, direct: bool, chunk: int = CHUNK) -> float:
    """Seconds for ``threads`` threads to pread the file, each its own contiguous share."""
    return read_files([(path, size)], threads, direct, chunk)


def read_files(files: Sequence[tuple[str, int]], threads: int, direct: bool, chunk: int = CHUNK) -> float:
    """Seconds for ``threads`` threads to pread every file: the files' bytes laid end to end, each
    thread its own contiguous share (which may run on into the next file), one descriptor per file."""
    from workbench.formats.opening import open_regular
    from workbench.io.descriptors import check_descriptors
    from workbench.io.direct import open_direct

    check_descriptors(files[0][0] if files else "", len(files))  # every file open at once: room, or one line
    fds: list[int] = []
    try:
        for path, _ in files:
            fds.append(open_direct(path) if direct else open_regular(path))
        plans = [[(fds[k], lo, hi) for k, lo, hi in share] for share in _shares([n for _, n in files], threads, chunk)]
        workers = [threading.Thread(target=_read_segments, args=(plan, direct, chunk)) for plan in plans]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return time.perf_counter() - t0
    finally:
        for fd in fds:
            os.close(fd)


def _shares(sizes: Sequence[int], threads: int, chunk: int) -> list[list[tuple[int, int, int]]]:
    """Each thread's (file number, first byte, end byte) segments: the total cut into ``threads``
    contiguous shares, whole chunks each (the last takes the rest)."""
    total = sum(sizes)
    share = max(chunk, -(-total // threads // chunk) * chunk)
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    out = []
    for lo in range(0, total, share):
        hi = min(total, lo + share)
        out.append([(k, max(lo, a) - a, min(hi, a + n) - a) for k, (a, n) in enumerate(zip(starts, sizes))
                    if n and a < hi and a + n > lo])
    return out


def _read_segments(segments: Sequence[tuple[int, int, int]], direct: bool, chunk: int = CHUNK) -> None:
    from workbench.io.direct import AlignedBuffer, read_direct

    with AlignedBuffer(chunk) as buf:
        for fd, lo, hi in segments:
            for off in range(lo, hi, chunk):
                n = min(chunk, hi - off)
                if direct:
                    read_direct(fd, buf.view, off, n)
                else:
                    os.preadv(fd, [buf.view[:n]], off)  # releases the GIL: threads really overlap
