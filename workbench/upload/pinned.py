"""Pinned host blocks for staging: an anonymous mapping on huge pages registered with the device, or
the backend's ``alloc_pinned`` (optionally write-combined). See :mod:`workbench.upload.staging`."""
from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from workbench.upload.base import Device

HUGE_PAGE = 2 << 20
MADV_POPULATE_WRITE = 23  # Linux 5.14; Python's mmap module has no name for it
SOURCES = ("auto", "anon", "alloc", "wc")


class Registrable:
    """A ``pending`` block of host memory registered once its first fill has faulted its pages in
    (:class:`PinnedBlock` deferred, and a slot carved from one mapping, :mod:`workbench.upload.slab`)."""

    device: Device
    view: memoryview
    how: str
    _handle: Any

    @property
    def locked(self) -> bool:
        raise NotImplementedError

    def lock(self) -> bool:
        """A ``pending`` block: register it now (its pages are resident: its first fill faulted them
        in). False where the device refuses: the block stays ``unlocked`` (copies still land the bytes,
        at the pageable rate)."""
        if self.how != "pending":
            return self.locked
        self._handle = self.device.register_host(self.view)
        self.how = "registered" if self._handle is not None else "unlocked"
        return self._handle is not None


class PinnedBlock(Registrable):
    """``nbytes`` of host memory the device can DMA from, and how it was obtained (``how``):
    ``registered`` (anonymous mapping + register_host), ``pinned`` (alloc_pinned, page-locked) or
    ``unlocked`` (neither could lock it: copies still work, at the pageable rate).

    ``source``: ``auto`` (the mapping, else alloc_pinned), ``anon`` (the mapping only, unlocked when
    registration is refused), ``alloc`` (alloc_pinned only).

    ``deferred`` (sources ``auto`` and ``anon``): the mapping is advised onto huge pages but neither
    populated nor registered (``how`` is ``pending``): whoever fills it first faults its pages in (a
    pread from the page cache does that side by side in every reader, ~0.016 ms/MiB on the H200, where
    MADV_POPULATE_WRITE cost ~0.2 ms/MiB serialized machine-wide), then calls :meth:`lock`."""

    def __init__(self, device: Device, nbytes: int, source: str = "auto", deferred: bool = False):
        if source not in SOURCES:
            raise ValueError(f"staging source {source!r} is not one of {', '.join(SOURCES)}")
        self.device, self.nbytes = device, nbytes
        self._map: mmap.mmap | None = None
        self._base: memoryview | None = None
        self._handle: Any = None
        self._staging: Any = None
        if deferred and source in ("auto", "anon"):
            self._map_and_register(keep=True, deferred=True)
            self.how = "pending"
        elif source not in ("alloc", "wc") and self._map_and_register(keep=source == "anon"):
            self.how = "registered" if self._handle is not None else "unlocked"
        else:
            self._staging = device.alloc_pinned(nbytes, write_combined=source == "wc")
            self.view = self._staging.view
            self.how = ("unlocked" if not self._staging.locked else
                        "write-combined" if self._staging.write_combined else "pinned")

    def _map_and_register(self, keep: bool = False, deferred: bool = False) -> bool:
        """Anonymous memory on huge pages, populated, registered; when registration is refused, False
        (nothing held) or, with ``keep``, True with the mapping kept unregistered. ``deferred``: only
        mapped and advised (:meth:`lock` does the rest)."""
        m = mmap.mmap(-1, self.nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        base = memoryview(m)
        addr = np.frombuffer(base, dtype=np.uint8).ctypes.data
        start = -addr % HUGE_PAGE  # huge pages only back 2 MiB-aligned ranges
        view = base[start : start + self.nbytes]
        advise_huge_pages(m, start, self.nbytes, populate=not deferred)
        handle = None if deferred else self.device.register_host(view)
        if handle is None and not keep:
            view.release()
            base.release()
            m.close()
            return False
        self._map, self._base, self._handle, self.view = m, base, handle, view
        return True

    @property
    def locked(self) -> bool:
        return self.how in ("registered", "pinned", "write-combined")

    def close(self, strict: bool = True) -> None:
        """Unregister and unmap (or free_pinned). Every view of the block must be released first:
        ``strict`` raises BufferError otherwise (a leak); not strict (error paths, where a failed
        reader's frame may still hold a slice) leaves the unmapping to the last view's release."""
        if self._staging is not None:
            staging, self._staging = self._staging, None
            try:
                self.device.free_pinned(staging)
            except BufferError:
                if strict:
                    raise
        elif self._map is not None:
            m, self._map = self._map, None
            self.device.unregister_host(self._handle)
            self.view.release()
            try:
                unmap(m, self._base, strict)
            finally:
                del m  # a BufferError's traceback keeps this frame too


def unmap(m: mmap.mmap, base: memoryview, strict: bool) -> None:
    """Release ``base`` (the mapping's own view) and unmap ``m``. A view of it still held elsewhere:
    ``strict`` raises BufferError (a leak); not strict (error paths, where a failed reader's frame may
    still hold a slice) leaves the unmapping to the last view's release."""
    base.release()
    try:
        m.close()
    except BufferError:
        del m  # the error's traceback keeps this frame: the mapping must go with the last view
        if strict:
            raise


def advise_huge_pages(m: mmap.mmap, start: int, nbytes: int, populate: bool = True) -> None:
    """Huge pages where the kernel offers them, then (``populate``) every page faulted in now."""
    length = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
    try:
        m.madvise(mmap.MADV_HUGEPAGE, start, length)
    except (OSError, AttributeError):  # THP off or not Linux: small pages work, only slower to fault
        pass
    if not populate:
        return
    try:
        m.madvise(MADV_POPULATE_WRITE, start, length)
    except OSError:  # before Linux 5.14: touch one byte per page instead
        np.frombuffer(m, dtype=np.uint8)[start : start + nbytes : mmap.PAGESIZE] = 0
