"""``perf_event_open(2)`` through ctypes: per-CPU tracepoint events, their ring buffers, their records.

Only what :mod:`~workbench.io.fileevents.recorder` needs: a tracepoint event on one CPU, inherited by
every process the opening thread starts afterwards (``inherit``), sampling every hit with the task, the
time on ``CLOCK_MONOTONIC`` (comparable with :func:`time.monotonic`), the kernel call chain and the raw
tracepoint record; a kernel-side filter; one ring buffer per CPU that the other events of that CPU write
into; and the records read back from it (samples, forks and exits, lost-record counts).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct
from dataclasses import dataclass

_SYSCALL = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331}
PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT = 1, 2
SW_PAGE_FAULTS = 2
# sample_type bits
TID, TIME, ADDR, CALLCHAIN, RAW, IDENTIFIER = 1 << 1, 1 << 2, 1 << 3, 1 << 5, 1 << 10, 1 << 16
TRACE_SAMPLE = IDENTIFIER | TID | TIME | CALLCHAIN | RAW
FAULT_SAMPLE = IDENTIFIER | TID | TIME | ADDR
# attr flag bits
_DISABLED, _INHERIT, _MMAP, _TASK, _WATERMARK, _MMAP_DATA, _SAMPLE_ID_ALL, _NO_USER_CHAIN, _MMAP2, _USE_CLOCKID = (
    1 << 0, 1 << 1, 1 << 8, 1 << 13, 1 << 14, 1 << 17, 1 << 18, 1 << 22, 1 << 23, 1 << 25)
# ioctls (_IO('$', n), _IOW('$', n, ...), _IOR('$', n, u64 *))
_ENABLE, _DISABLE = 0x2400, 0x2401
_SET_OUTPUT = 0x2405
_SET_FILTER = 0x40082406
_ID = 0x80082407
# record types
RECORD_MMAP, RECORD_LOST, RECORD_EXIT, RECORD_FORK, RECORD_SAMPLE, RECORD_MMAP2 = 1, 2, 4, 7, 9, 10
CONTEXT_MARKERS = 0xFFFFFFFFFFFFF000  # PERF_CONTEXT_* entries in a call chain are at or above this
MAX_STACK = 8  # kernel frames kept per sample: a read path's callers (filemap_splice_read is the second)
CLOCK_MONOTONIC = 1


class _Attr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
                ("wakeup", ctypes.c_uint32), ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64),
                ("config2", ctypes.c_uint64), ("branch_sample_type", ctypes.c_uint64),
                ("sample_regs_user", ctypes.c_uint64), ("sample_stack_user", ctypes.c_uint32),
                ("clockid", ctypes.c_int32), ("sample_regs_intr", ctypes.c_uint64),
                ("aux_watermark", ctypes.c_uint32), ("sample_max_stack", ctypes.c_uint16),
                ("_reserved2", ctypes.c_uint16), ("aux_sample_size", ctypes.c_uint32),
                ("_reserved3", ctypes.c_uint32), ("sig_data", ctypes.c_uint64)]


@dataclass(frozen=True)
class Sample:
    """One hit of event ``id``: the process and thread, when (monotonic ns), and for a page fault its
    address, for a tracepoint its kernel call chain and raw record."""

    id: int
    pid: int
    tid: int
    time_ns: int
    addr: int = 0
    chain: tuple[int, ...] = ()
    raw: bytes = b""


@dataclass(frozen=True)
class Mapping:
    """A file mapping made by ``pid`` at ``time_ns``: [addr, addr + length) shows the file (device,
    inode) from byte ``pgoff``."""

    pid: int
    time_ns: int
    addr: int
    length: int
    pgoff: int
    key: tuple[int, int]


@dataclass(frozen=True)
class Task:
    """A fork or an exit: ``pid`` (its parent ``ppid``) at ``time_ns``."""

    kind: int
    pid: int
    ppid: int
    time_ns: int


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def open_faults(cpu: int) -> int:
    """A disabled, inherited event sampling every page fault a process takes on its own account (not
    those the kernel takes for it to populate a mapping) on ``cpu``, for this thread and every process it
    starts from now on, with their file mappings (``MMAP2``), forks and exits. Raises OSError."""
    return _open(PERF_TYPE_SOFTWARE, SW_PAGE_FAULTS, FAULT_SAMPLE, cpu, _MMAP | _MMAP_DATA | _MMAP2 | _TASK, -1)


def open_tracepoint(tracepoint_id: int, cpu: int, ring_fd: int) -> int:
    """A disabled, inherited event sampling every hit of ``tracepoint_id`` on ``cpu`` (its kernel call
    chain and raw record) into ``ring_fd``'s ring buffer. Raises OSError."""
    return _open(PERF_TYPE_TRACEPOINT, tracepoint_id, TRACE_SAMPLE, cpu, 0, ring_fd)


