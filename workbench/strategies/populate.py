"""``populate``: mmap + MADV_POPULATE_READ over the data region before the upload loop, then
borrowed-slice uploads. Measured and REVERTED in seeds/pr617: a blocking populate gave identical
totals — it relocates the same soft-fault work into one serial stall. Kept so that finding can be
reproduced. Where the kernel refuses MADV_POPULATE_READ (EINVAL before Linux 5.14) the nearest it
offers is used instead, and said: MADV_WILLNEED plus touching one byte per page."""
from __future__ import annotations

import errno
import mmap as _mmap
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from workbench.formats.index import PAGE_SIZE, ModelFile
from workbench.registry import Availability
from workbench.strategies.toolkit import FileMapping, files_note, open_mapping, pread_upload, upload_borrowed
from workbench.strategies.base import BaseParams, LoadContext, Strategy
from workbench.strategies.mmap import fallback_reason

MADV_POPULATE_READ = 22  # Linux >= 5.14; Python 3.11's mmap has no name for it but takes the int


@dataclass(frozen=True)
class PopulateParams(BaseParams):
    """``evict``: under eviction the mapping is dropped and the load is pread + DONTNEED."""


def populate_supported() -> Availability:
    """Whether this kernel accepts MADV_POPULATE_READ (tried on a one-page anonymous mapping)."""
    m = _mmap.mmap(-1, _mmap.PAGESIZE)
    try:
        m.madvise(MADV_POPULATE_READ, 0, _mmap.PAGESIZE)
        return Availability(True, "MADV_POPULATE_READ supported")
    except (OSError, ValueError) as exc:
        code = errno.errorcode.get(getattr(exc, "errno", 0) or 0, str(exc))
        return Availability(False, f"MADV_POPULATE_READ refused ({code}; needs Linux >= 5.14)")
    finally:
        m.close()


def _populate(ctx: LoadContext, mapping: FileMapping, f: ModelFile) -> tuple[int, str]:
    """Populate one file's data region: (pages, '' or the errno name the kernel refused it with)."""
    start, end = f.data_range
    lo = start - start % PAGE_SIZE  # madvise wants a page-aligned address
    pages = -(-(end - lo) // PAGE_SIZE)
    mapping.require(end)
    with ctx.phase("prefetch"):
        try:
            mapping.map.madvise(MADV_POPULATE_READ, lo, end - lo)
            return pages, ""
        except OSError as exc:
            code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        mapping.map.madvise(_mmap.MADV_WILLNEED, lo, end - lo)
        touched = np.frombuffer(mapping.map, dtype=np.uint8)[lo:end:PAGE_SIZE]
        int(touched.sum())  # one read per page: the fault happens here, not in the upload loop
        del touched
    return pages, code


def _populate_all(ctx: LoadContext) -> None:
    """Every file populated (one mapping each) before the first upload; one fact over the set."""
    done = refused = 0
    code = ""
    for f, tensors in ctx.by_file():
        if tensors:
            pages, why = _populate(ctx, open_mapping(ctx, f), f)
            done, refused, code = (done + pages, refused, code) if not why else (done, refused + pages, why)
    total = done + refused
    if not refused:
        ctx.engage("populate_read", total, total, unit="pages", note=files_note(ctx).lstrip(", "))
        return
    ctx.engage("populate_read", done, total, unit="pages", note=f"{code}: kernel refused it")
    ctx.engage("willneed_touch", refused, refused, unit="pages", note="fallback: MADV_WILLNEED + one byte per page")
    ctx.note(f"MADV_POPULATE_READ refused ({code}); used MADV_WILLNEED + touch instead")


class PopulateStrategy(Strategy):
    name: ClassVar[str] = "populate"
    summary: ClassVar[str] = "mmap + MADV_POPULATE_READ over the data region, then borrowed-slice uploads (measured and reverted upstream)"
    Params: ClassVar[type] = PopulateParams

    @classmethod
    def available(cls) -> Availability:
        got = populate_supported()
        if got:
            return got
        return Availability(True, f"{got.reason}: falls back to MADV_WILLNEED + touch")

    def _load(self, ctx: LoadContext) -> None:
        n = len(ctx.tensors)
        reason = fallback_reason(ctx, None)
        if reason or n == 0:
            pread_upload(ctx)
            ctx.engage("zero_copy", 0, n, note=(reason or "no tensors") + files_note(ctx))
            return
        _populate_all(ctx)
        upload_borrowed(ctx)  # the mappings populated above, one per file
        ctx.set_path(readers=0, copy_from="mmap")
        ctx.engage("zero_copy", n, n)
