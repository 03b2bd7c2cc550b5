"""An event record of what a process tree did to some files, from the kernel, as it happened.

Opened before the tree is started, by the thread that starts it: inherited perf events on every CPU
(:mod:`~workbench.io.fileevents.perf`), so every process the thread starts afterwards — children,
grandchildren, a loader started late — is recorded, and a file opened, read and closed in a microsecond
is recorded like any other. Per file (device, inode) it keeps the pages:

- **read**: asked for by a read call (``read``, ``pread``, ``readv``, io_uring, O_DIRECT; the
  ``mm_filemap_get_pages`` and ``iomap_dio_rw_begin`` tracepoints, filtered in the kernel to the files'
  inodes) — copied into the process's memory;
- **spliced**: the same tracepoint reached through ``filemap_splice_read`` (``sendfile``, ``splice``,
  ``copy_file_range``) — moved to a pipe or another file, never into the process's memory;
- **touched**: a page fault the process took on its own access in one of its mappings of the file
  (perf's page-fault event samples the address; ``MMAP2`` records say which file each mapping shows,
  forks hand a parent's mappings to the child). One fault maps up to a 2 MiB folio, so a fault credits
  the 2 MiB-aligned stretch of the file around it: the unit of a touch is what one fault can map. Faults
  the kernel takes *for* a process — ``MAP_POPULATE``, ``MADV_POPULATE_READ``, ``mlock`` — raise no
  such event: those pages are mapped, never shown to be read;
- **mapped**: the file's bytes its mappings covered.

Records whose kernel time lies outside the window are dropped, so reads before the start marker or after
the end marker never count. Records the kernel dropped (a ring buffer that overflowed) are counted.
"""
from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from workbench.io.fileevents import kallsyms, perf
from workbench.io.fileevents.tracepoints import Tracepoint, tracepoints

PAGE = 4096  # the tracepoints count in page-cache indexes of PAGE_SIZE
TOUCH_UNIT = 2 << 20  # what one page fault can map: a PMD-sized folio (x86-64, arm64 with 4 KiB pages)
RING_BUDGET_PAGES = 16384  # 64 MiB of locked ring buffers over all CPUs: 8 MiB each on 8 CPUs or fewer
IOCB_WRITE = 1 << 18  # an O_DIRECT write (iomap's ki_flags) is not a read
KINDS = ("read", "touched", "spliced", "mapped")

FileKey = tuple[int, int]


class EventsUnavailable(Exception):
    """Why no event record can be made here (one line)."""


@dataclass(frozen=True)
class FileEvents:
    """Per file (in the order given): bytes each kind of access reached in the window, and ``credited``:
    bytes read or touched (each page once). ``processes``: processes with events on the files;
    ``started``: processes the tree started; ``lost``: records the kernel dropped."""

    read: tuple[int, ...]
    touched: tuple[int, ...]
    spliced: tuple[int, ...]
    mapped: tuple[int, ...]
    credited: tuple[int, ...]
    processes: int = 0
    started: int = 0
    events: int = 0
    lost: int = 0


