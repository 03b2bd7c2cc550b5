"""What a warm miss's read costs when its slot's pages were released (issue 34 §5): ``pread`` of one
expert slice from the page cache into anonymous memory that was ``MADV_DONTNEED``-ed just before (as the
expert cache releases an evicted slot: the read faults every page in and the kernel zeroes it), the same
after one ``MADV_POPULATE_WRITE`` call, and into pages still resident (as after ``MADV_FREE`` without
memory pressure, or the ring's pinned slots).

    python benchmarks/bench/pread_refault.py --file M.gguf [--slice 884736] [--reps 60]

Prints the median µs and GB/s of each, ``--reps`` slices each (each its own part of the file's first
256 MiB, the states interleaved), on one thread, the file warmed first.
"""
from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import statistics
import sys
import time

import numpy as np

MADV_DONTNEED, MADV_POPULATE_WRITE, PAGE = 4, 23, 4096
_libc = ctypes.CDLL(None, use_errno=True)


def _madvise(addr: int, n: int, advice: int) -> None:
    if _libc.madvise(ctypes.c_void_p(addr), ctypes.c_size_t(n), advice) != 0:
        raise OSError(ctypes.get_errno(), f"madvise({advice})")


def measure(path: str, nbytes: int, reps: int) -> dict[str, float]:
    """Median seconds of one slice's pread by the destination's state."""
    span = -(-nbytes // PAGE) * PAGE
    size = min(os.path.getsize(path), 256 << 20) // span * span
    if size < span:
        raise SystemExit(f"{path}: smaller than one slice of {nbytes} B")
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = np.frombuffer(m, dtype=np.uint8).ctypes.data
    try:
        os.preadv(fd, [memoryview(m)], 0)  # the file's first bytes warm, the destination touched
        times: dict[str, list[float]] = {"released": [], "released, populated first": [], "resident": []}
        for i in range(reps):
            for k, state in enumerate(times):  # each its own slice: no state reads bytes another left in the CPU's caches
                off = ((i * len(times) + k) * span) % size
                dest = memoryview(m)[off:off + nbytes]
                if state != "resident":
                    _madvise(base + off, span, MADV_DONTNEED)
                t0 = time.perf_counter()
                if state == "released, populated first":
                    _madvise(base + off, span, MADV_POPULATE_WRITE)
                os.preadv(fd, [dest], off)
                times[state].append(time.perf_counter() - t0)
                dest.release()
        return {state: statistics.median(ts) for state, ts in times.items()}
    finally:
        os.close(fd)
        del base
        m.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", required=True)
    ap.add_argument("--slice", type=int, default=884_736, help="bytes a slice (the A3B-like expert: 884,736)")
    ap.add_argument("--reps", type=int, default=60)
    args = ap.parse_args(argv)
    result = measure(args.file, args.slice, args.reps)
    print(f"pread of {args.slice:,} B from the page cache, one thread, median of {args.reps}:")
    for state, s in result.items():
        print(f"  into {state} pages: {s * 1e6:.0f} µs, {args.slice / s / 1e9:.2f} GB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
