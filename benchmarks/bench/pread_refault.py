"""What a warm miss's read costs when its slot's pages were released (issue 34 §5): ``pread`` of one
expert slice from the page cache into anonymous memory that was ``MADV_DONTNEED``-ed just before (as the
expert cache releases an evicted slot: the read faults every page in and the kernel zeroes it), the same
after one ``MADV_POPULATE_WRITE`` call, after the slot's pages were handed back with ``MADV_FREE`` (no
memory pressure: they are still there), into pages moved in just before from another mapping where they
were resident (``release_advice=recycle``: one mremap, timed with the read), and into pages still
resident (the ring's pinned slots).

    python benchmarks/bench/pread_refault.py --file M.gguf [--slice 884736] [--reps 60] [--threads 1,4] [--huge-pages]

Per state and thread count (``--threads``: that many threads reading side by side, as lanes do): the
median µs of one slice and the aggregate GB/s; ``--reps`` slices a thread, each its own part of the
file's first GiB (the destination a mapping of that size), the file warmed first. ``--huge-pages``: the
destination asks for transparent huge pages (``MADV_HUGEPAGE``; the cache's reservations refuse them),
so a released slice splits the huge page it lies in, as it would in a cache with them.
"""
from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "probe"))
from probe_staging import parallel  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, installed or not
from workbench.expert.memory import Reservation, move_pages, recycle_refusal  # noqa: E402

MADV_DONTNEED, MADV_FREE, MADV_POPULATE_WRITE, PAGE = 4, 8, 23, 4096
_libc = ctypes.CDLL(None, use_errno=True)


def _madvise(addr: int, n: int, advice: int) -> None:
    if _libc.madvise(ctypes.c_void_p(addr), ctypes.c_size_t(n), advice) != 0:
        raise OSError(ctypes.get_errno(), f"madvise({advice})")


def measure(path: str, nbytes: int, reps: int, threads: int = 1, huge: bool = False) -> dict[str, tuple[float, float]]:
    """Per destination state: (median seconds of one slice's pread, aggregate GB/s of ``threads`` threads
    each reading ``reps`` slices of their own at once)."""
    span = -(-nbytes // PAGE) * PAGE
    size = min(os.path.getsize(path), 1 << 30) // span * span
    states = ("released", "released, populated first", "lazily freed", "moved in", "resident")
    if size < span * threads * reps * len(states):
        raise SystemExit(f"{path}: too small for {threads} thread(s) × {reps} slices × {len(states)} states of {nbytes} B "
                         f"(its first {size >> 20} MiB are used): fewer --reps")
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge:
        m.madvise(mmap.MADV_HUGEPAGE)  # before the first touch below: huge pages where the kernel has them
    base = np.frombuffer(m, dtype=np.uint8).ctypes.data
    spares = Reservation(span * threads * reps, "recycle") if not recycle_refusal() else None  # moved-in pages' source
    if spares is None:
        states = tuple(s for s in states if s != "moved in")
    slots = size // span
    try:
        os.preadv(fd, [memoryview(m)], 0)  # the file's first bytes warm, the destination touched
        result = {}
        for k, state in enumerate(states):  # each state its own slices: none reads bytes another left in the CPU's caches
            offs = [[((k + len(states) * (t + threads * i)) % slots) * span for i in range(reps)]
                    for t in range(threads)]
            for off in (o for per in offs for o in per):
                if state == "resident":
                    os.preadv(fd, [memoryview(m)[off:off + nbytes]], off)
                else:
                    _madvise(base + off, span, MADV_FREE if state == "lazily freed" else MADV_DONTNEED)
            if state == "moved in":  # each slice's pages resident in the spare mapping, to be moved in
                np.frombuffer(spares.view, dtype=np.uint8).fill(1)
            times: list[float] = []

            def lane(t: int) -> None:
                for i, off in enumerate(offs[t]):
                    dest = memoryview(m)[off:off + nbytes]
                    t0 = time.perf_counter()
                    if state == "released, populated first":
                        _madvise(base + off, span, MADV_POPULATE_WRITE)
                    elif state == "moved in" and move_pages(spares.address + (t * reps + i) * span, base + off, span):
                        raise OSError("mremap refused to move a slice's pages")
                    os.preadv(fd, [dest], off)
                    times.append(time.perf_counter() - t0)
                    dest.release()

            wall = parallel(threads, lane)
            for per in offs:  # each thread's first slice holds the file's bytes (moved-in pages' stale ones overwritten)
                if m[per[0]:per[0] + nbytes] != os.pread(fd, nbytes, per[0]):
                    raise SystemExit(f"{path}: a slice read into {state} pages does not hold the file's bytes")
            result[state] = (statistics.median(times), threads * reps * nbytes / wall / 1e9)
        return result
    finally:
        os.close(fd)
        del base
        m.close()
        if spares is not None:
            spares.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", required=True)
    ap.add_argument("--slice", type=int, default=884_736, help="bytes a slice (the A3B-like expert: 884,736)")
    ap.add_argument("--reps", type=int, default=60, help="slices a thread reads in each state")
    ap.add_argument("--threads", default="1", help="comma-separated thread counts, e.g. 1,4 (a lane each)")
    ap.add_argument("--huge-pages", action="store_true", help="the destination asks for transparent huge pages")
    args = ap.parse_args(argv)
    if args.huge_pages and not hasattr(mmap, "MADV_HUGEPAGE"):
        print("pread_refault: --huge-pages: this platform's mmap has no MADV_HUGEPAGE", file=sys.stderr)
        return 2
    for n in (int(x) for x in args.threads.split(",")):
        result = measure(args.file, args.slice, args.reps, n, args.huge_pages)
        print(f"pread of {args.slice:,} B from the page cache, {n} thread(s) at once, {args.reps} slices each"
              f"{', huge pages asked for' if args.huge_pages else ''}:")
        for state, (s, gbps) in result.items():
            print(f"  into {state} pages: median {s * 1e6:.0f} µs a slice ({args.slice / s / 1e9:.2f} GB/s), "
                  f"{gbps:.2f} GB/s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
