"""``odirect``: O_DIRECT reads of each tensor's enclosing block-aligned window into a per-lane bounce
buffer, then a shift copy that moves the payload to the buffer's start, then an upload from the bounce
buffer. The shift copy is the cost seeds/pr143 measured (200+ MiB a token of pure shift correction on
GGUF's 32-byte alignment); it is counted in ``shift_copy_bytes`` (``expert_shift_copy_bytes`` for the
expert blobs' share). Where O_DIRECT is refused (EINVAL on some file systems) the load falls back to
buffered pread and says so: ``odirect: 0/N — INERT``.

``mode=bounce`` is that path for every tensor. ``mode=inplace`` reads each expert blob straight into a
reservation placed at the file's remainder — no shift copy — and uploads it in one copy
(:mod:`workbench.strategies.odirect_inplace`). Both modes report ``odirect-zero-copy: n/m layer
buffers placed — ON|PARTIAL|INERT`` (with the reason when not all) and land the same bytes."""
from __future__ import annotations

import ctypes
import errno
import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping

from workbench.errors import FormatError
from workbench.formats.drift import check_unchanged
from workbench.formats.index import TensorInfo
from workbench.io import direct
from workbench.io.pagecache import filesystem_type
from workbench.registry import Availability
from workbench.strategies.odirect_inplace import MODES, load_inplace, zero_copy_fact
from workbench.strategies.toolkit import MiB, ThreadGuard, pread_upload
from workbench.strategies.base import BaseParams, LoadContext, Strategy, check_param
from workbench.upload.base import DeviceBuffer


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


class _Lane:
    """One bounce buffer and the read → shift → upload of tensor pieces through it."""

    def __init__(self, ctx: LoadContext, fd: int, block: int, nbytes: int):
        self.ctx, self.fd, self.block = ctx, fd, block
        self.bounce = direct.AlignedBuffer(nbytes + block, max(block, 4096))
        ctx.cleanup(self.bounce.close)
        self.payload_max = nbytes  # shift < block, so shift + payload always fits

    def read(self, offset: int, nbytes: int, expert: bool = False) -> memoryview:
        """The payload at the start of the bounce buffer (shift-copied when the window started early)."""
        start, length, shift = direct.aligned_window(offset, nbytes, self.block)
        got = direct.read_direct(self.fd, self.bounce.view, start, length)
        if got < shift + nbytes:  # read_direct stops short only at end of file
            raise FormatError(self.ctx.index.path, "size", f"O_DIRECT read of {length} B at {start} returned "
                                                           f"{got}: end of file, truncated since it was indexed?")
        if shift:
            ctypes.memmove(self.bounce.address, self.bounce.address + shift, nbytes)
            self.ctx.count("shift_copy_bytes", nbytes)
            self.ctx.count("shifted_pieces")
            if expert:
                self.ctx.count("expert_shift_copy_bytes", nbytes)
        return self.bounce.view[:nbytes]

    def load(self, t: TensorInfo, buf: DeviceBuffer, at: int = 0, expert: bool = False) -> None:
        """Tensor ``t`` into ``buf`` at ``at``, through the bounce buffer in pieces."""
        for dst in range(0, t.nbytes, self.payload_max):
            n = min(self.payload_max, t.nbytes - dst)
            with self.read(t.offset + dst, n, expert) as payload:
                self.ctx.upload(buf, at + dst, payload)


def expert_tensors(ctx: LoadContext) -> set[str]:
    """Names of the tensors holding expert blobs (their shift copies are counted apart)."""
    return {name for blob in ctx.index.blobs for name in blob.tensors}


def _open(ctx: LoadContext) -> tuple[int | None, str]:
    """An O_DIRECT fd whose first read works, or (None, why not)."""
    fs = filesystem_type(ctx.index.path)
    try:
        fd = direct.open_direct(ctx.index.path)
    except OSError as exc:
        return None, f"{errno.errorcode.get(exc.errno or 0, exc.errno)} on {fs}"
    ctx.cleanup(os.close, fd)
    check_unchanged(ctx.index, fd)
    probe = direct.direct_io_support(ctx.index.path)  # some file systems open O_DIRECT, then refuse reads
    return (fd, "") if probe else (None, probe.reason)


