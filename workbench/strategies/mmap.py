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

from workbench.strategies.toolkit import (FileMapping, eviction_reason, open_mapping, pread_upload,
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
        fd = ctx.open_fd()
        n = len(ctx.tensors)
        reason = fallback_reason(ctx, self.params.gate)
        if reason or n == 0:
            pread_upload(ctx, fd)
            ctx.engage("zero_copy", 0, n, note=reason or "no tensors")
            return
        mapping = open_mapping(ctx, fd)
        if self.params.register:
            _upload_registered_mapping(ctx, mapping)
        else:
            upload_borrowed(ctx, mapping)
            ctx.set_path(readers=0, copy_from="mmap")  # no reader threads: the copy itself faults pages in
        ctx.engage("zero_copy", n, n)


def _upload_registered_mapping(ctx: LoadContext, mapping: FileMapping) -> None:
    with ctx.phase("prefetch"):  # registering pins the pages: every one is faulted in here
        handle = ctx.device.register_host(mapping.view)
    if handle is None:
        ctx.engage("registered_mapping", 0, 1, unit="mappings",
                   note="register_host refused (RLIMIT_MEMLOCK?): pageable copies instead")
        upload_borrowed(ctx, mapping)
        ctx.set_path(readers=0, copy_from="mmap")
        return
    ctx.cleanup(ctx.device.unregister_host, handle)  # after the template's synchronize, before unmap
    for t in ctx.tensors:
        buf = ctx.place(t)
        with ctx.phase("upload"), mapping.slice(t.offset, t.nbytes) as src:
            ctx.device.copy_h2d(buf, 0, src, asynchronous=True)
            ctx.count("bytes", t.nbytes)
    ctx.set_path(readers=0, copy_from="registered")
    ctx.engage("registered_mapping", 1, 1, unit="mappings", note=f"{mapping.view.nbytes / 2**20:.0f} MiB pinned")
