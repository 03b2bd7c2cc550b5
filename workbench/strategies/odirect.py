"""``odirect``: O_DIRECT reads of each tensor's enclosing block-aligned window into a per-lane bounce
buffer, then a shift copy that moves the payload to the buffer's start, then an upload from the bounce
buffer. The shift copy is the cost seeds/pr143 measured (200+ MiB a token of pure shift correction on
GGUF's 32-byte alignment); it is counted in ``shift_copy_bytes`` (``expert_shift_copy_bytes`` for the
expert blobs' share). Each file of the model has one O_DIRECT descriptor and its own block size
(:mod:`workbench.strategies.odirect_bounce`); a file where O_DIRECT is refused (EINVAL on some file
systems) is read with buffered pread instead, and the load says so: ``odirect: n/N`` counts the tensors
read with O_DIRECT (``0/N — INERT`` when every file refused).

``mode=bounce`` is that path for every tensor. ``mode=inplace`` reads each expert blob straight into a
reservation placed at the file's remainder — no shift copy — and uploads it in one copy
(:mod:`workbench.strategies.odirect_inplace`). Both modes report ``odirect-zero-copy: n/m layer
buffers placed — ON|PARTIAL|INERT`` (with the reason when not all) and land the same bytes."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping

from workbench.formats.index import TensorInfo
from workbench.registry import Availability
from workbench.strategies.base import BaseParams, LoadContext, Strategy, check_param
from workbench.strategies.odirect_bounce import (
    BounceLane, DirectFiles, expert_tensors, open_direct_files, zero_copy_fact,
)
from workbench.strategies.odirect_inplace import load_inplace
from workbench.strategies.toolkit import MiB, ThreadGuard, files_note, pread_upload
from workbench.upload.base import DeviceBuffer

MODES = ("bounce", "inplace")


@dataclass(frozen=True)
class OdirectParams(BaseParams):
    """``threads`` lanes (each with its own bounce buffer of ``bounce_mib``); ``evict`` only matters
    in the buffered fallback."""

    small_pieces: ClassVar[Mapping[str, Any]] = MappingProxyType({"bounce_mib": 1, "threads": 2})
    variants: ClassVar[tuple[Mapping[str, Any], ...]] = (MappingProxyType({"mode": "inplace"}),)

    threads: int = 1
    bounce_mib: int = 16
    mode: str = "bounce"

    def __post_init__(self) -> None:
        check_param("odirect", "mode", self.mode in MODES, f"one of {', '.join(MODES)}, got {self.mode!r}")
        check_param("odirect", "threads", self.threads >= 1, f"must be >= 1, got {self.threads}")
        check_param("odirect", "bounce_mib", self.bounce_mib >= 1, f"must be >= 1, got {self.bounce_mib}")


class OdirectStrategy(Strategy):
    name: ClassVar[str] = "odirect"
    summary: ClassVar[str] = "O_DIRECT reads of the aligned window into a bounce buffer + shift copy (mode=inplace: expert blobs read straight into placed reservations, no shift); buffered fallback where refused"
    Params: ClassVar[type] = OdirectParams

    @classmethod
    def available(cls) -> Availability:
        return Availability(True, "per file at load time: buffered pread fallback where O_DIRECT is refused")

    def _load(self, ctx: LoadContext) -> None:
        for counter in ("shift_copy_bytes", "expert_shift_copy_bytes"):  # recorded even when nothing shifts
            ctx.count(counter, 0)
        files = open_direct_files(ctx)
        direct, buffered = files.split(ctx.tensors)
        if buffered:
            ctx.note(f"O_DIRECT refused ({files.refused()}): buffered pread instead")
            pread_upload(ctx, buffered)
        if self.params.mode == "inplace":
            load_inplace(ctx, files, self.params.threads, self.params.bounce_mib)
        else:
            if direct:
                self._load_bounce(ctx, files, direct)
            why = "mode=bounce" if direct or not buffered else f"O_DIRECT refused ({files.refused()})"
            ctx.engaged.append(zero_copy_fact(0, len(ctx.index.blobs), [why], ctx.counters))
        self._report(ctx, files, len(direct))

    def _report(self, ctx: LoadContext, files: DirectFiles, n_direct: int) -> None:
        n = len(ctx.tensors)
        if not n_direct:
            ctx.engage("odirect", 0, n, note=files.refused() if n else "nothing to read")
            return
        shifted = ctx.counters.get("shift_copy_bytes", 0)
        blocks = "/".join(map(str, files.blocks)) or "no"
        refused = f"; buffered: {files.refused()}" if n_direct < n else ""
        ctx.set_path(readers=self.params.threads, direct=True)
        ctx.engage("odirect", n_direct, n, note=f"block {blocks} B, shift copy {shifted / MiB:.2f} MiB"
                                                f"{files_note(ctx)}{refused}")
        ctx.note(f"shift copy: {shifted} B in {ctx.counters.get('shifted_pieces', 0)} pieces, "
                 f"{ctx.counters.get('expert_shift_copy_bytes', 0)} B of it expert blobs' "
                 "(pure shift correction: tensor offsets off the block boundary)")
        if self.params.mode == "inplace":
            ctx.note(f"in place: {ctx.counters.get('inplace_bytes', 0)} B in {ctx.counters.get('inplace_reads', 0)} "
                     "reads straight into placed reservations, then one upload per blob")

    def _load_bounce(self, ctx: LoadContext, files: DirectFiles, tensors: tuple[TensorInfo, ...]) -> None:
        p, experts = self.params, expert_tensors(ctx)
        bufs = [ctx.place(t) for t in tensors]
        lanes = [BounceLane(ctx, files, p.bounce_mib * MiB) for _ in range(min(p.threads, len(tensors)))]
        if len(lanes) == 1:
            for t, buf in zip(tensors, bufs):
                with ctx.phase("read"):  # read + shift + upload interleave per piece
                    lanes[0].load(t, buf, expert=t.name in experts)
            return
        with ctx.phase("read"), ThreadGuard("odirect") as guard:  # lanes upload themselves
            for k, lane in enumerate(lanes):
                guard.spawn(_lane_run, lane, tensors, bufs, experts, k, len(lanes), guard)
            guard.join()
        ctx.note(f"{len(lanes)} lanes read, shift and upload themselves; the read phase includes uploads")


def _lane_run(lane: BounceLane, tensors: tuple[TensorInfo, ...], bufs: list[DeviceBuffer], experts: set[str],
              k: int, step: int, guard: ThreadGuard) -> None:
    for i in range(k, len(tensors), step):
        if guard.stop.is_set():
            return
        lane.load(tensors[i], bufs[i], expert=tensors[i].name in experts)
