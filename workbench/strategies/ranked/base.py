"""What a ranked strategy is, and what it works with: one rank's plan, its device, its process group.

A ranked strategy (``name``, a typed ``Params``, ``available()``, ``load(ctx)``) moves the bytes of
one rank's :class:`~workbench.strategies.ranked.layout.RankPlan` onto that rank's device. It runs in
every rank process at once (``measure/ranks/worker.py`` made the process group), so it may use the
group: ``ctx.barrier()``, and ``torch.distributed`` collectives on ``ctx.group`` (NCCL on GPUs, gloo
on CPUs) — the bytes they carry are counted in ``bytes_interconnect``.
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import ExitStack, contextmanager
from typing import Any, ClassVar, Iterator

import numpy as np

from workbench.formats.index import TensorIndex
from workbench.registry import Availability
from workbench.strategies.params import Parameterized
from workbench.strategies.ranked.layout import RankPlan, RankSlice
from workbench.strategies.toolkit import pread_into
from workbench.upload.base import Device, DeviceBuffer


class RankContext:
    """One rank's load: its plan, device, process group, descriptors, counters and phase times."""

    def __init__(self, index: TensorIndex, plan: RankPlan, device: Device, *, group: Any = None,
                 cpu_group: Any = None, transport: str = "gloo", local_rank: int = 0, token: str = ""):
        self.index, self.plan, self.device = index, plan, device
        self.rank, self.world = plan.rank, plan.world
        self.group, self.cpu_group, self.transport = group, cpu_group, transport
        self.local_rank, self.token = local_rank, token  # token: this run's name (shared-memory names)
        self.buffers: list[DeviceBuffer] = []
        self.counters = {"bytes_read": 0, "bytes_interconnect": 0}
        self.phases: dict[str, float] = {}
        self.notes: list[str] = []
        self.stack = ExitStack()
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - t0

    def fd(self, path: str) -> int:
        """A read-only descriptor of one of the model's files, closed when the load ends."""
        if path not in self._fds:
            from workbench.io.descriptors import open_checked

            self._fds[path] = open_checked(self.index, path, os.O_RDONLY)
            self.stack.callback(os.close, self._fds[path])
        return self._fds[path]

    def read(self, path: str, offset: int, dest: Any) -> None:
        """pread ``len(dest)`` bytes of ``path`` at ``offset`` into ``dest``, counted as read."""
        pread_into(self.fd(path), dest, offset, path)
        with self._lock:  # the node reader's threads share it
            self.counters["bytes_read"] += memoryview(dest).nbytes

    def place_all(self) -> list[DeviceBuffer]:
        """One device buffer per slice (one allocation), in plan order."""
        self.buffers = self.device.alloc_many([s.nbytes for s in self.plan.slices])
        return self.buffers

    def upload(self, i: int, data: Any) -> None:
        """Slice ``i``'s bytes (its data) to its buffer, the padding after them zero."""
        s, buf = self.plan.slices[i], self.buffers[i]
        if s.data_bytes:
            self.device.copy_h2d(buf, 0, data)
        if s.nbytes > s.data_bytes:
            self.device.copy_h2d(buf, s.data_bytes, np.zeros(s.nbytes - s.data_bytes, dtype=np.uint8))

    def barrier(self) -> None:
        """Every rank here (over the CPU group: a GPU transport's barrier would need a device)."""
        import torch.distributed as dist

        dist.barrier(group=self.cpu_group)

    def count_interconnect(self, nbytes: int) -> None:
        self.counters["bytes_interconnect"] += nbytes

    def close(self) -> None:
        self.stack.close()

    def free(self) -> None:
        for buf in self.buffers:
            self.device.free(buf)
        self.buffers = []


class RankedStrategy(Parameterized):
    """Base of every ranked strategy: ``name``, ``summary``, ``Params`` and ``_load(ctx)``."""

    summary: ClassVar[str] = ""

    @classmethod
    def available(cls) -> Availability:
        return Availability(True)

    def load(self, ctx: RankContext) -> None:
        """Every slice of ``ctx.plan`` onto ``ctx.device``, synchronized; the buffers stay in ``ctx.buffers``
        (freed here if the load fails)."""
        try:
            self._load(ctx)
            with ctx.phase("sync"):
                ctx.device.synchronize()
        except BaseException:
            try:
                ctx.close()
            finally:
                ctx.free()
            raise
        ctx.close()

    def _load(self, ctx: RankContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


def slice_bytes(host: np.ndarray, base: int, s: RankSlice) -> np.ndarray:
    """Slice ``s``'s data gathered from ``host``, which holds its file's bytes from offset ``base``."""
    if len(s.ranges) == 1:
        off, n = s.ranges[0]
        return host[off - base:off - base + n]
    return np.concatenate([host[off - base:off - base + n] for off, n in s.ranges]) if s.ranges else host[:0]


def slices_by_tensor(plan: RankPlan) -> dict[str, list[int]]:
    """Tensor name → the indexes of its slices in the plan."""
    out: dict[str, list[int]] = {}
    for i, s in enumerate(plan.slices):
        out.setdefault(s.tensor, []).append(i)
    return out
