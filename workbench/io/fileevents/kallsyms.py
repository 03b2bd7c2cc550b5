"""The kernel's own functions' address ranges (``/proc/kallsyms``), to read a call chain by name.

A sample's kernel call chain says how a page was reached: a read call or a ``sendfile``/``splice``
(``filemap_splice_read``), a page fault of the process's own access or one made for it by the kernel
to populate a mapping (``populate_vma_page_range`` for ``MAP_POPULATE``/``mlock``, ``faultin_page_range``
for ``MADV_POPULATE_READ``). Addresses are readable by root; elsewhere they read as zeros and nothing
can be told (``None``).
"""
from __future__ import annotations

import bisect
import functools

SPLICE = ("filemap_splice_read",)
POPULATE = ("populate_vma_page_range", "faultin_page_range", "__mm_populate", "madvise_populate")
TERMINAL = ("flush_to_ldisc",)  # the work a write to a terminal queues


@functools.lru_cache(maxsize=1)
def ranges(names: tuple[str, ...] = SPLICE + POPULATE + TERMINAL) -> dict[str, tuple[int, int]] | None:
    """{name: [start, end)} of each of ``names`` this kernel has; None when addresses are hidden."""
    starts: list[int] = []
    found: dict[str, int] = {}
    try:
        with open("/proc/kallsyms") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) < 3 or parts[1] not in "tTwW":
                    continue
                addr = int(parts[0], 16)
                starts.append(addr)
                if parts[2] in names:
                    found[parts[2]] = addr
    except OSError:
        return None
    if not starts or max(starts) == 0:
        return None
    starts = sorted(set(starts))
    out = {}
    for name, addr in found.items():
        at = bisect.bisect_right(starts, addr)
        out[name] = (addr, starts[at] if at < len(starts) else addr + 1)
    return out


def within(chain: tuple[int, ...], spans: list[tuple[int, int]]) -> bool:
    """Whether any address of ``chain`` lies in one of ``spans``."""
    return any(lo <= ip < hi for ip in chain for lo, hi in spans)


__all__ = ["POPULATE", "SPLICE", "ranges", "within"]
