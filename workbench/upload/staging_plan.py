"""How much staging a load gets, and how many readers: sized to the load, the machine's usable cores
and its available memory, never to a fixed ring.

A staged load's fixed cost is mostly its staging (on the H200, 2026-12-03: 20 x 8 MiB of registered
slots cost 28-43 ms of a 50 ms load of 256 MiB, first touching the pages most of it), and its streaming
part is the page cache read by its readers. So a small load gets fewer readers (each reads at least
``min_share`` bytes: a reader that reads less costs its slot and its start for little), smaller windows
(each reader gets about ``per_reader`` of them, down to one huge page), and no more slots than its
windows fill (:func:`size_ring`). Readers never outnumber the cores this process may run on
(``os.sched_getaffinity``): a warm read from the page cache is a memcpy in the kernel, CPU work, and on
the 2-core VM (2026-12-02) 16 readers on 2 cores split the ring's runs between 84-128 and 360-876 ms.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

MiB = 1 << 20
HUGE = 2 * MiB  # a window of whole huge pages: a smaller slot is made of 4 KiB pages (3x slower to touch)
MEMORY_SHARE = 8  # staging never takes more than 1/MEMORY_SHARE of the memory available when it is sized


def size_ring(slots: int, slot_bytes: int, windows: list[int] | tuple[int, ...]) -> tuple[int, int]:
    """(slots, slot bytes) for staging ``windows`` (their sizes): a slot no larger than the largest
    window (page-rounded), and no more slots than there are windows or than their bytes fill, rounded up
    to a whole slot — a small model never provisions much more pinned memory than it reads
    (provisioning costs ~0.2 s/GiB inside the window: 20 x 8 MiB for a 10 MiB model was 94 % waste)."""
    if not windows:
        return 1, min(slot_bytes, mmap.PAGESIZE)
    largest = -(-max(windows) // mmap.PAGESIZE) * mmap.PAGESIZE
    size = max(mmap.PAGESIZE, min(slot_bytes, largest))
    fill = -(-sum(windows) // size)
    return max(1, min(slots, len(windows), fill)), size


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count`` where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """``MemAvailable`` from /proc/meminfo in bytes (None where it cannot be read)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@dataclass(frozen=True)
class WarmFit:
    """What a warm staged load of ``total`` bytes gets: ``readers`` threads, ``window`` bytes per read,
    and why (``why``: the limits that applied, for the engaged fact)."""

    readers: int
    window: int
    why: str


FEW = 8  # readers a load gets before ``crowd`` applies


def fit_warm(total: int, threads: int, window: int, *, spare: int, min_share: int = 16 * MiB,
             per_reader: int = 4, cores: int | None = None, memory: int | None = None,
             crowd: int = 0) -> WarmFit:
    """Readers and window for a warm load of ``total`` bytes, at most ``threads`` readers and
    ``window``-byte windows (see the module docstring): readers ≤ usable cores and ≤ total/min_share,
    and (``crowd``) more than :data:`FEW` only at one per ``crowd`` bytes — every reader's device calls
    (registration, copies, fences) queue on the driver's lock;
    the window about total/(readers × per_reader), a whole number of huge pages, at most ``window``;
    (readers + spare) windows of staging ≤ 1/8 of the available memory (smaller windows first, down to
    a huge page, then fewer readers)."""
    cores = usable_cores() if cores is None else cores
    why = []
    by_share = -(-total // max(min_share, 1))
    by_crowd = max(FEW, total // crowd) if crowd else threads
    readers = max(1, min(threads, cores, by_share, by_crowd))
    if readers < threads:
        limits = [f"{cores} usable cores" if readers == cores else
                  f"{total / MiB:.0f} MiB at >= {min_share / MiB:g} MiB a reader" if readers == by_share else
                  f"{total / MiB:.0f} MiB: more than {FEW} readers only at one per {crowd / MiB:g} MiB"]
        why.append(f"{readers} of {threads} readers ({limits[0]})")
    fitted = total // (readers * max(per_reader, 1)) // HUGE * HUGE
    size = max(min(HUGE, window), min(window, fitted))
    if size < window:
        why.append(f"{size / MiB:g} MiB windows, not {window / MiB:g} (about {per_reader} a reader)")
    memory = available_memory() if memory is None else memory
    if memory:
        room = memory // MEMORY_SHARE
        before = (readers, size)
        while size > HUGE and (readers + spare) * size > room:  # smaller windows first, then fewer readers
            size = max(HUGE, size // 2 // HUGE * HUGE)
        while readers > 1 and (readers + spare) * size > room:
            readers -= 1
        if (readers, size) != before:
            why.append(f"{readers} readers of {size / MiB:g} MiB: staging within 1/{MEMORY_SHARE} of the "
                       f"{memory / MiB:.0f} MiB available")
    return WarmFit(readers, size, "; ".join(why))
