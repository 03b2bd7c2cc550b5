"""``whole``: every rank reads the whole checkpoint, tensor by tensor, and keeps its slices — the
default of several engines (each rank's loader iterates every tensor of every file and narrows it)."""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from workbench.strategies.ranked.base import RankContext, RankedStrategy, slice_bytes, slices_by_tensor


class WholeStrategy(RankedStrategy):
    name: ClassVar[str] = "whole"
    summary: ClassVar[str] = "every rank reads every tensor of the checkpoint (pread) and uploads its slices"

    def _load(self, ctx: RankContext) -> None:
        mine = slices_by_tensor(ctx.plan)
        ctx.place_all()
        for t in ctx.index.sorted_by_offset():
            with ctx.phase("read"):
                host = np.empty(t.nbytes, dtype=np.uint8)
                ctx.read(t.file, t.offset, host)
            with ctx.phase("upload"):
                for i in mine.get(t.name, ()):
                    ctx.upload(i, slice_bytes(host, t.offset, ctx.plan.slices[i]))
