"""``warmer``: a pool of threads pre-reads the data region chunk-sequentially into the page cache while
the loading thread preads and uploads (seeds/pr617: 6 concurrent readers reach ~4.5 GB/s where one
serial pread sustains ~1.7). Residency is probed once per load; at ≥ ``gate`` resident the warmer is
skipped (spawning readers for a cached file only costs CPU). Under eviction it is a no-op, since the
loader drops the pages it warms. A guard stops and joins the threads when the load ends or raises."""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping

from workbench.strategies.toolkit import (MiB, ThreadGuard, eviction_reason, files_note, pread_upload,
                                          probe_resident)
from workbench.strategies.base import BaseParams, LoadContext, Strategy, check_param


@dataclass(frozen=True)
class WarmerParams(BaseParams):
    """``threads`` warming readers, ``chunk_mib`` per read, skip at ``gate`` resident fraction."""

    heatmap_axes: ClassVar[tuple[str, str] | None] = ("threads", "chunk_mib")
    small_pieces: ClassVar[Mapping[str, Any]] = MappingProxyType({"chunk_mib": 1})

    threads: int = 4
    chunk_mib: int = 16
    gate: float = 0.9

    def __post_init__(self) -> None:
        check_param("warmer", "threads", self.threads >= 1, f"must be >= 1, got {self.threads}")
        check_param("warmer", "chunk_mib", self.chunk_mib >= 1, f"must be >= 1, got {self.chunk_mib}")
        check_param("warmer", "gate", 0.0 <= self.gate <= 1.0, f"must be in [0, 1], got {self.gate}")


class _Chunks:
    """Each file's data region cut into chunks, handed out in model order to whichever reader asks next."""

    def __init__(self, ctx: LoadContext, chunk: int):
        self.ctx, self.chunk = ctx, chunk
        self.starts = [(f.path, pos, f.data_end) for f in ctx.files for pos in range(f.data_start, f.data_end, chunk)]
        self._next, self.done = 0, 0
        self._lock = threading.Lock()

    def take(self) -> tuple[str, int, int] | None:
        with self._lock:
            if self._next >= len(self.starts):
                return None
            self._next += 1
            return self.starts[self._next - 1]

    def warm(self, stop: threading.Event) -> None:
        buf = bytearray(self.chunk)  # per reader; the bytes are discarded, the page cache keeps them
        while not stop.is_set():
            got = self.take()
            if got is None:
                return
            path, pos, end = got
            os.preadv(self.ctx.fd(path), [memoryview(buf)[: min(self.chunk, end - pos)]], pos)
            with self._lock:
                self.done += 1


class WarmerStrategy(Strategy):
    name: ClassVar[str] = "warmer"
    summary: ClassVar[str] = "thread pool pre-reads the data region into the page cache while the loader uploads; skipped when mincore shows >= gate resident"
    Params: ClassVar[type] = WarmerParams

    def _load(self, ctx: LoadContext) -> None:
        p = self.params
        if ctx.evict:
            ctx.engage("warmer", 0, p.threads, unit="threads", note=f"skipped: {eviction_reason(ctx)}{files_note(ctx)}")
            pread_upload(ctx)
            return
        frac = probe_resident(ctx)
        if frac >= p.gate:
            ctx.engage("warmer", 0, p.threads, unit="threads", note=f"skipped: {frac:.0%} resident{files_note(ctx)}")
            pread_upload(ctx)
            return
        chunks = _Chunks(ctx, p.chunk_mib * MiB)
        n = min(p.threads, len(chunks.starts))
        with ThreadGuard("warmer") as guard:
            for _ in range(n):
                guard.spawn(chunks.warm, guard.stop)
            pread_upload(ctx)
        if guard.error is not None:  # advisory reads: the load itself is complete and correct
            ctx.note(f"warmer thread failed: {guard.error!r}")
        ctx.count("warm_chunks", chunks.done)
        cap = f", {p.threads} asked" if n < p.threads else ""
        ctx.set_path(readers=n + 1)  # the warmers plus the loading thread read the file at once
        ctx.engage("warmer", n, n, unit="threads",
                   note=f"{chunks.done}/{len(chunks.starts)} chunks warmed{cap}, {frac:.0%} resident at start"
                   f"{files_note(ctx)}")
