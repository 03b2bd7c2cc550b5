"""``lanes``: lane-parallel pread. Tensors (big ones cut into ``chunk_mib`` pieces) are read by
``threads`` lanes into fresh staging heap buffers; the loading thread uploads the pieces in file order
as they complete (uploads from the main thread, so phase times stay meaningful: ``read`` is time spent
waiting for lanes — with ``upload=pinned`` it also holds waits for copies that free staging, since the
loading thread does those while it waits). Eviction follows the policy and only the policy: the seed's parallel reader called
DONTNEED on every segment unconditionally and re-read the whole model from disk on every restart."""
from __future__ import annotations

import queue
import threading
from collections import deque
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Mapping, NamedTuple

import numpy as np

from workbench.strategies.toolkit import UPLOADS, Evictor, MiB, ThreadGuard, check_upload, pread_into
from workbench.strategies.base import BaseParams, LoadContext, Strategy, check_param


@dataclass(frozen=True)
class LanesParams(BaseParams):
    """``threads`` reading lanes, ``chunk_mib`` largest piece a lane reads at once, ``upload``:
    ``pageable`` (a fresh heap buffer per piece, synchronous copy) or ``pinned`` (lanes read into
    page-locked staging buffers that are recycled once the asynchronous copy out of them is done)."""

    heatmap_axes: ClassVar[tuple[str, str] | None] = ("threads", "chunk_mib")
    small_pieces: ClassVar[Mapping[str, Any]] = MappingProxyType({"chunk_mib": 1, "threads": 3})

    threads: int = 4
    chunk_mib: int = 16
    upload: str = "pageable"

    def __post_init__(self) -> None:
        check_param("lanes", "threads", self.threads >= 1, f"must be >= 1, got {self.threads}")
        check_param("lanes", "chunk_mib", self.chunk_mib >= 1, f"must be >= 1, got {self.chunk_mib}")
        check_upload("lanes", self.upload, LANES_UPLOADS)


# lanes implements heap buffers and its own recycled pinned staging; it has no registered mode
LANES_UPLOADS = tuple(u for u in UPLOADS if u != "registered")


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


class _Staging:
    """Where lanes read into, at most ``window`` pieces alive at once (bounded memory).

    pageable: a fresh heap buffer per piece. pinned: ``window`` page-locked buffers from the device,
    each handed back by :meth:`release` once the copy reading it has finished.
    """

    def __init__(self, ctx: LoadContext, window: int, chunk: int, pinned: bool):
        self.pinned, self.views = pinned, {}
        self.free: queue.Queue[int] = queue.Queue()
        self.buffers = [ctx.device.alloc_pinned(chunk) for _ in range(window)] if pinned else []
        for b in self.buffers:
            ctx.cleanup(ctx.device.free_pinned, b)
        ctx.cleanup(self._release_views)  # registered last, runs first: no view may outlive its buffer
        for i in range(window):
            self.free.put(i)

    def acquire(self, stop: threading.Event) -> int | None:
        """A free staging token, or None once ``stop`` is set."""
        while not stop.is_set():
            try:
                return self.free.get(timeout=0.05)
            except queue.Empty:
                continue
        return None

    def buffer(self, token: int, nbytes: int) -> Any:
        """The memory behind ``token`` for a piece of ``nbytes``."""
        if not self.pinned:
            return np.empty(nbytes, dtype=np.uint8)
        self.views[token] = self.buffers[token].view[:nbytes]
        return self.views[token]

    def release(self, token: int) -> None:
        view = self.views.pop(token, None)
        if view is not None:
            view.release()
        self.free.put(token)

    def _release_views(self) -> None:
        for view in self.views.values():
            view.release()
        self.views.clear()

    @property
    def locked(self) -> int:
        return sum(1 for b in self.buffers if b.locked)


class _Slot:
    __slots__ = ("ready", "data", "token")

    def __init__(self) -> None:
        self.ready, self.data, self.token = threading.Event(), None, -1