@dataclass
class FileEventRecorder:
    """The perf events and what they recorded so far; :meth:`result` reads the window once."""

    keys: tuple[FileKey | None, ...]
    sizes: tuple[int, ...]
    points: dict[str, Tracepoint]
    splice: list[tuple[int, int]]
    flush: int = 0  # flush_to_ldisc's address: the work a write to a terminal queues (0: unknown)
    fds: list[int] = field(default_factory=list)
    rings: list[perf.Ring] = field(default_factory=list)
    ids: dict[int, str] = field(default_factory=dict)  # event id -> "faults" or a tracepoint's short name
    samples: list[perf.Sample] = field(default_factory=list)
    maps: list[perf.Mapping] = field(default_factory=list)
    tasks: list[perf.Task] = field(default_factory=list)
    lost: int = 0
    spans: list[tuple[int, int]] = field(default_factory=list)  # every mapping of the files seen, any process
    _pending: list[perf.Sample] = field(default_factory=list)

    @classmethod
    def open(cls, keys: Sequence[FileKey | None], sizes: Sequence[int]) -> FileEventRecorder:
        """Start recording for the files ``keys`` (device, inode); raises :class:`EventsUnavailable`."""
        points, why = tracepoints()
        if why:
            raise EventsUnavailable(why)
        chains = kallsyms.ranges()
        if chains is None or "filemap_splice_read" not in chains:
            raise EventsUnavailable("/proc/kallsyms hides the kernel's addresses (not root?): a read cannot be "
                                    "told from sendfile")
        rec = cls(tuple(keys), tuple(sizes), points, [chains[n] for n in kallsyms.SPLICE if n in chains],
                  chains.get("flush_to_ldisc", (0, 0))[0])
        try:
            rec._open_events()
        except OSError as exc:
            rec.close()
            raise EventsUnavailable(f"perf_event_open refused ({exc.strerror or exc})") from None
        return rec

    def _open_events(self) -> None:
        inodes = sorted({k[1] for k in self.keys if k is not None}) or [0]
        cpus = _online_cpus()
        pages = 1 << max(6, min(11, (RING_BUDGET_PAGES // len(cpus)).bit_length() - 1))  # a power of two
        for cpu in cpus:
            ring = perf.open_faults(cpu)
            self.fds.append(ring)
            self.ids[perf.event_id(ring)] = "faults"
            self.rings.append(perf.Ring(ring, pages))
            for short, point in self.points.items():
                fd = perf.open_tracepoint(point.id, cpu, ring)
                self.fds.append(fd)
                self.ids[perf.event_id(fd)] = short
                if short == "tty":  # its output: writes to a terminal
                    perf.set_filter(fd, f"function == {self.flush:#x}")  # else: filtered here
                    continue
                name = "ino" if short == "dio" else "i_ino"
                perf.set_filter(fd, " || ".join(f"{name} == {i}" for i in inodes))  # else: filtered here
        for fd in self.fds:
            perf.enable(fd)

    def drain(self) -> None:
        """Move what the rings hold into memory (call it often: a full ring loses records). Only page
        faults inside a mapping of one of the files are kept."""
        me = os.getpid()
        faults = {i for i, k in self.ids.items() if k == "faults"}
        drained = [ring.drain(faults) for ring in self.rings]
        for _, tasks, maps, lost in drained:
            self.maps.extend(m for m in maps if m.pid != me)
            self.tasks.extend(t for t in tasks if t.pid != me)
            self.spans.extend((m.addr, m.addr + m.length) for m in maps if m.pid != me and m.key in self.keys)
            self.lost += lost
        # A fault outside every mapping of the files is dropped — after one more drain, since its
        # mapping's record may sit in a ring that was read just before it was written.
        pending, self._pending = self._pending, []
        self.samples.extend(s for s in pending if self._in_spans(s.addr))
        for s in (s for samples, _, _, _ in drained for s in samples if s.pid != me):
            if s.id not in faults or self._in_spans(s.addr):
                self.samples.append(s)
            else:
                self._pending.append(s)

    def _in_spans(self, addr: int) -> bool:
        return any(lo <= addr < hi for lo, hi in self.spans)

    def terminal_writes(self, after_s: float, until_s: float) -> list[float]:
        """When (``time.monotonic`` seconds, in order) the tree wrote to a terminal — its output, which the
        workbench reads from the other end — after ``after_s`` and by ``until_s``. A write while the last
        one's data still waits to be handed over queues nothing: the first write of a burst is there."""
        self.drain()
        lo, hi = int(after_s * 1e9), int(until_s * 1e9)
        point = self.points.get("tty")
        if point is None or not self.flush:
            return []
        at, size = point.fields["function"]
        ids = {i for i, k in self.ids.items() if k == "tty"}
        return sorted(s.time_ns / 1e9 for s in self.samples if s.id in ids and lo < s.time_ns <= hi
                      and int.from_bytes(s.raw[at:at + size], "little") == self.flush)

    def result(self, start_s: float, end_s: float) -> FileEvents:
        """What the window [start_s, end_s] (``time.monotonic`` seconds) recorded; the events stop
        (:meth:`close` frees them: closing takes ~10 ms an event, so the caller does it when time is free)."""
        for fd in self.fds:
            perf.enable(fd, False)
        self.drain()
        self.drain()  # the faults the first one held back
        lo, hi = int(start_s * 1e9), int(end_s * 1e9)
        pages = [{k: np.zeros(-(-size // PAGE), dtype=bool) for k in KINDS} for size in self.sizes]
        space = _AddressSpaces(self.keys)
        timeline = sorted([(m.time_ns, 0, m) for m in self.maps] + [(t.time_ns, 1, t) for t in self.tasks]
                          + [(s.time_ns, 2, s) for s in self.samples], key=lambda x: (x[0], x[1]))
        pids, count = set(), 0
        for t, what, item in timeline:
            if what == 0:
                space.mapped(item, pages, lo <= t <= hi)
            elif what == 1:
                space.forked(item)
            elif lo <= t <= hi:
                hit = self._hit(item, space)
                if hit is not None:
                    index, kind, first, last = hit
                    arr = pages[index][kind]
                    arr[max(0, first):max(0, min(last + 1, len(arr)))] = True
                    pids.add(item.pid)
                    count += 1

        def nbytes(arr: np.ndarray, size: int) -> int:
            return min(size, int(np.count_nonzero(arr)) * PAGE)

        per = {k: tuple(nbytes(p[k], z) for p, z in zip(pages, self.sizes)) for k in KINDS}
        credited = tuple(nbytes(p["read"] | p["touched"], z) for p, z in zip(pages, self.sizes))
        started = sum(1 for t in self.tasks if t.kind == perf.RECORD_FORK and t.pid != t.ppid)
        return FileEvents(per["read"], per["touched"], per["spliced"], per["mapped"], credited,
                          processes=len(pids), started=started, events=count, lost=self.lost)

    def _hit(self, s: perf.Sample, space: _AddressSpaces) -> tuple[int, str, int, int] | None:
        """(file, kind, first page, last page) of a sample on one of the files; None otherwise."""
        short = self.ids.get(s.id)
        if short == "faults":
            return space.fault(s.pid, s.addr)
        point = self.points.get(short or "")
        if point is None or short == "tty":
            return None
        f = point.fields
        get = (lambda name: int.from_bytes(s.raw[f[name][0]:f[name][0] + f[name][1]], "little"))
        if short == "dio":
            if get("ki_flags") & IOCB_WRITE or get("count") == 0:
                return None
            dev, ino, first, last = get("dev"), get("ino"), get("pos") // PAGE, (get("pos") + get("count") - 1) // PAGE
        else:
            dev, ino, first, last = get("s_dev"), get("i_ino"), get("index"), get("last_index")
        key = (os.makedev(dev >> 20, dev & ((1 << 20) - 1)), ino)  # the kernel's dev_t: major << 20 | minor
        if key not in self.keys:
            return None
        kind = "spliced" if kallsyms.within(s.chain, self.splice) else "read"
        return self.keys.index(key), kind, first, last

    def close(self) -> None:
        for ring in self.rings:
            ring.close()
        for fd in self.fds:
            os.close(fd)
        self.rings, self.fds = [], []


class _AddressSpaces:
    """Each process's mappings, newest first where they overlap, replayed in time order (a fork copies
    the parent's)."""

    def __init__(self, keys: tuple[FileKey | None, ...]):
        self.keys = keys
        self.by_pid: dict[int, list[tuple[int, int, int, int | None]]] = {}  # sorted (start, end, pgoff, file)

    def mapped(self, m: perf.Mapping, pages: list[dict[str, np.ndarray]], inside: bool) -> None:
        index = self.keys.index(m.key) if m.key in self.keys else None
        spans = self.by_pid.setdefault(m.pid, [])
        start, end = m.addr, m.addr + m.length
        spans[:] = [s for s in spans if s[1] <= start or s[0] >= end]  # a new mapping replaces what it covers
        bisect.insort(spans, (start, end, m.pgoff, index))
        if index is not None and inside:
            arr = pages[index]["mapped"]
            arr[m.pgoff // PAGE:(m.pgoff + m.length) // PAGE] = True

    def forked(self, t: perf.Task) -> None:
        if t.kind == perf.RECORD_FORK and t.pid != t.ppid and t.ppid in self.by_pid:
            self.by_pid[t.pid] = list(self.by_pid[t.ppid])

    def fault(self, pid: int, addr: int) -> tuple[int, str, int, int] | None:
        spans = self.by_pid.get(pid, [])
        at = bisect.bisect_right(spans, (addr, float("inf"))) - 1
        if at < 0:
            return None
        start, end, pgoff, index = spans[at]
        if index is None or not start <= addr < end:
            return None
        offset = pgoff + (addr - start)
        lo = max(pgoff, offset // TOUCH_UNIT * TOUCH_UNIT)
        hi = min(pgoff + (end - start), lo - lo % TOUCH_UNIT + TOUCH_UNIT) - 1
        return index, "touched", lo // PAGE, hi // PAGE


def _online_cpus() -> list[int]:
    try:
        with open("/sys/devices/system/cpu/online") as fh:
            return _cpu_list(fh.read())
    except OSError:
        return sorted(os.sched_getaffinity(0))


def _cpu_list(text: str) -> list[int]:
    out: list[int] = []
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


__all__ = ["EventsUnavailable", "FileEventRecorder", "FileEvents"]
