"""Reader lanes for a session's cache misses, and the meter that says how many reads were in flight.

A :class:`LanePool` runs read jobs on ``lanes`` threads, each lane with its own readers (one per file
and reader kind: a bounce reader's buffer is not shared). With one lane and no overlap the pool is
*inline*: a job runs on the decode thread when it is waited for, exactly the old one-thread session.
Jobs are ``fn(reader) -> ReadOutcome`` (the expert cache's :meth:`~workbench.expert.cache.ExpertCache.fill`).

:class:`InflightMeter` integrates the number of reads in flight over time: ``busy_s`` is the time at
least one read was in flight, ``area`` the integral of the count, so ``area / busy_s`` is the queue
depth the lanes achieved while reading (Little's law), and bytes over ``busy_s`` the staged GB/s.

The lanes and the decode thread share one interpreter lock: a lane whose read returned waits for it
before it can count the read and take the next job, while the other lanes and the decode thread run
Python, each holder for at most the interpreter's switch interval (5 ms by default) before it must let
go. :func:`switch_interval` sets that interval for a session (``switch_interval_us``), so the wait can
be measured against it (``benchmarks/bench/miss_breakdown.py`` times each read's wait).

How a job reaches a lane and its outcome comes back (``lane_handoff``) is the other half of a read's
Python: ``executor`` (the default) is the standard library's thread pool and its futures, whose submit,
result and completion each run Python under that lock (conditions, a semaphore); ``lock`` hands jobs
over one plain queue to plain threads and each outcome back by a bare lock the lane releases, so a read
holds the interpreter's lock for less time on every thread that touches it.
"""
from __future__ import annotations

import _thread
import contextlib
import queue
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from workbench.expert.readers import ReadOutcome, SliceReader, make_reader

ReadJob = Callable[[SliceReader], ReadOutcome]

MAX_SWITCH_US = 1_000_000  # a second: past it the decode thread would starve the lanes by design


@contextlib.contextmanager
def switch_interval(us: int) -> Iterator[None]:
    """The interpreter's switch interval set to ``us`` microseconds while the block runs, then put back as
    it was (``us`` 0: left as it is)."""
    if not us:
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(us / 1e6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@dataclass(frozen=True)
class InflightSnapshot:
    busy_s: float  # time with at least one read in flight
    area: float  # ∫ reads in flight dt
    reads: int

    def minus(self, earlier: "InflightSnapshot") -> "InflightSnapshot":
        return InflightSnapshot(self.busy_s - earlier.busy_s, self.area - earlier.area, self.reads - earlier.reads)

    @property
    def depth(self) -> float:
        """Mean reads in flight while any was (0 when none ran)."""
        return self.area / self.busy_s if self.busy_s > 0 else 0.0


class InflightMeter:
    """Thread-safe count of reads in flight, integrated over time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n, self._last, self._busy, self._area, self._reads = 0, time.perf_counter(), 0.0, 0.0, 0

    def _advance(self) -> None:
        now = time.perf_counter()
        if self._n:
            self._busy += now - self._last
            self._area += self._n * (now - self._last)
        self._last = now

    def start(self) -> None:
        with self._lock:
            self._advance()
            self._n += 1

    def stop(self) -> None:
        with self._lock:
            self._advance()
            self._n -= 1
            self._reads += 1

    def snapshot(self) -> InflightSnapshot:
        with self._lock:
            self._advance()
            return InflightSnapshot(self._busy, self._area, self._reads)


class _Readers:
    """One lane's readers, by (kind, file)."""

    def __init__(self) -> None:
        self.open: dict[tuple[str, str], SliceReader] = {}

    def get(self, kind: str, file: str) -> SliceReader:
        r = self.open.get((kind, file))
        if r is None:
            r = self.open[(kind, file)] = make_reader(kind, file)
        return r

    def close(self) -> None:
        for r in self.open.values():
            r.close()
        self.open.clear()


HANDOFFS = ("executor", "lock")


class Handoff:
    """One job's outcome, handed from its lane to the waiter by a bare lock held until the job is done."""

    __slots__ = ("_held", "_value", "_error")

    def __init__(self) -> None:
        self._held = _thread.allocate_lock()
        self._held.acquire()
        self._value: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return not self._held.locked()

    def result(self) -> Any:
        """The job's return value once it is done (its exception, raised here)."""
        with self._held:  # blocks, the interpreter's lock let go, until the lane releases it
            pass
        if self._error is not None:
            raise self._error
        return self._value

    def finish(self, value: Any, error: BaseException | None) -> None:
        self._value, self._error = value, error
        self._held.release()


class LockLanes:
    """``lanes`` plain threads taking jobs from one queue; each job's outcome comes back by a :class:`Handoff`."""

    def __init__(self, lanes: int) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()  # not SimpleQueue: tests/test_staging_waits.py says why
        self._threads = [threading.Thread(target=self._loop, name=f"wb-lane_{n}", daemon=True) for n in range(lanes)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Handoff:
        handoff = Handoff()
        self._queue.put((handoff, fn, args))
        return handoff

    def _loop(self) -> None:
        get = self._queue.get
        while (item := get()) is not None:
            handoff, fn, args = item
            try:
                value = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - raised to the waiter, as a future would
                handoff.finish(None, exc)
            else:
                handoff.finish(value, None)

    def shutdown(self, wait: bool = True) -> None:
        """Every queued job still runs; then each lane ends (joined with ``wait``)."""
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for t in self._threads:
                t.join()


class LanePool:
    """``lanes`` reader threads (or the caller's thread, ``inline``) and the meter of their reads."""

    def __init__(self, lanes: int, inline: bool = False, handoff: str = "executor"):
        if lanes < 1:
            raise ValueError(f"need at least one lane, got {lanes}")
        if handoff not in HANDOFFS:
            raise ValueError(f"lane handoff {handoff!r} is not one of {', '.join(HANDOFFS)}")
        self.lanes, self.inline, self.meter = lanes, inline, InflightMeter()
        self._lock = threading.Lock()
        self._all: list[_Readers] = []
        self._local = threading.local()
        self._pool: Any = None if inline else \
            ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="wb-lane") if handoff == "executor" else \
            LockLanes(lanes)

    def submit(self, job: ReadJob, kind: str, file: str) -> Any:
        """Start ``job`` (inline: defer it to :meth:`wait`); returns the handle to wait on."""
        if self._pool is None:
            return (job, kind, file)
        return self._pool.submit(self._run, job, kind, file)

    def submit_plain(self, fn: Callable[[], Any]) -> Any:
        """Start ``fn()`` on a lane outside the read meter (a copy, not a read); inline: run it now."""
        if self._pool is not None:
            return self._pool.submit(fn)
        done: Future[Any] = Future()
        try:
            done.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to wait(), as a lane's would be
            done.set_exception(exc)
        return done

    def wait(self, handle: Any) -> ReadOutcome:
        """The job's outcome, once it is done (its exception, if it raised)."""
        if isinstance(handle, (Future, Handoff)):
            return handle.result()
        return self._run(*handle)

    def _run(self, job: ReadJob, kind: str, file: str) -> ReadOutcome:
        readers = getattr(self._local, "readers", None)
        if readers is None:
            readers = self._local.readers = _Readers()
            with self._lock:
                self._all.append(readers)
        reader = readers.get(kind, file)
        self.meter.start()
        try:
            return job(reader)
        finally:
            self.meter.stop()

    def close(self) -> None:
        """Wait for the lanes, then close every reader they opened."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        with self._lock:
            for readers in self._all:
                readers.close()
            self._all.clear()

    def __enter__(self) -> "LanePool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
