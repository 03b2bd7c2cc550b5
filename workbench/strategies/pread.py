"""``pread``: per tensor, pread into a fresh heap buffer, then upload — the baseline every engine starts
from. With ``evict`` it is the historical unified-memory path: posix_fadvise(DONTNEED) after each read,
which on a discrete GPU forces a full disk re-read on every load (seeds/pr617, attempt 1b)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from workbench.strategies._common import pread_upload
from workbench.strategies.base import BaseParams, LoadContext, Strategy


@dataclass(frozen=True)
class PreadParams(BaseParams):
    """``evict``: DONTNEED each tensor's pages after reading it (None: the device's policy)."""


class PreadStrategy(Strategy):
    name: ClassVar[str] = "pread"
    summary: ClassVar[str] = "per-tensor pread into a fresh heap buffer, then upload (evict: DONTNEED after each read)"
    Params: ClassVar[type] = PreadParams

    def _load(self, ctx: LoadContext) -> None:
        fd = ctx.open_fd()
        pread_upload(ctx, fd)
        ctx.engage("heap_copy", len(ctx.tensors), len(ctx.tensors),
                   note="every tensor staged through a heap buffer")
