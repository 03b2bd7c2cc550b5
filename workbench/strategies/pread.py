"""``pread``: per tensor, pread into a fresh heap buffer, then upload — the baseline every engine starts
from. With ``evict`` it is the historical unified-memory path: posix_fadvise(DONTNEED) after each read,
which on a discrete GPU forces a full disk re-read on every load (seeds/pr617, attempt 1b).

``granularity=expert`` reads a stacked expert tensor (GGUF's ``ffn_*_exps``, gpt-oss ``experts.*_proj``)
one expert at a time, each into its own fresh heap buffer, then uploads it to its place in the tensor's
buffer: the first write-up's MoE sweep before its round-2 fix (~28 s of its ~31 s A3B load), the
baseline ``experts`` is measured against. Per-expert tensors (safetensors split) are read as they are.

``upload`` picks the host memory the copy starts from: ``pageable`` (the heap buffer as is),
``registered`` (the heap buffer page-locked with register_host for its copy), or ``pinned`` (no heap
buffer: pread straight into a two-slot :class:`~workbench.upload.staging.StagingRing`, each copy
asynchronous and each slot fenced before it is refilled — the staging pipeline, one thread)."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping

import numpy as np

from workbench.formats.index import TensorIndex
from workbench.strategies.toolkit import (Evictor, MiB, StagingRing, check_upload, engage_write_combined, files_note,
                                          pread_into, pread_upload, read_tensor)
from workbench.strategies.base import BaseParams, LoadContext, Strategy, check_param
from workbench.upload.staging import SOURCES, size_ring


@dataclass(frozen=True)
class PreadParams(BaseParams):
    """``evict``: DONTNEED after each read; ``upload``: pageable | registered | pinned;
    ``staging_mib``: size of each of the two pinned staging buffers (at most the largest tensor);
    ``staging``: where they come from (auto | anon | alloc | wc, as ``ring``'s)."""

    variants: ClassVar[tuple[Mapping[str, Any], ...]] = (
        MappingProxyType({"upload": "registered"}), MappingProxyType({"upload": "pinned", "staging_mib": 1}),
        MappingProxyType({"upload": "pinned", "staging_mib": 1, "staging": "wc"}),
        MappingProxyType({"granularity": "expert"}))

    upload: str = "pageable"
    staging_mib: int = 16
    granularity: str = "tensor"
    staging: str = "auto"

    def __post_init__(self) -> None:
        check_upload("pread", self.upload)
        check_param("pread", "staging_mib", self.staging_mib >= 1, f"must be >= 1, got {self.staging_mib}")
        check_param("pread", "staging", self.staging in SOURCES, f"one of {', '.join(SOURCES)}, got {self.staging!r}")
        check_param("pread", "granularity", self.granularity in GRANULARITIES,
                    f"one of {', '.join(GRANULARITIES)}, got {self.granularity!r}")
        check_param("pread", "granularity", self.granularity == "tensor" or self.upload == "pageable",
                    "granularity=expert reads into fresh heap buffers: it needs upload=pageable")


GRANULARITIES = ("tensor", "expert")


def expert_pieces(index: TensorIndex) -> dict[str, list[tuple[int, int, int]]]:
    """Stacked expert tensor name → its experts as (offset in the tensor, file offset, nbytes)."""
    by_name = {t.name: t for t in index.tensors}
    pieces = {}
    for blob in index.blobs:
        if len(blob.tensors) == 1 and blob.n_experts > 1:
            t = by_name[blob.tensors[0]]
            pieces[t.name] = [(off - t.offset, off, n) for off, n in blob.slices]
    return pieces


def _upload_per_expert(ctx: LoadContext) -> int:
    """Every expert in a fresh heap buffer, uploaded to its place; other tensors whole. Returns the reads."""
    pieces, evictor, reads = expert_pieces(ctx.index), Evictor(ctx), 0
    for t in ctx.tensors:
        buf = ctx.place(t)
        for dst, offset, n in pieces.get(t.name, [(0, t.offset, t.nbytes)]):
            with ctx.phase("read"):
                host = np.empty(n, dtype=np.uint8)
                pread_into(ctx.fd(t), host, offset, t.file)
                evictor.drop(t.file, offset, n)
            with ctx.phase("upload"):
                ctx.upload(buf, dst, host)
            reads += 1
    with ctx.phase("read"):
        evictor.finish()
    return reads


def _upload_registered(ctx: LoadContext) -> None:
    evictor, locked = Evictor(ctx), 0
    for t in ctx.tensors:
        buf = ctx.place(t)
        with ctx.phase("read"):
            host = read_tensor(ctx.fd(t), t)
            evictor.drop(t.file, t.offset, t.nbytes)
        with ctx.phase("upload"):
            handle = ctx.device.register_host(memoryview(host))
            try:
                ctx.upload(buf, 0, host)
            finally:
                if handle is not None:
                    locked += 1
                    ctx.device.unregister_host(handle)
    with ctx.phase("read"):
        evictor.finish()
    ctx.engage("registered", locked, len(ctx.tensors), note="" if locked == len(ctx.tensors)
               else "register_host refused (RLIMIT_MEMLOCK?): those copies were pageable")


def _upload_pinned(ctx: LoadContext, staging: int, source: str = "auto") -> None:
    dev, evictor = ctx.device, Evictor(ctx)
    slots, size = size_ring(2, staging, [min(staging, t.nbytes) for t in ctx.tensors if t.nbytes])
    with ctx.phase("staging"):
        ring = StagingRing(dev, slots, size, source=source)
    ctx.cleanup(ring.close, False)  # error path only (closed below otherwise); after the template's sync
    k = 0
    for t in ctx.tensors:
        buf = ctx.place(t)
        for dst in range(0, t.nbytes, staging):
            n = min(staging, t.nbytes - dst)
            with ctx.phase("sync"):
                slot = ring.acquire()  # waits for the copy that last read this slot
            try:
                with slot.view[:n] as view:  # released even on error, so the ring can unmap
                    with ctx.phase("read"):
                        pread_into(ctx.fd(t), view, t.offset + dst, t.file)
                        evictor.drop(t.file, t.offset + dst, n)
                    with ctx.phase("upload"):
                        dev.copy_h2d(buf, dst, view, asynchronous=True)
                        ctx.count("bytes", n)
            finally:
                ring.release(slot)
            k += 1
    with ctx.phase("read"):
        evictor.finish()
    with ctx.phase("staging"):
        ring.close()
    ctx.engage("pinned_staging", slots if ring.locked else 0, slots, unit="buffers",
               note=f"{k} pieces through {ring.describe()}{files_note(ctx)}")
    engage_write_combined(ctx, ring)


class PreadStrategy(Strategy):
    name: ClassVar[str] = "pread"
    summary: ClassVar[str] = "per-tensor pread into a fresh heap buffer, then upload (evict: DONTNEED after each read; upload: pageable|registered|pinned)"
    Params: ClassVar[type] = PreadParams

    def _load(self, ctx: LoadContext) -> None:
        mode = self.params.upload
        ctx.set_path(copy_from=mode)
        if mode == "pinned":
            _upload_pinned(ctx, self.params.staging_mib * MiB, self.params.staging)
            return
        if self.params.granularity == "expert":
            reads = _upload_per_expert(ctx)
            ctx.engage("heap_copy", len(ctx.tensors), len(ctx.tensors),
                       note=f"per expert: {reads} reads into fresh heap buffers ({mode}){files_note(ctx)}")
            return
        if mode == "registered":
            _upload_registered(ctx)
        else:
            pread_upload(ctx)
        ctx.engage("heap_copy", len(ctx.tensors), len(ctx.tensors),
                   note=f"every tensor staged through a heap buffer ({mode}){files_note(ctx)}")
