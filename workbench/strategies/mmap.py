"""``mmap``: keep one read-only mapping alive for the load and upload borrowed slices straight from it —
no heap staging copy (seeds/pr617: pageable H2D from warm mapped pages ~15 GB/s vs ~4-6 GB/s through
pread). Under eviction (a UMA device) the mapping is dropped and the load falls back to pread +
DONTNEED, reported as ``zero_copy: 0/N — INERT``. ``gate``: the seed's fix for its ungated first cut,
where a cold-start borrowed-slice copy soft-faulted serially off disk at ~0.25 GB/s — below ``gate``
resident (probed once per load) use pread instead. ``gate=None`` reproduces the ungated cut.
``register``: page-lock the whole mapping for DMA first (cudaHostRegister, read-only) and copy the
slices asynchronously — the copy engine then reads page-cache pages at the pinned rate (55 GB/s on the
H200 against 9.4 pageable); registering faults in and pins every page, one stall like populate's."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping

from workbench.strategies.toolkit import (eviction_reason, files_note, open_mapping, pread_upload,
                                          probe_resident, upload_borrowed)
from workbench.strategies.base import BaseParams, LoadContext, Strategy, check_param


@dataclass(frozen=True)
class MmapParams(BaseParams):
    """``gate``: use borrowed slices only when at least this fraction is resident (None: always)."""

    variants: ClassVar[tuple[Mapping[str, Any], ...]] = (
        MappingProxyType({"register": True}), MappingProxyType({"gate": 1.0}))  # gate 1.0: pread on a cold file

    gate: float | None = None
    register: bool = False

    def __post_init__(self) -> None:
        ok = self.gate is None or 0.0 <= self.gate <= 1.0
        check_param("mmap", "gate", ok, f"must be in [0, 1] or none, got {self.gate}")


def fallback_reason(ctx: LoadContext, gate: float | None) -> str:
    """Why borrowed slices must not be used for this load ('' when they may)."""
    if ctx.evict:
        return f"{eviction_reason(ctx)}: mapping dropped, pread + DONTNEED"
    if gate is not None:
        frac = probe_resident(ctx)
        if frac < gate:
            return f"gate: {frac:.0%} resident < {gate:.0%}, pread instead of faulting off disk"
        ctx.note(f"gate passed: {frac:.0%} resident >= {gate:.0%}")
    return ""


class MmapStrategy(Strategy):
    name: ClassVar[str] = "mmap"
    summary: ClassVar[str] = "upload borrowed slices of one live read-only mapping, no heap copy (register: page-lock it for DMA); pread under eviction or below gate"
    Params: ClassVar[type] = MmapParams

    def _load(self, ctx: LoadContext) -> None:
        n = len(ctx.tensors)
        reason = fallback_reason(ctx, self.params.gate)
        if reason or n == 0:
            pread_upload(ctx)
            ctx.engage("zero_copy", 0, n, note=(reason or "no tensors") + files_note(ctx))
            return
        if self.params.register:
            _upload_registered_mappings(ctx)
        else:
            upload_borrowed(ctx)
            ctx.set_path(readers=0, copy_from="mmap")  # no reader threads: the copy itself faults pages in
        ctx.engage("zero_copy", n, n, note=f"one mapping per file{files_note(ctx)}" if len(ctx.files) > 1 else "")


def _upload_registered_mappings(ctx: LoadContext) -> None:
    """Each file's mapping page-locked whole, then its slices copied asynchronously; a file whose
    registration is refused is copied pageable."""
    pinned = locked = 0
    for f, tensors in ctx.by_file():
        if not tensors:
            continue
        mapping = open_mapping(ctx, f)
        with ctx.phase("prefetch"):  # registering pins the pages: every one is faulted in here
            handle = ctx.device.register_host(mapping.view)
        if handle is None:
            upload_borrowed(ctx, tensors)
            continue
        ctx.cleanup(ctx.device.unregister_host, handle)  # after the template's synchronize, before unmap
        locked, pinned = locked + 1, pinned + mapping.view.nbytes
        for t in tensors:
            buf = ctx.place(t)
            with ctx.phase("upload"), mapping.slice(t.offset, t.nbytes) as src:
                ctx.device.copy_h2d(buf, 0, src, asynchronous=True)
                ctx.count("bytes", t.nbytes)
    total = sum(1 for _, ts in ctx.by_file() if ts)
    ctx.set_path(readers=0, copy_from="registered" if locked == total else "mmap")
    ctx.engage("registered_mapping", locked, total, unit="mappings",
               note=f"{pinned / 2**20:.0f} MiB pinned" if locked == total
               else "register_host refused (RLIMIT_MEMLOCK?): pageable copies for those files")
