"""``experts upload=staged``: every expert blob and dense tensor through the dense path's pipeline.

The ``ring`` strategy's readers — pread a window into a pinned slot, issue the window's asynchronous
copies from the reader itself, no thread waiting on another — over the MoE model's own device
layout: each blob one device buffer whose experts land at their offsets (as an engine packs them),
every dense tensor its own buffer, all carved from one device allocation. A blob whose members follow
each other in the file goes up in one copy per window (:func:`~workbench.upload.staged_read.plan_windows`
merges them). One sampled residency probe per load picks the plan, as ``ring``'s does: warm, a queue
of ``slot_mib`` windows shared by ``readers``; cold, ``cold_readers`` contiguous shares read in
``cold_mib`` preads. The ring is sized to the load (:func:`~workbench.upload.staging.size_ring`): a
small model provisions no more pinned memory than it moves (rounded up to a slot; ``sized=0``: the ring
as asked, whatever the model).

Where the device's memory is host memory (the host backends: :meth:`~workbench.upload.base.Device.host_view`)
and ``direct=auto``, there is no staging hop — it would be a second memcpy of every byte on the same
cores — : the readers read each window's pieces straight into the buffers
(:class:`~workbench.upload.direct_read.DirectReader`), fitted warm like ``ring``'s
(:func:`~workbench.upload.staging_plan.fit_warm`: readers to the usable cores and to the load, about four
windows a reader), and the ``direct_to_device`` fact says so; ``direct=off`` always stages.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from workbench.strategies.base import LoadContext
from workbench.strategies.toolkit import (MiB, Evictor, StagingRing, engage_staging, files_note, probe_resident,
                                          reader_opener, settle_staged)
from workbench.upload.base import DeviceBuffer
from workbench.upload.direct_read import DirectReader
from workbench.upload.staged_read import Extent, SharedQueue, StagedReader, Window, plan_windows, split_shares
from workbench.upload.staging import size_ring
from workbench.upload.staging_plan import fit_warm


def model_extents(ctx: LoadContext, items: Sequence[Any], bufs: Sequence[DeviceBuffer]) -> list[Extent]:
    """Every member of every item (``members``: (tensor, offset in the item's buffer)) as an extent,
    in model order: file by file, by offset."""
    order = {f.path: k for k, f in enumerate(ctx.files)}
    extents = [Extent(t.file, t.offset, t.nbytes, buf, at) for it, buf in zip(items, bufs) for t, at in it.members]
    return sorted(extents, key=lambda e: (order[e.file], e.offset))


@dataclass(frozen=True)
class StagedPlan:
    """How one staged load reads: the plan (warm or cold), its windows, readers and ring."""

    warm: bool
    resident: float
    window: int  # bytes per window
    asked: tuple[int, int]  # (slots, slot bytes) the parameters ask for on a large model
    windows: list[Window]
    readers: int
    slots: int
    slot_bytes: int
    fitted: str = ""  # why the direct path's warm readers and windows are not the ones asked for


def plan_staged(ctx: LoadContext, extents: list[Extent], p: Any, direct: bool = False) -> StagedPlan:
    """The warm or cold plan (one sampled residency probe), sized to the load unless ``p.sized`` is off;
    ``direct``: no staging, warm readers and windows fitted to the load and the usable cores."""
    resident = probe_resident(ctx, sampled=True)
    warm = resident >= p.gate
    base = (p.slot_mib if warm else p.cold_mib) * MiB
    want = p.readers if warm else p.cold_readers
    size = base  # windows are not shrunk for a small model: on the 2-core host (2026-12-02, 16 MiB model,
    # n=8) 16 readers of 1 MiB windows read slower than 2 of 8 MiB (97 against 66 ms), window 0.95× [0.57–1.55]
    if direct:
        fit = fit_warm(sum(e.nbytes for e in extents), want, base, spare=0, memory=0) if warm else None
        size = fit.window if fit else base
        windows = plan_windows(extents, size)
        readers = max(1, min(fit.readers if fit else want, len(windows)))
        return StagedPlan(warm, resident, size, (0, 0), windows, readers, 0, 0, fit.why if fit else "")
    windows = plan_windows(extents, size)
    slots, slot_bytes = min(want, len(windows)) + p.spare, size
    if p.sized:
        slots, slot_bytes = size_ring(slots, size, [w.hi - w.lo for w in windows])
    readers = max(1, min(want, len(windows), slots))
    return StagedPlan(warm, resident, size, (want + p.spare, base), windows, readers, slots, slot_bytes)


def upload_staged(ctx: LoadContext, items: Sequence[Any], bufs: Sequence[DeviceBuffer], p: Any) -> None:
    """Stage every item's bytes into its buffer (``p``: the experts params); straight into them where
    the device's memory is host memory and ``p.direct`` is ``auto``."""
    direct = p.direct == "auto" and DirectReader.usable(ctx.device, bufs)
    plan = plan_staged(ctx, model_extents(ctx, items, bufs), p, direct)
    want = p.readers if plan.warm else p.cold_readers
    if not plan.windows:
        ctx.engage("staged_readers", 0, want, unit="threads", note="nothing to read")
        return
    sources = ([SharedQueue(plan.windows)] * plan.readers if plan.warm else
               split_shares(plan.windows, plan.readers))
    ring = _run_direct(ctx, sources) if direct else _run(ctx, sources, plan.slots, plan.slot_bytes, p)
    ctx.set_path(readers=len(sources), copy_from="none" if direct else "pinned")
    gate, mib = f"{plan.resident:.0%} resident", plan.window / MiB
    note = (f"warm: {gate} >= {p.gate:.0%}, {len(plan.windows)} windows of {mib:g} MiB shared" if plan.warm else
            f"cold: {gate} < {p.gate:.0%}, a contiguous share per reader in {mib:g} MiB reads")
    fitted = f"; fitted to the load: {plan.fitted}" if plan.fitted else ""
    ctx.engage("staged_readers", len(sources), want, unit="threads", note=note + files_note(ctx) + fitted)
    if ring is None:
        ctx.engage("direct_to_device", len(bufs), len(bufs), unit="buffers",
                   note=f"{ctx.device.info().backend}: the device's memory is host memory, read straight into "
                        f"it: no staging hop{files_note(ctx)}")
        if p.staging == "wc":  # asked for, and nothing to apply it to: said, not dropped
            ctx.engage("write_combined", 0, 1, unit="rings", note="no staging ring: read straight into host memory")
        _report_copies(ctx, items, plan.windows, "pieces read in place")
        return
    sized = "" if not p.sized or (plan.slots, plan.slot_bytes) == plan.asked else (
        f"; sized to the load: {plan.slots} slots of {plan.slot_bytes / MiB:g} MiB, not "
        f"{plan.asked[0]} of {plan.asked[1] / MiB:g}")
    engage_staging(ctx, ring, note=sized)
    _report_copies(ctx, items, plan.windows)


def _run_direct(ctx: LoadContext, sources: list[Any]) -> None:
    """Every window read straight into the buffers (host memory): no ring."""
    evictor = Evictor(ctx)
    reader = DirectReader(ctx.device, open_file=reader_opener(ctx), after_read=evictor.drop if ctx.evict else None)
    try:
        with ctx.phase("read"):  # readers start working as they spawn
            tally = reader.read(sources)
            evictor.finish()
    finally:
        reader.close()
    _count(ctx, tally)
    return None


def _count(ctx: LoadContext, tally: Any) -> None:
    ctx.count("bytes", tally.bytes)
    for key, value in tally.counters().items():
        ctx.count(key, value)


def _run(ctx: LoadContext, sources: list[Any], slots: int, slot_bytes: int, p: Any) -> StagingRing:
    evictor = Evictor(ctx)
    with ctx.phase("staging"):
        ring = StagingRing(ctx.device, slots, slot_bytes, source=p.staging, provision=p.provision,
                           mapping=p.mapping)
    ctx.cleanup(ring.close, False)  # error path only: closed below otherwise
    reader = StagedReader(ctx.device, ring, open_file=reader_opener(ctx),
                          after_read=evictor.drop if ctx.evict else None)
    with ctx.phase("read"):  # readers start working as they spawn
        tally = reader.read(sources)
    settle_staged(ctx, ring, evictor)
    _count(ctx, tally)
    return ring


def _report_copies(ctx: LoadContext, items: Sequence[Any], windows: list[Window], what: str = "copies") -> None:
    """``staged_blobs: 33/33 blobs — ON (each blob one device buffer, …; 260 copies for 256 windows)``."""
    blobs = sum(1 for it in items if it.blob is not None)
    copies = sum(len(w.pieces) for w in windows)
    note = (f"each blob one device buffer, its experts at their offsets; {copies} {what} for {len(windows)} "
            f"windows; {len(items)} buffers carved from one device allocation")
    ctx.engage("staged_blobs", blobs, blobs, unit="blobs", note=note if blobs else "no expert blobs: not a MoE model")
