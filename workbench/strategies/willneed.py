"""``willneed``: one POSIX_FADV_WILLNEED over the data region, so disk reads overlap device init and the
first uploads, then per-tensor pread (seeds/pr617, attempt 2). A single WILLNEED does not saturate a
striped array; the ``warmer`` strategy is the follow-up."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from workbench.strategies.toolkit import pread_upload
from workbench.strategies.base import BaseParams, LoadContext, Strategy


@dataclass(frozen=True)
class WillneedParams(BaseParams):
    """``evict``: DONTNEED after each read (None: the device's policy)."""


class WillneedStrategy(Strategy):
    name: ClassVar[str] = "willneed"
    summary: ClassVar[str] = "one POSIX_FADV_WILLNEED over the data region, then per-tensor pread"
    Params: ClassVar[type] = WillneedParams

    def _load(self, ctx: LoadContext) -> None:
        fd = ctx.open_fd()
        start, end = ctx.data_range
        with ctx.phase("prefetch"):
            if end > start:
                os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_WILLNEED)
        ctx.engage("willneed", 1 if end > start else 0, 1, unit="calls",
                   note=f"{(end - start) / 2**20:.1f} MiB advised")
        if ctx.evict:
            ctx.note("willneed under eviction: pages are prefetched, then dropped after each read")
        pread_upload(ctx, fd)
