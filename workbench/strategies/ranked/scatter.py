"""``scatter``: rank 0 reads the checkpoint and scatters each rank its slices through the process group
(``torch.distributed.scatter``: NCCL over NVLink on GPUs, gloo over loopback TCP on CPUs); no other
rank touches the files.

Each rank's part is one packed payload (its slices in plan order, padding included); rank 0 reads every
file's tensor data into host memory (the whole checkpoint: its RAM must hold it), then scatters the
payloads in ``chunk_mib`` pieces (every rank's piece padded to the chunk). With gloo each rank
receives into host memory and uploads its slices; with NCCL the payload is received into device memory
(a torch CUDA tensor on the rank's device) and each slice is adopted from it without a copy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from workbench.registry import Availability
from workbench.strategies.params import BaseParams, check_param
from workbench.strategies.ranked.base import RankContext, RankedStrategy
from workbench.strategies.ranked.layout import RankPlan, plan_rank


@dataclass(frozen=True)
class ScatterParams(BaseParams):
    """``chunk_mib``: bytes per rank per scatter call."""

    chunk_mib: int = 64

    def __post_init__(self) -> None:
        check_param("scatter", "chunk_mib", 1 <= self.chunk_mib <= 4096, f"1..4096, got {self.chunk_mib}")


class ScatterStrategy(RankedStrategy):
    name: ClassVar[str] = "scatter"
    summary: ClassVar[str] = "rank 0 reads the checkpoint and scatters every rank its slices over the process group"
    Params: ClassVar[type] = ScatterParams

    @classmethod
    def available(cls) -> Availability:
        import importlib.util

        ok = importlib.util.find_spec("torch") is not None
        return Availability(ok, "" if ok else "needs torch (torch.distributed)")

    def _load(self, ctx: RankContext) -> None:
        import torch
        import torch.distributed as dist

        plans = [plan_rank(ctx.index, ctx.plan.layout, r, ctx.world) for r in range(ctx.world)]
        sizes = [p.nbytes for p in plans]
        chunk = min(self.params.chunk_mib << 20, max(max(sizes), 1))
        on_gpu = ctx.transport == "nccl"
        where = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
        payload = torch.zeros(sizes[ctx.rank], dtype=torch.uint8, device=where)
        model = self._read_all(ctx) if ctx.rank == 0 else None
        pieces = -(-max(sizes) // chunk)
        with ctx.phase("scatter"):
            for k in range(pieces):
                out = torch.empty(chunk, dtype=torch.uint8, device=where)
                parts = None
                if ctx.rank == 0:
                    parts = [torch.from_numpy(_payload_piece(model, plans[r], k * chunk, chunk)).to(where)
                             for r in range(ctx.world)]
                    ctx.count_interconnect(sum(max(0, min(chunk, sizes[r] - k * chunk)) for r in range(1, ctx.world)))
                dist.scatter(out, parts, src=0, group=ctx.group)
                got = max(0, min(chunk, sizes[ctx.rank] - k * chunk))
                if ctx.rank != 0:
                    ctx.count_interconnect(got)
                if got:
                    payload[k * chunk:k * chunk + got].copy_(out[:got])
        self._place(ctx, payload, on_gpu)

    def _read_all(self, ctx: RankContext) -> dict[str, tuple[int, np.ndarray]]:
        """Every file's tensor data in host memory: path → (its first offset, the bytes)."""
        out = {}
        with ctx.phase("read"):
            for f in ctx.index.files:
                host = np.empty(f.data_end - f.data_start, dtype=np.uint8)
                ctx.read(f.path, f.data_start, host)
                out[f.path] = (f.data_start, host)
        return out

    def _place(self, ctx: RankContext, payload: Any, on_gpu: bool) -> None:
        with ctx.phase("upload"):
            if on_gpu:  # already on the device: each slice adopted where it lies in the payload
                base, pos = payload.data_ptr(), 0
                for s in ctx.plan.slices:
                    ctx.buffers.append(ctx.device.adopt(base + pos, s.nbytes, payload))
                    pos += s.nbytes
                return
            ctx.place_all()
            host, pos = payload.numpy(), 0
            for i, s in enumerate(ctx.plan.slices):
                ctx.device.copy_h2d(ctx.buffers[i], 0, host[pos:pos + s.nbytes])
                pos += s.nbytes


def _payload_piece(model: Any, plan: RankPlan, start: int, chunk: int) -> np.ndarray:
    """Bytes ``start .. start + chunk`` of ``plan``'s packed payload (slices in order, each padded to its
    ``nbytes`` with zeros), zero past its end."""
    out = np.zeros(chunk, dtype=np.uint8)
    pos = 0  # payload offset of the current slice
    for s in plan.slices:
        if pos >= start + chunk:
            break
        if pos + s.nbytes > start:
            first = pos
            for off, n in s.ranges:
                lo, hi = max(first, start), min(first + n, start + chunk)
                if lo < hi:
                    base, host = model[s.file]
                    src = off - base + (lo - first)
                    out[lo - start:hi - start] = host[src:src + hi - lo]
                first += n
        pos += s.nbytes
    return out
