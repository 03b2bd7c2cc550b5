"""``ranges``: every rank reads only the byte ranges of its own slices (a row-parallel slice is one range
per row) and uploads them.

``upload=pageable`` (the default): each slice gathered in a fresh heap buffer, then copied. ``upload=pinned``:
``threads`` readers share a ring of ``2 × threads`` page-locked slots of ``staging_mib``
(:class:`~workbench.upload.staging.StagingRing`); each preads a piece of a range into a slot and copies it
asynchronously to its place in the slice's buffer, the slot fenced before it is refilled — every rank
streaming its own ranges at the pinned rate, in parallel with the other ranks."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from workbench.strategies.params import BaseParams, check_param
from workbench.strategies.ranked.base import RankContext, RankedStrategy
from workbench.upload.staging import StagingRing

UPLOADS = ("pageable", "pinned")


@dataclass(frozen=True)
class RangesParams(BaseParams):
    """``upload``: pageable | pinned; ``threads`` and ``staging_mib``: the pinned readers and their slots."""

    upload: str = "pageable"
    threads: int = 4
    staging_mib: int = 16

    def __post_init__(self) -> None:
        check_param("ranges", "upload", self.upload in UPLOADS, f"one of {', '.join(UPLOADS)}, got {self.upload!r}")
        check_param("ranges", "threads", 1 <= self.threads <= 64, f"1..64, got {self.threads}")
        check_param("ranges", "staging_mib", 1 <= self.staging_mib <= 1024, f"1..1024, got {self.staging_mib}")


class RangesStrategy(RankedStrategy):
    name: ClassVar[str] = "ranges"
    summary: ClassVar[str] = "every rank preads only its slices' byte ranges and uploads them (upload=pageable|pinned)"
    Params: ClassVar[type] = RangesParams

    def _load(self, ctx: RankContext) -> None:
        ctx.place_all()
        if self.params.upload == "pinned":
            self._pinned(ctx)
            return
        for i, s in enumerate(ctx.plan.slices):
            with ctx.phase("read"):
                host = np.empty(s.data_bytes, dtype=np.uint8)
                pos = 0
                for offset, n in s.ranges:
                    ctx.read(s.file, offset, host[pos:pos + n])
                    pos += n
            with ctx.phase("upload"):
                ctx.upload(i, host)

    def _pinned(self, ctx: RankContext) -> None:
        step = self.params.staging_mib << 20
        pieces = [p for i, s in enumerate(ctx.plan.slices) for p in _chunks(i, s.file, s.ranges, step)]
        for i, s in enumerate(ctx.plan.slices):
            if s.nbytes > s.data_bytes:  # the vocabulary's padding rows
                ctx.device.copy_h2d(ctx.buffers[i], s.data_bytes, np.zeros(s.nbytes - s.data_bytes, dtype=np.uint8))
        for path in {p[2] for p in pieces}:
            ctx.fd(path)  # opened (and checked) here, not by the threads
        largest = max((sum(n for _, n in p[3]) for p in pieces), default=1)
        with ctx.phase("staging"):
            ring = StagingRing(ctx.device, 2 * self.params.threads, min(step, largest))
        ctx.stack.callback(ring.close, False)  # the error path; closed below otherwise

        def one(piece: tuple[int, int, str, list[tuple[int, int]]]) -> None:
            i, dst, path, ranges = piece
            total = sum(n for _, n in ranges)
            slot = ring.acquire()
            try:
                with slot.view[:total] as view:
                    pos = 0
                    for offset, n in ranges:  # a row-parallel slice: its rows packed in the slot
                        with view[pos:pos + n] as part:
                            ctx.read(path, offset, part)
                        pos += n
                    ctx.device.copy_h2d(ctx.buffers[i], dst, view, asynchronous=True)
            finally:
                ring.release(slot)

        with ctx.phase("read"), ThreadPoolExecutor(self.params.threads) as pool:
            list(pool.map(one, pieces))
        with ctx.phase("staging"):
            ring.close()
        ctx.notes.append(f"{len(pieces)} pieces on {self.params.threads} threads through {ring.describe()}")


def _chunks(i: int, path: str, ranges: tuple[tuple[int, int], ...], step: int) -> list[tuple[int, int, str, list]]:
    """Slice ``i``'s ranges cut into pieces of at most ``step`` bytes of its (contiguous) buffer, each
    piece the file ranges that fill it: (slice, offset in its buffer, file, [(file offset, bytes)])."""
    out: list[tuple[int, int, str, list]] = []
    dst, parts, size = 0, [], 0
    for offset, n in ranges:
        while n:
            take = min(n, step - size)
            parts.append((offset, take))
            size, offset, n = size + take, offset + take, n - take
            if size == step:
                out.append((i, dst, path, parts))
                dst, parts, size = dst + size, [], 0
    if parts:
        out.append((i, dst, path, parts))
    return out