def _open(kind: int, config: int, sample_type: int, cpu: int, flags: int, ring_fd: int) -> int:
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(0, f"no perf_event_open system call number known for {platform.machine()}")
    attr = _Attr()
    attr.type, attr.size, attr.config = kind, ctypes.sizeof(_Attr), config
    attr.sample_period, attr.sample_type = 1, sample_type
    attr.flags = _DISABLED | _INHERIT | _SAMPLE_ID_ALL | _NO_USER_CHAIN | _USE_CLOCKID | _WATERMARK | flags
    attr.wakeup, attr.clockid, attr.sample_max_stack = 1 << 16, CLOCK_MONOTONIC, MAX_STACK
    libc = _libc()
    fd = libc.syscall(number, ctypes.byref(attr), 0, cpu, -1, ctypes.c_ulong(1 << 3))  # FD_CLOEXEC flag
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    if ring_fd >= 0:
        _ioctl(fd, _SET_OUTPUT, ring_fd)
    return fd


def event_id(fd: int) -> int:
    """The id an event's samples carry (an inherited copy's samples carry its parent's)."""
    libc = _libc()
    value = ctypes.c_uint64()
    if libc.ioctl(fd, ctypes.c_ulong(_ID), ctypes.byref(value)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return value.value


def set_filter(fd: int, expression: str) -> bool:
    """A kernel-side filter on a tracepoint event (ftrace's syntax); False when the kernel refuses it."""
    libc = _libc()
    buf = ctypes.create_string_buffer(expression.encode())
    return libc.ioctl(fd, ctypes.c_ulong(_SET_FILTER), buf) == 0


def enable(fd: int, on: bool = True) -> None:
    _ioctl(fd, _ENABLE if on else _DISABLE, 0)


def _ioctl(fd: int, request: int, arg: int) -> None:
    libc = _libc()
    if libc.ioctl(fd, ctypes.c_ulong(request), ctypes.c_ulong(arg)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"perf ioctl {request:#x}: {os.strerror(err)}")


class Ring:
    """The ring buffer of one event (1 + 2**k pages), read record by record."""

    def __init__(self, fd: int, data_pages: int):
        page = mmap.PAGESIZE
        self.size = data_pages * page
        self.map = mmap.mmap(fd, page + self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.base = page

    def drain(self, faults: set[int]) -> tuple[list[Sample], list[Task], list[Mapping], int]:
        """Every record written since the last drain: samples (``faults``: the ids of the page-fault
        events, whose samples have an address rather than a call chain), forks and exits, file mappings,
        records lost."""
        head = struct.unpack_from("<Q", self.map, 1024)[0]
        tail = struct.unpack_from("<Q", self.map, 1032)[0]
        samples: list[Sample] = []
        tasks: list[Task] = []
        maps: list[Mapping] = []
        lost = 0
        while tail < head:
            rtype, _misc, size = struct.unpack("<IHH", self._bytes(tail, 8))
            if size < 8:
                break
            body = self._bytes(tail + 8, size - 8)
            if rtype == RECORD_SAMPLE:
                samples.append(_sample(body, faults))
            elif rtype in (RECORD_FORK, RECORD_EXIT):
                pid, ppid, _tid, _ptid, t = struct.unpack_from("<IIIIQ", body)
                tasks.append(Task(rtype, pid, ppid, t))
            elif rtype == RECORD_MMAP2:
                maps.append(_mapping(body))
            elif rtype == RECORD_LOST:
                lost += struct.unpack_from("<QQ", body)[1]
            tail += size
        struct.pack_into("<Q", self.map, 1032, tail)
        return samples, tasks, maps, lost

    def _bytes(self, at: int, n: int) -> bytes:
        start = at % self.size
        if start + n <= self.size:
            return self.map[self.base + start:self.base + start + n]
        first = self.size - start
        return self.map[self.base + start:self.base + self.size] + self.map[self.base:self.base + n - first]

    def close(self) -> None:
        self.map.close()


def _sample(body: bytes, faults: set[int]) -> Sample:
    """A PERF_RECORD_SAMPLE: identifier, tid, time, then an address (:data:`FAULT_SAMPLE`) or a call
    chain and raw record (:data:`TRACE_SAMPLE`)."""
    ident, pid, tid, t = struct.unpack_from("<QIIQ", body)
    if ident in faults:
        return Sample(ident, pid, tid, t, addr=struct.unpack_from("<Q", body, 24)[0])
    nr = struct.unpack_from("<Q", body, 24)[0]
    at = 32
    chain = tuple(ip for ip in struct.unpack_from(f"<{nr}Q", body, at) if ip < CONTEXT_MARKERS)
    at += 8 * nr
    size = struct.unpack_from("<I", body, at)[0]
    return Sample(ident, pid, tid, t, chain=chain, raw=body[at + 4:at + 4 + size])


def _mapping(body: bytes) -> Mapping:
    """A PERF_RECORD_MMAP2 (its sample_id trailer: tid, time, identifier — the time is 16 bytes before
    the end)."""
    pid, _tid, addr, length, pgoff, major, minor, ino = struct.unpack_from("<IIQQQIIQ", body)
    t = struct.unpack_from("<Q", body, len(body) - 16)[0]
    return Mapping(pid, t, addr, length, pgoff, (os.makedev(major, minor), ino))


__all__ = ["Mapping", "Ring", "Sample", "Task", "enable", "event_id", "open_faults", "open_tracepoint", "set_filter"]
