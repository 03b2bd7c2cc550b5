"""Watching an external engine's process tree for what it does with the model's files.

Where the kernel allows it, the window is recorded as events (:mod:`workbench.io.fileevents`, opened
here before the engine is spawned, by the thread that spawns it, so every process it starts is
recorded) and graded from that record (:mod:`~workbench.measure.engine.grade`); the samples below then
add only the tree's counters, its processes and the files it was seen holding. Elsewhere the samples are
the evidence (:mod:`~workbench.measure.engine.evidence`), and the run says why events were not recorded.

Each sample walks the tree (:mod:`~workbench.measure.engine.proc`) and keeps, per file of the model,
the best it has seen: the furthest offset each descriptor on the file reached (a descriptor that went
away keeps what it reached last), the most of the file's pages the tree had mapped at one instant, and
each process's ``rchar`` (a bound on what its read calls can have returned). The tree is sampled every
:data:`SAMPLE_S` while it holds none of the model's files, every :data:`FAST_S` while it holds one (a
shard mapped, read and dropped is seen near its end), at once when inotify reports one of them opened
(:mod:`~workbench.measure.engine.watch`), and at the markers — but never for more than :data:`DUTY` of
the time: a sample that took 1 ms waits 10 ms for the next. :func:`~workbench.measure.engine.evidence.judge`
turns what it kept into the run's evidence.
"""
from __future__ import annotations

import contextlib
import os
import select
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

from workbench.io.fileevents import EventsUnavailable, FileEventRecorder
from workbench.measure.engine.proc import io_counters, model_fds, model_mappings, tree_of
from workbench.measure.engine.target import ReadTarget
from workbench.measure.engine.watch import OpenWatch
from workbench.records import ReadEvidence

SAMPLE_S = 0.1  # the period while the tree holds none of the model's files
FAST_S = 0.002  # the period while it holds one
DUTY = 0.1  # the most of the wall time sampling may take
DRAIN_S = 0.02  # the longest the event rings go undrained
_START, _STOP = b"s", b"x"  # what the reader tells the sampling thread
SWITCH_S = 0.0005  # while sampling runs beside the reader: Python's thread switch interval (else 5 ms)


@dataclass
class Descriptor:
    """One descriptor on a model file: its offset at the window's start (0: opened inside it) and the
    furthest it reached."""

    file: int
    base: int
    reach: int