class _Lanes:
    """Jobs handed out in file order to whichever lane asks next; pieces consumed in the same order."""

    def __init__(self, ctx: LoadContext, fd: int, jobs: list[Job], staging: _Staging):
        self.ctx, self.fd, self.jobs, self.staging = ctx, fd, jobs, staging
        self.slots = [_Slot() for _ in jobs]
        self.evictor = Evictor(ctx, fd)
        self._next = 0
        self._lock = threading.Lock()

    def _take(self) -> int:
        with self._lock:
            self._next += 1
            return self._next - 1

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            # Token before job: a lane holding a job must never wait for staging that later jobs
            # hold, or the in-order consumer waits for that job forever.
            token = self.staging.acquire(stop)
            if token is None:
                return
            j = self._take()
            if j >= len(self.jobs):
                self.staging.release(token)
                return
            job = self.jobs[j]
            data = self.staging.buffer(token, job.nbytes)
            pread_into(self.fd, data, job.offset, self.ctx.index.path)
            self.evictor.drop(job.offset, job.nbytes)  # only when the policy says evict
            self.slots[j].data, self.slots[j].token = data, token
            self.slots[j].ready.set()

    def wait(self, j: int, guard: ThreadGuard, idle: Callable[[], None]) -> tuple[Any, int]:
        """Piece ``j`` once read; ``idle`` runs while waiting (hands finished staging back)."""
        slot = self.slots[j]
        while not slot.ready.wait(0.002):
            idle()
            guard.check()
            # Look at the slot again before calling the lanes dead: the last lane may have set it
            # and exited while idle() ran (found in review: a finished load reported as failed).
            if not slot.ready.is_set() and not any(t.is_alive() for t in guard.threads):
                guard.check()
                raise RuntimeError(f"lanes stopped before piece {j} was read")
        data, slot.data = slot.data, None
        return data, slot.token


class LanesStrategy(Strategy):
    name: ClassVar[str] = "lanes"
    summary: ClassVar[str] = "lane-parallel pread (threads) into staging buffers (heap, or pinned with async copies), uploaded in file order; evicts only when the policy says so"
    Params: ClassVar[type] = LanesParams

    def _load(self, ctx: LoadContext) -> None:
        p = self.params
        fd = ctx.open_fd()
        bufs = [ctx.place(t) for t in ctx.tensors]
        jobs = plan_jobs(ctx, p.chunk_mib * MiB)
        pinned = p.upload == "pinned"
        staging = _Staging(ctx, 2 * p.threads, p.chunk_mib * MiB, pinned)
        lanes = _Lanes(ctx, fd, jobs, staging)
        copies: deque[tuple[Any, int]] = deque()  # (event, staging token) of copies in flight

        def finish_oldest() -> None:
            if copies:
                event, token = copies.popleft()
                ctx.device.wait_event(event)
                staging.release(token)

        n = min(p.threads, len(jobs))
        with ThreadGuard("lanes") as guard:
            for _ in range(n):
                guard.spawn(lanes.run, guard.stop)
            for j, job in enumerate(jobs):
                with ctx.phase("read"):
                    data, token = lanes.wait(j, guard, finish_oldest)
                with ctx.phase("upload"):
                    ctx.device.copy_h2d(bufs[job.tensor], job.dst, data, asynchronous=pinned)
                    ctx.count("bytes", job.nbytes)
                    copies.append((ctx.device.record_event() if pinned else None, token))
                    if not pinned or len(copies) > p.threads:  # keep lanes fed with free staging
                        finish_oldest()
            with ctx.phase("sync"):
                while copies:
                    finish_oldest()
        guard.check()
        with ctx.phase("read"):
            lanes.evictor.finish()
        ctx.set_path(readers=max(n, 1), copy_from=p.upload)
        ctx.engage("lanes", n, p.threads, unit="threads", note=f"{len(jobs)} pieces, uploads from the main thread")
        if pinned:
            ctx.engage("pinned_staging", staging.locked, len(staging.buffers), unit="buffers",
                       note=f"{len(staging.buffers)} x {p.chunk_mib} MiB, async copies")
        ctx.note(f"evict={'on' if ctx.evict else 'off'} ({ctx.evict_source})")
