"""``--memory-limit``: run a session under a real memory limit, and say how it was enforced.

In order of preference:

* a **memory cgroup** made for the session as a child of the cgroup this process runs in (so it stays
  inside whatever limit the machine already puts on us): cgroup v2 ``memory.max`` where the unified
  hierarchy has the memory controller, else v1 ``memory.limit_in_bytes``. The worker joins it first
  thing (:func:`join_cgroup`), so everything it allocates *and the page cache it reads in* is
  charged to it. Pages another process already cached stay charged to that process: start the
  session cold for the limit to hold the model's pages too;
* else a **locked balloon**: this process maps and ``mlock``\\ s what is available beyond the limit,
  leaving only that much to everything else for the session's length (the whole machine feels it);
* else a one-line refusal naming why neither worked.

Without swap the cost of a leak shows as reclaim of the page cache and re-reads (refaults, major
faults, bytes read from the disk again) and finally the OOM killer: :meth:`MemoryPressure.outcome`
says which happened.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from dataclasses import dataclass

from workbench.errors import ParamError

MiB = 1 << 20
METHODS = ("auto", "cgroup", "balloon")
_V1_ROOT, _V2_ROOTS = "/sys/fs/cgroup/memory", ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


@dataclass(frozen=True)
class MemoryLimit:
    """How the limit is enforced: ``cgroup-v2``, ``cgroup-v1`` or ``balloon``."""

    method: str
    limit_bytes: int
    path: str = ""  # the cgroup directory
    version: int = 0
    detail: str = ""

    def worker_json(self) -> dict:
        """What the worker needs to join the cgroup and read it ({} for a balloon)."""
        return {"path": self.path, "version": self.version} if self.path else {}


class MemoryPressure:
    """A memory limit held from ``__enter__`` to ``__exit__`` (``method``: auto, cgroup or balloon)."""

    def __init__(self, limit_mib: float, method: str = "auto"):
        if method not in METHODS:
            raise ParamError("session", "memory_limit_method", f"{method!r} is not one of {', '.join(METHODS)}")
        if not limit_mib > 0:
            raise ParamError("session", "memory_limit", f"must be > 0 MiB, got {limit_mib!r}")
        self.limit_bytes, self.method = int(limit_mib * MiB), method
        self.limit: MemoryLimit | None = None
        self._balloon: tuple[mmap.mmap, int, int] | None = None
        self._oom_before = 0

    def __enter__(self) -> "MemoryPressure":
        why = []
        if self.method in ("auto", "cgroup"):
            for make in (_make_v2, _make_v1):
                try:
                    self.limit = make(self.limit_bytes)
                    break
                except OSError as exc:
                    why.append(f"{make.__name__[6:]}: {exc.strerror or exc}")
        if self.limit is None and self.method in ("auto", "balloon"):
            try:
                self.limit = self._inflate()
            except OSError as exc:
                why.append(f"balloon: {exc.strerror or exc}")
        if self.limit is None:
            raise ParamError("session", "memory_limit", "cannot enforce it here: " + "; ".join(why))
        self._oom_before = self.oom_kills()
        return self

    def _inflate(self) -> MemoryLimit:
        available = _mem_available()
        size = available - self.limit_bytes
        if size <= 0:
            raise OSError(0, f"only {available / MiB:.0f} MiB available, not more than the limit")
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        if _libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) != 0:
            err = ctypes.get_errno()
            m.close()
            raise OSError(err, f"mlock of {size / MiB:.0f} MiB refused ({os.strerror(err)})")
        self._balloon = (m, addr, size)
        return MemoryLimit("balloon", self.limit_bytes, detail=f"balloon: {size / MiB:,.0f} MiB locked of "
                           f"{available / MiB:,.0f} MiB available, {self.limit_bytes / MiB:,.0f} MiB left for "
                           "everything")

    def oom_kills(self) -> int:
        """The cgroup's OOM kills so far (-1 for a balloon, or where the kernel keeps none)."""
        lim = self.limit
        if lim is None or not lim.path:
            return -1
        from workbench.expert.procstat import CgroupProbe

        return CgroupProbe(lim.path, lim.version).read().oom_kills

    def outcome(self, returncode: int | None, refaults: int, majflt: int, limit_hits: int) -> str:
        """Which cost the limit had: the OOM killer, reclaim and re-reads, or none seen."""
        kills = self.oom_kills()
        if kills > self._oom_before or (returncode == -9 and self.limit is not None and not self.limit.path):
            how = (f"cgroup oom_kill +{kills - self._oom_before}" if kills > self._oom_before
                   else "SIGKILL under a balloon")
            return f"OOM-killed ({how})"
        if refaults > 0 or limit_hits > 0:
            return (f"reclaim and re-reads: the limit was hit {max(0, limit_hits):,} times, {max(0, refaults):,} "
                    f"refaults, {majflt:,} major faults")
        return "no pressure seen (the session stayed under the limit)"

    def __exit__(self, *exc: object) -> None:
        if self._balloon is not None:
            m, addr, size = self._balloon
            _libc.munlock(ctypes.c_void_p(addr), ctypes.c_size_t(size))
            m.close()
            self._balloon = None
        if self.limit is not None and self.limit.path:
            _remove_cgroup(self.limit.path)


