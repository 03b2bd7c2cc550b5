"""``odirect mode=inplace``: the second write-up's zero-copy O_DIRECT reads, for a whole load.

Each expert blob's destination is reserved here — an anonymous mapping of ``plan_blob``'s ``reserve``
bytes — and the blob is placed in it at the file's own remainder mod the page, so every page-aligned
O_DIRECT window of the blob maps onto the reservation at the same relative position and is read
straight into place: zero shift-copy bytes. The reservation is then uploaded to the blob's device
buffer in one copy. Only the reservation is promised to the reader (``allow_in_place``); a blob
``plan_blob`` declines (a stride that is no page multiple, a remainder that would under-align the
tensors) falls back to the bounce path for that blob, and so do dense tensors, which have no buffer
placed for them. A placed blob counts as placed only if every one of its reads did land in place.
The blobs of a file where O_DIRECT is refused are declined with that reason (the caller reads them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from workbench.expert.blobs import PackedBlob, pack_blobs
from workbench.expert.memory import Reservation
from workbench.expert.placement import BlobPlacement, plan_blob
from workbench.expert.readers import DirectInplaceReader
from workbench.formats.index import PAGE_SIZE, TensorInfo
from workbench.records import MiB
from workbench.strategies.base import LoadContext
from workbench.strategies.odirect_bounce import BounceLane, DirectFiles, zero_copy_fact
from workbench.strategies.toolkit import ThreadGuard
from workbench.upload.base import DeviceBuffer


@dataclass(frozen=True)
class Work:
    """One unit of an in-place load: a placed blob read in place, or one tensor through the bounce."""

    buf: DeviceBuffer
    blob: PackedBlob | None = None
    plan: BlobPlacement | None = None
    tensor: TensorInfo | None = None
    dst: int = 0  # where the tensor goes in ``buf``
    expert: bool = False  # a declined blob's tensor: its shift copy counts as the experts'


class InplaceLane:
    """A bounce lane plus what in-place reads need: an in-place reader per file (over the file's one
    O_DIRECT descriptor) and one reused reservation."""

    def __init__(self, ctx: LoadContext, bounce: BounceLane, reserve: int, chunk: int):
        self.ctx, self.bounce, self.chunk = ctx, bounce, max(PAGE_SIZE, chunk - chunk % PAGE_SIZE)
        self.readers: dict[str, DirectInplaceReader] = {}
        self.reservation: Reservation | None = None
        if reserve:
            self.reservation = Reservation(reserve)
            ctx.cleanup(self.reservation.close)

    def reader(self, path: str) -> DirectInplaceReader:
        """The in-place reader of file ``path`` (made on first use; the caller probed O_DIRECT there)."""
        if path not in self.readers:
            self.readers[path] = DirectInplaceReader(path, fd=self.bounce.files.of(path).fd)
            self.ctx.cleanup(self.readers[path].close)
        return self.readers[path]

    def run(self, work: Work) -> bool:
        """Do one unit; True when it was a placed blob and every read landed in place."""
        if work.blob is None:
            self.bounce.load(work.tensor, work.buf, work.dst, expert=work.expert)
            return False
        return self._read_blob(work.blob, work.plan, work.buf)

    def _read_blob(self, packed: PackedBlob, plan: BlobPlacement, buf: DeviceBuffer) -> bool:
        first, end = packed.blob.span
        region = self.reservation.view[:plan.reserve]
        reader = self.reader(packed.blob.file)
        try:
            in_place = True
            window = first - plan.remainder  # page-aligned: windows never overlap, each lands in place
            for lo in range(window, end, self.chunk):
                piece, stop = max(lo, first), min(lo + self.chunk, end)
                out = reader.read_into(region, plan.remainder + piece - first, piece, stop - piece,
                                            allow_in_place=True)
                in_place &= out.in_place
                self._count(out.shift_copy_bytes, out.in_place, stop - piece)
            self._upload(packed, plan, region, buf)
        finally:
            region.release()
        return in_place

    def _upload(self, packed: PackedBlob, plan: BlobPlacement, region: memoryview, buf: DeviceBuffer) -> None:
        first = packed.blob.offset
        if packed.contiguous:  # the reservation holds the device buffer's bytes as they are: one copy
            with region[plan.remainder:plan.remainder + packed.nbytes] as src:
                self.ctx.upload(buf, 0, src)
            return
        for t, at in packed.members:
            with region[plan.remainder + t.offset - first:plan.remainder + t.end - first] as src:
                self.ctx.upload(buf, at, src)

    def _count(self, shifted: int, in_place: bool, nbytes: int) -> None:
        if shifted:
            for name in ("shift_copy_bytes", "expert_shift_copy_bytes"):
                self.ctx.count(name, shifted)
        if in_place:
            self.ctx.count("inplace_bytes", nbytes)
            self.ctx.count("inplace_reads")


def plan_work(ctx: LoadContext, files: DirectFiles) -> tuple[list[Work], list[str], int]:
    """Every unit of the files read with O_DIRECT, in model order; why blobs were declined (those of
    files read buffered too); and the largest reservation a placed blob needs."""
    packed, dense = pack_blobs(ctx.index)
    rank = {f.path: i for i, f in enumerate(ctx.files)}
    units: list[tuple[tuple[int, int], Work]] = []
    reasons: list[str] = []
    reserve = 0
    refused = sum(1 for p in packed if not files.direct(p.blob.file))
    if refused:  # one reason for them all: the caller reads those files buffered
        some = f" for {refused} of {len(packed)} blobs" if refused < len(packed) else ""
        reasons.append(f"O_DIRECT refused ({files.refused()}){some}")
    for p in packed:
        if not files.direct(p.blob.file):
            continue
        buf = ctx.place_group(p.members, p.nbytes)
        plan = plan_blob(p.blob, PAGE_SIZE)
        where = (rank[p.blob.file], p.blob.offset)
        if plan.placed:
            units.append((where, Work(buf, blob=p, plan=plan)))
            reserve = max(reserve, plan.reserve)
            continue
        reasons.append(f"layer {p.blob.layer} {p.blob.name} experts: {plan.reason}")
        units += [((rank[t.file], t.offset), Work(buf, tensor=t, dst=at, expert=True)) for t, at in p.members]
    units += [((rank[t.file], t.offset), Work(ctx.place(t), tensor=t)) for t in dense if files.direct(t.file)]
    return [w for _, w in sorted(units, key=lambda u: u[0])], reasons, reserve


def load_inplace(ctx: LoadContext, files: DirectFiles, threads: int, bounce_mib: int) -> None:
    """The in-place load of the files read with O_DIRECT: placed blobs straight into their
    reservations, everything else bounced (the tensors of files read buffered are the caller's)."""
    work, reasons, reserve = plan_work(ctx, files)
    placed = [False] * len(work)
    lanes = [InplaceLane(ctx, BounceLane(ctx, files, bounce_mib * MiB), reserve, bounce_mib * MiB)
             for _ in range(min(threads, len(work)))]
    if len(lanes) == 1:
        for i, w in enumerate(work):
            with ctx.phase("read"):  # reads, and the uploads that follow each, interleave per unit
                placed[i] = lanes[0].run(w)
    elif lanes:
        with ctx.phase("read"), ThreadGuard("odirect-inplace") as guard:
            for k, lane in enumerate(lanes):
                guard.spawn(_lane_run, lane, work, placed, k, len(lanes), guard)
            guard.join()
    fallen = sum(1 for w, ok in zip(work, placed) if w.blob is not None and not ok)
    if fallen:
        reasons.append(f"{fallen} placed buffers had a read that could not land in place")
    ctx.engaged.append(zero_copy_fact(sum(placed), len(ctx.index.blobs), reasons, ctx.counters))


def _lane_run(lane: InplaceLane, work: Sequence[Work], placed: list[bool], k: int, step: int,
              guard: ThreadGuard) -> None:
    for i in range(k, len(work), step):
        if guard.stop.is_set():
            return
        placed[i] = lane.run(work[i])
