"""The process's own counters a session turn records: I/O (``/proc/self/io``), memory and swap
(``/proc/self/status``), and, under a memory limit, the memory cgroup's ``memory.stat``.

Bytes by source come from the I/O counters: ``read_bytes`` is what the process caused to be fetched
from storage (O_DIRECT reads and readahead included), ``rchar`` every byte its read calls returned,
so ``rchar − read_bytes`` is (at least) what the page cache served. Both count every thread of the
process (the reader lanes too).

A cgroup is read through :class:`CgroupProbe` (v1 ``memory.*`` files or v2's); a counter the kernel
does not keep in that version is -1, never 0.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class IoCounters:
    rchar: int = 0
    read_bytes: int = 0


def read_io(path: str = "/proc/self/io") -> IoCounters:
    """``rchar`` and ``read_bytes`` (zeros where the kernel keeps no task I/O accounting)."""
    values = _keyed(path, ":")
    return IoCounters(values.get("rchar", 0), values.get("read_bytes", 0))


@dataclass(frozen=True)
class StatusMemory:
    """``VmRSS``, ``RssAnon``, ``VmSwap`` and ``RssFile`` (its mapped file pages: libraries, Python, a
    device's libraries) of the process, in bytes (-1 where absent)."""

    rss_bytes: int = -1
    anon_bytes: int = -1
    swap_bytes: int = -1
    file_bytes: int = -1


def read_status(path: str = "/proc/self/status") -> StatusMemory:
    values = _keyed(path, ":")
    kib = lambda key: values[key] * 1024 if key in values else -1  # noqa: E731
    return StatusMemory(kib("VmRSS"), kib("RssAnon"), kib("VmSwap"), kib("RssFile"))


@dataclass(frozen=True)
class CgroupMemory:
    """One reading of a memory cgroup (cumulative counters and the current usage); -1: not kept."""

    usage_bytes: int = -1
    pgmajfault: int = -1
    refaults: int = -1  # workingset refaults: pages read again soon after reclaim took them
    reclaimed: int = -1  # pages reclaim took (v2 pgsteal)
    limit_hits: int = -1  # v1 memory.failcnt, v2 memory.events max
    swap_bytes: int = -1
    swap_in: int = -1
    swap_out: int = -1
    oom_kills: int = -1
    lazyfreed: int = -1  # pages handed back with MADV_FREE that reclaim took (v2 pglazyfreed)

    def minus(self, earlier: "CgroupMemory") -> "CgroupMemory":
        """Counters as deltas, usage and swap as they are now (-1 stays -1)."""
        gauges = ("usage_bytes", "swap_bytes")
        out = {}
        for f in fields(self):
            now, then = getattr(self, f.name), getattr(earlier, f.name)
            out[f.name] = now if f.name in gauges or now < 0 or then < 0 else now - then
        return CgroupMemory(**out)


class CgroupProbe:
    """Reads the memory cgroup at ``path`` (``version`` 1 or 2)."""

    def __init__(self, path: str, version: int):
        if version not in (1, 2):
            raise ValueError(f"cgroup version {version!r}")
        self.path, self.version = path, version

    def read(self) -> CgroupMemory:
        return self._v1() if self.version == 1 else self._v2()

    def _v1(self) -> CgroupMemory:
        stat = _keyed(os.path.join(self.path, "memory.stat"), " ")
        get = lambda key: stat.get(f"total_{key}", stat.get(key, -1))  # noqa: E731
        refault = [get(k) for k in ("workingset_refault_file", "workingset_refault_anon") if get(k) >= 0]
        oom = _keyed(os.path.join(self.path, "memory.oom_control"), " ")
        return CgroupMemory(
            usage_bytes=_number(os.path.join(self.path, "memory.usage_in_bytes")), pgmajfault=get("pgmajfault"),
            refaults=sum(refault) if refault else get("workingset_refault"), reclaimed=-1,
            limit_hits=_number(os.path.join(self.path, "memory.failcnt")), swap_bytes=get("swap"),
            oom_kills=oom.get("oom_kill", -1))

    def _v2(self) -> CgroupMemory:
        stat = _keyed(os.path.join(self.path, "memory.stat"), " ")
        events = _keyed(os.path.join(self.path, "memory.events"), " ")
        refault = [stat[k] for k in ("workingset_refault_file", "workingset_refault_anon") if k in stat]
        return CgroupMemory(
            usage_bytes=_number(os.path.join(self.path, "memory.current")), pgmajfault=stat.get("pgmajfault", -1),
            refaults=sum(refault) if refault else -1, reclaimed=stat.get("pgsteal", -1),
            limit_hits=events.get("max", -1), swap_bytes=_number(os.path.join(self.path, "memory.swap.current")),
            swap_in=stat.get("pswpin", -1), swap_out=stat.get("pswpout", -1), oom_kills=events.get("oom_kill", -1),
            lazyfreed=stat.get("pglazyfreed", -1))


def _keyed(path: str, sep: str) -> dict[str, int]:
    """``key<sep> value [unit]`` lines → {key: int(value)}; {} when unreadable."""
    out: dict[str, int] = {}
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, rest = line.partition(sep)
                parts = rest.split()
                if parts and parts[0].lstrip("-").isdigit():
                    out[key.strip()] = int(parts[0])
    except OSError:
        pass
    return out


def _number(path: str) -> int:
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read().strip()
        return int(text) if text.lstrip("-").isdigit() else -1
    except (OSError, ValueError):
        return -1