def join_cgroup(path: str) -> None:
    """Move the calling process into the cgroup at ``path`` (the worker's first act)."""
    with open(os.path.join(path, "cgroup.procs"), "w", encoding="ascii") as fh:
        fh.write(str(os.getpid()))


def _own_cgroup(version: int) -> str:
    """This process's cgroup in the v1 memory hierarchy (``version`` 1) or the unified one (2)."""
    with open("/proc/self/cgroup", encoding="ascii") as fh:
        for line in fh:
            ident, controllers, path = line.rstrip("\n").split(":", 2)
            if (version == 2 and ident == "0") or (version == 1 and "memory" in controllers.split(",")):
                return path
    raise OSError(0, f"not in a cgroup v{version} {'memory ' if version == 1 else ''}hierarchy")


def _child_dir(root: str, version: int) -> str:
    parent = os.path.join(root, _own_cgroup(version).lstrip("/"))
    path = os.path.join(parent, f"workbench-session-{os.getpid()}-{os.urandom(3).hex()}")
    os.mkdir(path)
    return path


def _make_v2(limit: int) -> MemoryLimit:
    root = next((r for r in _V2_ROOTS if os.path.exists(os.path.join(r, "cgroup.controllers"))), None)
    if root is None:
        raise OSError(0, "no unified hierarchy mounted")
    with open(os.path.join(root, "cgroup.controllers"), encoding="ascii") as fh:
        if "memory" not in fh.read().split():
            raise OSError(0, f"the unified hierarchy at {root} has no memory controller")
    path = _child_dir(root, 2)
    try:
        _write(os.path.join(path, "memory.max"), str(limit))
    except OSError:
        _remove_cgroup(path)
        raise
    swap = _read(os.path.join(path, "memory.swap.max")) or "n/a"
    return MemoryLimit("cgroup-v2", limit, path, 2, f"cgroup v2 {path}: memory.max {limit / MiB:,.0f} MiB, "
                       f"memory.swap.max {swap}")


def _make_v1(limit: int) -> MemoryLimit:
    if not os.path.exists(os.path.join(_V1_ROOT, "memory.limit_in_bytes")):
        raise OSError(0, f"no v1 memory controller at {_V1_ROOT}")
    path = _child_dir(_V1_ROOT, 1)
    try:
        _write(os.path.join(path, "memory.limit_in_bytes"), str(limit))
    except OSError:
        _remove_cgroup(path)
        raise
    swap = "no swap on this machine" if _swap_total() == 0 else "swap allowed"
    return MemoryLimit("cgroup-v1", limit, path, 1, f"cgroup v1 {path}: memory.limit_in_bytes "
                       f"{limit / MiB:,.0f} MiB ({swap})")


def _remove_cgroup(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass  # a process still in it (a worker that outlived us): the kernel refuses; nothing else to do


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(text)


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _meminfo(key: str) -> int:
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _mem_available() -> int:
    return _meminfo("MemAvailable")


def _swap_total() -> int:
    return _meminfo("SwapTotal")
