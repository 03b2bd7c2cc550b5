"""``shm``: one reader per node fills a shared host buffer with the checkpoint, every rank copies its
slices from it — the page cache read once per node instead of once per rank.

Local rank 0 creates ``/dev/shm/workbench-ranks-<run>`` (O_EXCL, no links followed), preads every file's
tensor data into it on ``threads`` threads; a barrier; every rank maps it and (``register=1``) page-locks
its mapping with the device's ``register_host`` (cudaHostRegister on a GPU: the copies then run at the
pinned rate), copies its slices, and the reader unlinks the name once every rank has it mapped. The
runner removes a name a killed reader left behind.
"""
from __future__ import annotations

import mmap
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from workbench.strategies.params import BaseParams, check_param
from workbench.strategies.ranked.base import RankContext, RankedStrategy, slice_bytes

CHUNK = 64 << 20


def shm_path(token: str) -> str:
    """The shared buffer of run ``token`` (the runner removes it after the run, whatever happened)."""
    return f"/dev/shm/workbench-ranks-{token}"


@dataclass(frozen=True)
class ShmParams(BaseParams):
    """``threads``: the node reader's threads; ``register``: page-lock each rank's mapping for its copies."""

    threads: int = 8
    register: bool = True

    def __post_init__(self) -> None:
        check_param("shm", "threads", 1 <= self.threads <= 256, f"1..256, got {self.threads}")


class ShmStrategy(RankedStrategy):
    name: ClassVar[str] = "shm"
    summary: ClassVar[str] = "one reader per node fills a shared host buffer (/dev/shm); every rank copies its slices"
    Params: ClassVar[type] = ShmParams

    def _load(self, ctx: RankContext) -> None:
        bases, total, pos = {}, 0, 0
        for f in ctx.index.files:  # each file's tensor data, packed in file order
            bases[f.path] = (pos, f.data_start)
            pos += f.data_end - f.data_start
        total = max(pos, 1)
        path, reader = shm_path(ctx.token), ctx.local_rank == 0
        ctx.place_all()
        if reader:
            with ctx.phase("read"):
                self._fill(ctx, path, bases, total)
        with ctx.phase("wait"):
            ctx.barrier()  # filled
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        try:
            shared = mmap.mmap(fd, total, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        ctx.stack.callback(shared.close)
        held = {"host": np.frombuffer(shared, dtype=np.uint8)}
        ctx.stack.callback(held.clear)  # the array's export of the mapping goes before the mapping
        with ctx.phase("wait"):
            ctx.barrier()  # mapped everywhere: the name can go
        if reader:
            os.unlink(path)
        handle = ctx.device.register_host(memoryview(shared)) if self.params.register else None
        if handle is not None:
            ctx.stack.callback(ctx.device.unregister_host, handle)
        ctx.notes.append(f"shared buffer {total} B, {'registered' if handle is not None else 'pageable'}"
                         f"{' (register refused)' if self.params.register and handle is None else ''}")
        with ctx.phase("upload"):
            for i, s in enumerate(ctx.plan.slices):
                at, start = bases[s.file]
                ctx.upload(i, slice_bytes(held["host"], start - at, s))
            ctx.device.synchronize()  # copies from the mapping end before it is unmapped

    def _fill(self, ctx: RankContext, path: str, bases: dict[str, tuple[int, int]], total: int) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(fd, total)
            with mmap.mmap(fd, total, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as shared:
                view = np.frombuffer(shared, dtype=np.uint8)
                jobs = [(f.path, off, bases[f.path][0] + off - f.data_start, min(CHUNK, f.data_end - off))
                        for f in ctx.index.files for off in range(f.data_start, f.data_end, CHUNK)]
                for f in ctx.index.files:
                    ctx.fd(f.path)  # opened (and checked) here, not by the threads
                with ThreadPoolExecutor(self.params.threads) as pool:
                    list(pool.map(lambda j: ctx.read(j[0], j[1], view[j[2]:j[2] + j[3]]), jobs))
                del view
        finally:
            os.close(fd)
