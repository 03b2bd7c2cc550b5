"""``lanes``: lane-parallel pread. Tensors (big ones cut into ``chunk_mib`` pieces) are read by
``threads`` lanes into fresh staging heap buffers; the loading thread uploads the pieces in file order
as they complete (uploads from the main thread, so phase times stay meaningful: ``read`` is time spent
waiting for lanes). Eviction follows the policy and only the policy: the seed's parallel reader called
DONTNEED on every segment unconditionally and re-read the whole model from disk on every restart."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from workbench.strategies._common import MIB, Evictor, ThreadGuard, pread_into
from workbench.strategies.base import BaseParams, LoadContext, Strategy, check_param


@dataclass(frozen=True)
class LanesParams(BaseParams):
    """``threads`` reading lanes, ``chunk_mib`` largest piece a lane reads at once."""

    threads: int = 4
    chunk_mib: int = 16

    def __post_init__(self) -> None:
        check_param("lanes", "threads", self.threads >= 1, f"must be >= 1, got {self.threads}")
        check_param("lanes", "chunk_mib", self.chunk_mib >= 1, f"must be >= 1, got {self.chunk_mib}")


class Job(NamedTuple):
    tensor: int  # index into ctx.tensors
    dst: int  # offset inside the tensor's device buffer
    offset: int  # absolute file offset
    nbytes: int


def plan_jobs(ctx: LoadContext, chunk: int) -> list[Job]:
    """Every tensor in file order, cut into pieces of at most ``chunk`` bytes."""
    jobs = []
    for i, t in enumerate(ctx.tensors):
        for dst in range(0, max(t.nbytes, 1), chunk):
            jobs.append(Job(i, dst, t.offset + dst, min(chunk, t.nbytes - dst)))
    return jobs


class _Slot:
    __slots__ = ("ready", "data")

    def __init__(self) -> None:
        self.ready, self.data = threading.Event(), None


class _Lanes:
    """Jobs handed out in order; at most ``window`` read-but-not-uploaded pieces at once (bounded memory)."""

    def __init__(self, ctx: LoadContext, fd: int, jobs: list[Job], window: int):
        self.ctx, self.fd, self.jobs = ctx, fd, jobs
        self.slots = [_Slot() for _ in jobs]
        self.room = threading.Semaphore(window)
        self.evictor = Evictor(ctx, fd)
        self._next = 0
        self._lock = threading.Lock()

    def _take(self) -> int:
        with self._lock:
            self._next += 1
            return self._next - 1

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            if not self.room.acquire(timeout=0.05):
                continue
            j = self._take()
            if j >= len(self.jobs):
                self.room.release()
                return
            job = self.jobs[j]
            buf = np.empty(job.nbytes, dtype=np.uint8)
            pread_into(self.fd, buf, job.offset, self.ctx.index.path)
            self.evictor.drop(job.offset, job.nbytes)  # only when the policy says evict
            self.slots[j].data = buf
            self.slots[j].ready.set()

    def wait(self, j: int, guard: ThreadGuard) -> np.ndarray:
        slot = self.slots[j]
        while not slot.ready.wait(0.05):
            guard.check()
            if not any(t.is_alive() for t in guard.threads):
                guard.check()
                raise RuntimeError(f"lanes stopped before piece {j} was read")
        data, slot.data = slot.data, None
        self.room.release()
        return data


class LanesStrategy(Strategy):
    name: ClassVar[str] = "lanes"
    summary: ClassVar[str] = "lane-parallel pread (threads) into staging buffers, uploaded in file order; evicts only when the policy says so"
    Params: ClassVar[type] = LanesParams

    def _load(self, ctx: LoadContext) -> None:
        p = self.params
        fd = ctx.open_fd()
        bufs = [ctx.place(t) for t in ctx.tensors]
        jobs = plan_jobs(ctx, p.chunk_mib * MIB)
        lanes = _Lanes(ctx, fd, jobs, window=2 * p.threads)
        n = min(p.threads, len(jobs))
        with ThreadGuard("lanes") as guard:
            for _ in range(n):
                guard.spawn(lanes.run, guard.stop)
            for j, job in enumerate(jobs):
                with ctx.phase("read"):
                    data = lanes.wait(j, guard)
                with ctx.phase("upload"):
                    ctx.upload(bufs[job.tensor], job.dst, data)
        guard.check()
        with ctx.phase("read"):
            lanes.evictor.finish()
        ctx.set_path(readers=max(n, 1))
        ctx.engage("lanes", n, p.threads, unit="threads", note=f"{len(jobs)} pieces, uploads from the main thread")
        ctx.note(f"evict={'on' if ctx.evict else 'off'} ({ctx.evict_source})")