class OdirectStrategy(Strategy):
    name: ClassVar[str] = "odirect"
    summary: ClassVar[str] = "O_DIRECT reads of the aligned window into a bounce buffer + shift copy (mode=inplace: expert blobs read straight into placed reservations, no shift); buffered fallback where refused"
    Params: ClassVar[type] = OdirectParams

    @classmethod
    def available(cls) -> Availability:
        return Availability(True, "per file at load time: buffered pread fallback where O_DIRECT is refused")

    def _load(self, ctx: LoadContext) -> None:
        n = len(ctx.tensors)
        for counter in ("shift_copy_bytes", "expert_shift_copy_bytes"):  # recorded even when nothing shifts
            ctx.count(counter, 0)
        fd, why = _open(ctx)
        if fd is None:
            ctx.note(f"O_DIRECT refused ({why}): buffered pread instead")
            pread_upload(ctx, ctx.open_fd())
            ctx.engage("odirect", 0, n, note=why)
            ctx.engaged.append(zero_copy_fact(0, len(ctx.index.blobs), [f"O_DIRECT refused ({why})"], ctx.counters))
            return
        block = direct.logical_block_size(ctx.index.path)
        if self.params.mode == "inplace":
            load_inplace(ctx, _Lane, fd, block, self.params.threads, self.params.bounce_mib)
        elif self.params.threads == 1:
            experts = expert_tensors(ctx)
            lane = _Lane(ctx, fd, block, self.params.bounce_mib * MiB)
            for t in ctx.tensors:
                buf = ctx.place(t)
                with ctx.phase("read"):  # read + shift + upload interleave per piece
                    lane.load(t, buf, expert=t.name in experts)
        else:
            self._load_lanes(ctx, fd, block)
        if self.params.mode == "bounce":
            ctx.engaged.append(zero_copy_fact(0, len(ctx.index.blobs), ["mode=bounce"], ctx.counters))
        shifted = ctx.counters.get("shift_copy_bytes", 0)
        ctx.set_path(readers=self.params.threads, direct=True)
        ctx.engage("odirect", n, n, note=f"block {block} B, shift copy {shifted / MiB:.2f} MiB")
        ctx.note(f"shift copy: {shifted} B in {ctx.counters.get('shifted_pieces', 0)} pieces, "
                 f"{ctx.counters.get('expert_shift_copy_bytes', 0)} B of it expert blobs' "
                 "(pure shift correction: tensor offsets off the block boundary)")
        if self.params.mode == "inplace":
            ctx.note(f"in place: {ctx.counters.get('inplace_bytes', 0)} B in {ctx.counters.get('inplace_reads', 0)} "
                     "reads straight into placed reservations, then one upload per blob")

    def _load_lanes(self, ctx: LoadContext, fd: int, block: int) -> None:
        p = self.params
        bufs = [ctx.place(t) for t in ctx.tensors]
        lanes = [_Lane(ctx, fd, block, p.bounce_mib * MiB) for _ in range(p.threads)]
        with ctx.phase("read"), ThreadGuard("odirect") as guard:  # lanes upload themselves
            for k, lane in enumerate(lanes):
                guard.spawn(self._lane_run, lane, bufs, k, p.threads, guard)
            guard.join()
        ctx.note(f"{p.threads} lanes read, shift and upload themselves; the read phase includes uploads")

    @staticmethod
    def _lane_run(lane: _Lane, bufs: list[DeviceBuffer], k: int, step: int, guard: ThreadGuard) -> None:
        experts = expert_tensors(lane.ctx)
        for i in range(k, len(bufs), step):
            if guard.stop.is_set():
                return
            t = lane.ctx.tensors[i]
            lane.load(t, bufs[i], expert=t.name in experts)
