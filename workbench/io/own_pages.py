"""Lock this process's own resident file pages (its libraries), so a machine-wide squeeze cannot evict them.

Why: under a memory cgroup the pages of Python, torch and the CUDA libraries stay charged to the process
that first cached them (the runner), so the session's limit never reclaims them — the pressure stays on
the model's pages and the session's own memory. A locked balloon (:mod:`workbench.measure.session.balloon`)
squeezes the whole machine instead, and the kernel's reclaim takes whatever its LRU points at: on the
H200 (2026-12-03) a session's own library pages, re-read at 2,088–4,778 major faults per cell, with
``compute_s`` 3.5–30 s against ~0.06 s a turn unlimited. :func:`pin_own_file_pages` gives the worker the
protection a cgroup would: it walks ``/proc/self/maps`` and ``mlock``\\ s the *resident* runs of each
file mapping (``mincore``, narrowed by ``/proc/self/pagemap`` to the pages this process has mapped:
its own working set, what ``RssFile`` counts, not every page another process keeps cached) — never a
page that is not resident, so nothing untouched is read in — leaving out the files named (the model's,
by device and inode, or by path).

Mappings left out, and why:

* not a regular file (``[heap]``, ``[vdso]``, devices such as ``/dev/nvidia*``, a deleted file);
* writable private ones (``rw-p``: a library's data): locking one breaks copy-on-write — the kernel
  copies every page into anonymous memory — which is memory the session's limit counts, not a file page;
* the model's files (a session reads them and never maps them; left out in case something does).

``budget_bytes`` caps what is locked (the room a balloon left for the worker's file pages), executable
mappings first (code is what faults back). Where ``mlock`` is refused (``RLIMIT_MEMLOCK`` for a user
without ``CAP_IPC_LOCK``), what was locked stays locked and the note says why the rest is not.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import resource
import stat
import time
from dataclasses import asdict, dataclass
from typing import Iterable

import numpy as np

from workbench.io.proc_status import status_bytes

PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 1 << 20
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


@dataclass(frozen=True)
class FileMapping:
    """One line of /proc/self/maps that maps a file."""

    start: int
    end: int
    perms: str  # "r-xp"
    dev: tuple[int, int]  # (major, minor) as the maps line gives it
    inode: int
    path: str


@dataclass(frozen=True)
class PinReport:
    """What :func:`pin_own_file_pages` locked, and how long it took."""

    locked_bytes: int  # the resident runs locked
    resident_bytes: int  # resident in the mappings considered (locked or not)
    mappings: int  # file mappings considered
    seconds: float
    vmlck_bytes: int  # /proc/self/status VmLck after locking (-1 unreadable): everything the process has locked
    note: str = ""  # why some resident pages were not locked ("" when all were)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "PinReport":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def text(self) -> str:
        head = (f"the worker locked {self.locked_bytes / MiB:,.1f} MiB of its own resident file pages "
                f"({self.mappings} mappings) in {self.seconds * 1e3:,.0f} ms after turn 0")
        return f"{head}; {self.note}" if self.note else head


def file_mappings(exclude: Iterable[str] = (), maps: str = "/proc/self/maps") -> list[FileMapping]:
    """This process's readable mappings of regular files that are read-only or shared, less the files in
    ``exclude`` (matched by device and inode, and by real path). A ``---p`` guard region is left out:
    ``mlock`` of an inaccessible range fails with ENOMEM."""
    keys, paths = set(), set()
    for path in exclude:
        try:
            st = os.stat(path)
        except OSError:
            continue
        keys.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
        paths.add(os.path.realpath(path))
    out = []
    with open(maps, encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            parts = line.rstrip("\n").split(None, 5)
            if len(parts) < 6 or not parts[5].startswith("/") or parts[5].endswith(" (deleted)"):
                continue
            span, perms, _off, dev, inode, path = parts
            major, minor = (int(x, 16) for x in dev.split(":"))
            if int(inode) == 0 or not perms.startswith("r") or ("w" in perms and perms.endswith("p")):
                continue
            if (major, minor, int(inode)) in keys or os.path.realpath(path) in paths or not _regular(path):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            out.append(FileMapping(start, end, perms, (major, minor), int(inode), path))
    return out


def resident_runs(start: int, length: int, mapped_only: bool = True) -> list[tuple[int, int]]:
    """(address, bytes) of each run of resident pages in ``[start, start + length)`` of this process's
    address space: resident in the page cache (``mincore``) and, with ``mapped_only``, in this process's
    page tables too (``/proc/self/pagemap``'s present bit: pages it touched, what ``RssFile`` counts) —
    not pages another process keeps cached. Nothing is touched or read in. Where pagemap cannot be read,
    mincore alone decides."""
    n = -(-length // PAGE)
    if n == 0:
        return []
    vec = np.zeros(n, dtype=np.uint8)
    if _libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(n * PAGE), vec.ctypes.data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mincore failed: {os.strerror(err)}")
    on = vec & 1
    present = _present(start, n) if mapped_only else None
    if present is not None:
        on &= present
    edges = np.flatnonzero(np.diff(np.concatenate(([0], on, [0])).astype(np.int8)))
    return [(start + int(a) * PAGE, int(b - a) * PAGE) for a, b in zip(edges[::2], edges[1::2])]


def _present(start: int, n: int, pagemap: str = "/proc/self/pagemap") -> np.ndarray | None:
    """Bit 63 of each page's pagemap entry (present in the page tables), or None where unreadable."""
    try:
        fd = os.open(pagemap, os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.pread(fd, n * 8, start // PAGE * 8)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) != n * 8:
        return None
    return (np.frombuffer(raw, dtype="<u8") >> np.uint64(63)).astype(np.uint8)


def lock_range(start: int, length: int) -> int:
    """``mlock`` one range: 0, or the errno it was refused with."""
    return 0 if _libc.mlock(ctypes.c_void_p(start), ctypes.c_size_t(length)) == 0 else ctypes.get_errno()


def pin_own_file_pages(exclude: Iterable[str] = (), budget_bytes: int | None = None) -> PinReport:
    """Lock the resident runs of this process's file mappings (see the module doc)."""
    t0 = time.perf_counter()
    maps = sorted(file_mappings(exclude), key=lambda m: ("x" not in m.perms, m.start))  # code first
    runs = []
    for m in maps:
        try:
            runs += resident_runs(m.start, m.end - m.start)
        except OSError:  # a mapping gone or changed since maps was read: nothing of it to lock
            continue
    resident = sum(n for _, n in runs)
    locked, refused, over = 0, 0, False
    for addr, n in runs:
        if budget_bytes is not None and locked + n > budget_bytes:
            over, n = True, (budget_bytes - locked) // PAGE * PAGE  # as much of this run as the room allows
        refused = lock_range(addr, n) if n else 0
        if over and not refused:
            locked += n
            break
        if refused:
            break
        locked += n
    note = ""
    if refused:
        note = f"mlock refused after {locked / MiB:,.1f} MiB ({_why(refused)}): the rest is not locked"
    elif over:
        note = (f"{(resident - locked) / MiB:,.1f} MiB of them not locked: the balloon left room for "
                f"{budget_bytes / MiB:,.1f} MiB of the worker's file pages")
    return PinReport(locked, resident, len(maps), time.perf_counter() - t0, vmlck_bytes(), note)


def vmlck_bytes(status: str = "/proc/self/status") -> int:
    """VmLck of a process (bytes; -1 where unreadable)."""
    value = status_bytes("VmLck", status)
    return -1 if value is None else value


def _why(err: int) -> str:
    if err in (errno.ENOMEM, errno.EPERM) and not _can_lock_any():
        soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
        limit = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft / MiB:,.1f} MiB"
        return f"{os.strerror(err)}: RLIMIT_MEMLOCK {limit} for a user without CAP_IPC_LOCK"
    return os.strerror(err)


def _can_lock_any() -> bool:
    """CAP_IPC_LOCK (bit 14) in this process's effective capabilities: RLIMIT_MEMLOCK does not apply."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            eff = next(int(line.split()[1], 16) for line in fh if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return False
    return bool(eff >> 14 & 1)


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False
