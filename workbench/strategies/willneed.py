"""``willneed``: one POSIX_FADV_WILLNEED over the data region (of each file of the model), so disk reads overlap device init and the
first uploads, then per-tensor pread (seeds/pr617, attempt 2). A single WILLNEED does not saturate a
striped array; the ``warmer`` strategy is the follow-up."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from workbench.strategies.toolkit import files_note, pread_upload
from workbench.strategies.base import BaseParams, LoadContext, Strategy


@dataclass(frozen=True)
class WillneedParams(BaseParams):
    """``evict``: DONTNEED after each read (None: the device's policy)."""


class WillneedStrategy(Strategy):
    name: ClassVar[str] = "willneed"
    summary: ClassVar[str] = "one POSIX_FADV_WILLNEED over the data region, then per-tensor pread"
    Params: ClassVar[type] = WillneedParams

    def _load(self, ctx: LoadContext) -> None:
        calls, advised = 0, 0
        with ctx.phase("prefetch"):
            for f in ctx.files:  # one call per file, every file advised before the first read
                start, end = f.data_range
                if end > start:
                    os.posix_fadvise(ctx.fd(f), start, end - start, os.POSIX_FADV_WILLNEED)
                    calls, advised = calls + 1, advised + end - start
        ctx.engage("willneed", calls, len(ctx.files), unit="calls",
                   note=f"{advised / 2**20:.1f} MiB advised{files_note(ctx)}")
        if ctx.evict:
            ctx.note("willneed under eviction: pages are prefetched, then dropped after each read")
        pread_upload(ctx)