@dataclass
class TreeSampler:
    """Samples an engine's process tree while it runs; :meth:`finish` judges what it saw, once."""

    root: int
    model: ReadTarget
    resident_before: tuple[int, ...] | None = None
    watch: OpenWatch | None = None
    samples: int = 0
    processes: set[int] = field(default_factory=set)
    unreadable: str = ""
    rchar: dict[int, list[int]] = field(default_factory=dict)  # pid -> [at the window's start, last seen]
    read_bytes: dict[int, list[int]] = field(default_factory=dict)
    descriptors: dict[tuple[int, int, int], Descriptor] = field(default_factory=dict)  # (pid, fd, file)
    mapped: list[int] = field(default_factory=list)  # per file: the most resident at one sample
    mapped_start: list[int] = field(default_factory=list)
    held: set[int] = field(default_factory=set)  # files the tree was seen holding (a descriptor or mapping)
    holding: bool = False
    next_at: float = 0.0
    busy_s: float = 0.0  # time spent sampling
    final: ReadEvidence | None = None
    events: FileEventRecorder | None = None
    no_events: str = ""  # why the window is not recorded as events
    opens: int = 0  # opens of the model's files inotify reported in the window
    _links: dict[tuple[int, str, str], int | None] = field(default_factory=dict)
    _now: list[int] = field(default_factory=list)
    _last: tuple[float, float] = (0.0, 0.0)  # the last sample's start and duration
    _proc_at: float = 0.0  # with an event record: when /proc is next read
    _lock: threading.RLock = field(default_factory=threading.RLock)  # the sampling thread vs the reader's
    _tell: int | None = None  # while sampling runs on its thread: the pipe the reader tells it through

    def __post_init__(self) -> None:
        n = len(self.model.paths)
        self.mapped, self.mapped_start, self._now = [0] * n, [0] * n, [0] * n

    @classmethod
    def at_spawn(cls, model: ReadTarget) -> TreeSampler:
        """A sampler for an engine about to start: the model's residency now, and the watch on its files
        (opened after the residency is read, so the workbench's own look is not an open of the window)."""
        resident = model.resident()
        watch = OpenWatch(model.paths)
        sampler = cls(0, model, resident_before=resident, watch=watch if watch.fileno() >= 0 else None)
        try:
            sampler.events = FileEventRecorder.open(model.keys, model.sizes or (model.nbytes,) * len(model.paths))
        except EventsUnavailable as exc:
            sampler.no_events = str(exc)
        return sampler

    @property
    def wake_fd(self) -> int | None:
        return None if self.watch is None else self.watch.fileno()

    def due(self, now: float) -> bool:
        return self.final is None and now >= self.next_at

    def wait_s(self, now: float) -> float:
        """Seconds until the next sample is due."""
        return max(0.0, self.next_at - now)

    def woken(self) -> None:
        """inotify said one of the model's files was opened: the next sample is due now (or as soon as
        :data:`FAST_S` and :data:`DUTY` allow after the last one)."""
        if self.watch is not None:
            self.opens += self.watch.drain()
        self.next_at = min(self.next_at, self._last[0] + max(FAST_S, self._last[1] / DUTY))

    @contextlib.contextmanager
    def running(self) -> Iterator[TreeSampler]:
        """Sample on a thread of its own while the body reads the engine's output: a walk of ``/proc``
        takes ~1 ms on an idle machine and tens of ms on a loaded one (it waits on the engine's own
        memory-map lock), and a reader that sampled in between reads would date the lines that arrived
        meanwhile late — two markers 40 ms apart once came in one read (CI, 2026-12-04). The reader now
        only reads; even the start marker's sample (:meth:`mark_start`) is the thread's."""
        told_r, told_w = os.pipe()
        failed: list[BaseException] = []
        thread = threading.Thread(target=self._run, args=(told_r, failed), name="engine-sampler", daemon=True)
        self._tell = told_w
        switch = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_S)  # the reader waits for the interpreter's lock at most this long
        thread.start()
        try:
            yield self
        finally:
            sys.setswitchinterval(switch)
            self._tell = None
            os.write(told_w, _STOP)
            thread.join()
            os.close(told_r)
            os.close(told_w)
        if failed:
            raise failed[0]

    def _run(self, told: int, failed: list[BaseException]) -> None:
        """The sampling thread: a sample when one is due, at once when inotify reports an open, the
        start marker's when the reader tells it (in the order told), until told to stop."""
        try:
            while True:
                with self._lock:
                    if self.due(time.perf_counter()):
                        self._sample()
                    wait, wake = self.wait_s(time.perf_counter()), self.wake_fd
                ready = select.select([told] if wake is None else [told, wake], [], [],
                                      None if self.final is not None else wait)[0]
                if wake is not None and wake in ready:
                    with self._lock:
                        self.woken()
                if told in ready:
                    for what in os.read(told, 64):
                        if what == _STOP[0]:
                            return
                        with self._lock:
                            self._mark_start()
        except BaseException as exc:  # noqa: BLE001 - handed to the reader's thread, raised there
            failed.append(exc)

    def sample(self) -> None:
        """Read every process of the tree once."""
        with self._lock:
            self._sample()

    def _sample(self) -> None:
        if self.final is not None:
            return
        t0 = time.perf_counter()
        if self.events is not None:  # not held to DUTY: a ring left full loses records
            self.events.drain()
            if t0 < self._proc_at:  # the record is the evidence: /proc only for counters, at SAMPLE_S
                self.next_at = t0 + DRAIN_S
                return
            self._proc_at = t0 + SAMPLE_S
        self.samples += 1
        now, holding = [0] * len(self.model.paths), False
        for pid in tree_of(self.root):
            self.processes.add(pid)
            self._counters(pid)
            for fd, index, pos in model_fds(pid, self.model, self._links):
                held = self.descriptors.get((pid, fd, index))
                if held is None:
                    self.descriptors[(pid, fd, index)] = Descriptor(index, 0, pos)
                else:
                    held.reach = max(held.reach, pos)
                self.held.add(index)
                holding = True
            for index, resident in model_mappings(pid, self.model).items():
                now[index] += resident
                self.held.add(index)
                holding = True
        self.mapped = [max(a, b) for a, b in zip(self.mapped, now)]
        self._now, self.holding = now, holding
        took = time.perf_counter() - t0
        self.busy_s, self._last = self.busy_s + took, (t0, took)
        period = (FAST_S if holding else SAMPLE_S) if self.events is None else DRAIN_S
        self.next_at = t0 + max(period, took / DUTY)

    def _counters(self, pid: int) -> None:
        try:
            counters = io_counters(pid)
        except PermissionError:
            self.unreadable = self.unreadable or f"/proc/{pid}/io unreadable"
            return
        if counters is None:
            return
        for table, value in ((self.rchar, counters[0]), (self.read_bytes, counters[1])):
            table.setdefault(pid, [0, value])[1] = value  # a process first seen: born in the window

    def mark_start(self) -> None:
        """The start marker: what was read or mapped before it is not the window's. While sampling
        runs on its thread (:meth:`running`) the thread takes this sample and the caller goes on."""
        if self._tell is not None:
            os.write(self._tell, _START)
            return
        with self._lock:
            self._mark_start()

    def _mark_start(self) -> None:
        self._proc_at = 0.0
        self._sample()
        for table in (self.rchar, self.read_bytes):
            for values in table.values():
                values[0] = values[1]
        for held in self.descriptors.values():
            held.base = held.reach
        self.mapped_start, self.mapped = list(self._now), list(self._now)

    def finish(self, start_s: float, end_s: float, prior_s: float | None = None,
               start_prior_s: float | None = None) -> ReadEvidence:
        """The last sample, at the end marker, and the model's residency then; judged once over the
        window [start_s, end_s] (``time.monotonic`` seconds: when the markers were read). With an event
        record the window is when they were written: it ends at the tree's first write to its output
        after ``prior_s`` (the read before the one that brought the end marker) — what the engine read
        after printing its marker is not the load — and, with a start marker read at ``start_s``, starts
        at its last write after ``start_prior_s`` and by ``start_s`` — what it read after printing it is."""
        from workbench.measure.engine.evidence import EVIDENCE_FRACTION, judge
        from workbench.measure.engine.grade import judge_events

        if self.final is None:
            self._proc_at = 0.0
            self.sample()
            if self.watch is not None:
                self.opens += self.watch.drain()
                self.watch.close()  # the workbench's own look at the residency is no open of the window
                self.watch = None
            if self.events is not None:
                ends = self.events.terminal_writes(start_s if prior_s is None else max(start_s, prior_s), end_s)
                end_s = min([end_s, *ends[:1]])
                if start_prior_s is not None:
                    starts = self.events.terminal_writes(start_prior_s, start_s)
                    start_s = min(starts[-1], end_s) if starts else start_s
            record = self.events.result(start_s, end_s) if self.events is not None else None
            resident = self.model.resident()
            self.final = judge(self, resident, self.no_events) if record is None else \
                judge_events(self, record, resident, EVIDENCE_FRACTION)
        return self.final

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None
        if self.events is not None:
            self.events.close()
            self.events = None


__all__ = ["DUTY", "FAST_S", "SAMPLE_S", "Descriptor", "TreeSampler"]
