"""``ranges``: every rank reads only the byte ranges of its own slices (one pread per range: a
row-parallel slice is one range per row), each slice gathered in a heap buffer, then uploaded."""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from workbench.strategies.ranked.base import RankContext, RankedStrategy


class RangesStrategy(RankedStrategy):
    name: ClassVar[str] = "ranges"
    summary: ClassVar[str] = "every rank preads only its slices' byte ranges and uploads them"

    def _load(self, ctx: RankContext) -> None:
        ctx.place_all()
        for i, s in enumerate(ctx.plan.slices):
            with ctx.phase("read"):
                host = np.empty(s.data_bytes, dtype=np.uint8)
                pos = 0
                for offset, n in s.ranges:
                    ctx.read(s.file, offset, host[pos:pos + n])
                    pos += n
            with ctx.phase("upload"):
                ctx.upload(i, host)
