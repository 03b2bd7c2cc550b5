"""``placement="pool"`` (issue 34 §5): expert slices in the frames of one page-locked pool the size of the budget.

Every other placement gives each expert a fixed slot in its blob's reservation and commits and hands back
pages as entries come and go (:mod:`workbench.expert.memory`), which is what lets the cache show the
boundary leak, but costs a warm miss twice: its read faults in and zeroes pages the last eviction handed
back (5–7× a read into resident pages on the 2-core VM), and the cache cannot be page-locked (a page
released while registered would leave the device reading one the process no longer maps), so every landed
slice, hit or miss, is copied once more into page-locked staging before its DMA. The offload systems of
the field keep experts in a pinned host pool instead (a fixed number of expert-sized buffers, any expert in
any free one). Here: one anonymous mapping of ``frames × frame_bytes``, written through once when it
opens (resident from the start, never handed back), which the session page-locks with the device
(:meth:`~workbench.upload.base.Device.register_host`) so that a slice goes to the device by one
asynchronous copy straight from its frame, and a miss is read into pages that are already there.

A frame is the largest slice rounded up to a page: a slice starts on a page boundary and nothing is
shared, so there is no boundary page and nothing to leak. The pool holds ``budget // frame_bytes``
frames (per-layer caches: their capacity × the blobs, whatever the bytes); with slices of unequal sizes it
holds fewer slices than a byte budget would, and says so (:meth:`FramePool.describe`). What it holds is
committed from the start: pages no live entry touches are what ``unreleased_pages`` counts, by design here
(free frames and frames' tails), not a leak.
"""
from __future__ import annotations

import mmap
from typing import Any, Hashable, Sequence

import numpy as np

from workbench.errors import ParamError
from workbench.expert.cache_state import CacheMemory
from workbench.expert.layout import BlobLayout, layout_blobs
from workbench.expert.memory import PAGE, Reservation
from workbench.expert.placement import PlacementReport
from workbench.formats.index import ExpertBlob


def frame_bytes(largest_slice: int) -> int:
    """A frame: the largest slice, rounded up to whole pages."""
    return -(-max(1, largest_slice) // PAGE) * PAGE


class FramePool:
    """``frames`` frames of ``frame`` bytes in one resident anonymous mapping (see the module docstring).

    The decode thread takes and gives back frames (:meth:`take`, :meth:`give`); any thread may read or
    write a frame it was handed (:meth:`region`, :meth:`view`). The calls are those of
    :class:`~workbench.expert.pagebook.PageBook`, the other store of a cache."""

    in_place = False  # a frame starts on a page, not at its slice's remainder in the file
    leak_bound = 0  # no page is shared: nothing to leak
    recycled = 0

    def __init__(self, frames: int, frame: int):
        if frames < 1 or frame < PAGE or frame % PAGE:
            raise ValueError(f"FramePool({frames}, {frame}): need >= 1 frame of whole pages")
        self.frames, self.frame = frames, frame
        self.mapping = Reservation(frames * frame)
        _populate(self.mapping)
        self._free = list(range(frames - 1, -1, -1))  # popped from the end: frame 0 first
        self._of: dict[Hashable, int] = {}
        self._pages = np.zeros(frames, dtype=np.int64)  # pages the frame's live entry touches (0: free)

    @property
    def nbytes(self) -> int:
        return self.frames * self.frame

    @property
    def pages(self) -> int:
        return self.nbytes // PAGE

    @property
    def reservations(self) -> tuple[Reservation, ...]:
        return (self.mapping,)

    def full(self) -> bool:
        return not self._free

    def begin(self) -> None:
        pass  # nothing is handed back, so nothing is kept for an admission

    def end(self, key: Hashable, ok: bool) -> None:
        pass

    def take(self, key: Hashable, nbytes: int) -> None:
        """Give ``key`` a free frame (the caller evicted until one was free)."""
        if key in self._of:
            raise ValueError(f"{key} already holds a frame")
        if not self._free:
            raise LookupError("no free frame")
        if not 0 < nbytes <= self.frame:
            raise ValueError(f"{nbytes} B does not fit a frame of {self.frame} B")
        f = self._free.pop()
        self._of[key] = f
        self._pages[f] = -(-nbytes // PAGE)

    def give(self, key: Hashable) -> int:
        """``key`` was evicted: its frame goes to the next miss as it is (resident, locked); 0 pages released."""
        f = self._of.pop(key)
        self._pages[f] = 0
        self._free.append(f)
        return 0

    def offset(self, key: Hashable) -> int:
        """Where ``key``'s frame starts in the pool."""
        return self._of[key] * self.frame

    def region(self, key: Hashable) -> tuple[memoryview, int]:
        """``key``'s whole frame and where its slice starts in it (0; release the view after)."""
        at = self.offset(key)
        return self.mapping.view[at:at + self.frame], 0

    def view(self, key: Hashable, nbytes: int) -> memoryview:
        at = self.offset(key)
        return self.mapping.view[at:at + nbytes]

    def live_pages(self) -> int:
        """Pages the live entries touch (each from its frame's start)."""
        return int(self._pages.sum())

    def memory(self, live: int, live_bytes: int, measure: bool) -> CacheMemory:
        """The cache's memory facts: all of the pool committed from the start; unreleased, what no live entry touches."""
        accounted = self.live_pages()
        resident = int(np.count_nonzero(self.mapping.resident_map())) if measure else -1
        return CacheMemory(live, live_bytes, accounted, self.pages, self.pages - accounted, resident,
                           0 if measure else -1)

    def describe(self, budget: int, largest: int, smallest: int) -> str:
        waste = "" if smallest == largest else (f"; slices of {smallest:,}–{largest:,} B each take a whole frame, so it "
                                                f"holds fewer than {budget:,} B of payload would")
        return (f"pool: {self.frames:,} frames of {self.frame:,} B ({self.nbytes / 2**20:,.1f} MiB), resident from the "
                f"start and never handed back{waste}")

    def close(self) -> None:
        self.mapping.close()


def open_pool(blobs: Sequence[ExpertBlob], budget: int, policy: Any
              ) -> tuple[FramePool, list[BlobLayout], PlacementReport]:
    """A cache's pool for ``blobs`` under ``budget`` (``policy``: per-layer caches, with a ``capacity``, get an
    entry's frame for each of their entries), the blobs' layouts (only where each slice lies in its file)
    and the placement report that describes the pool."""
    layouts, _ = layout_blobs(blobs, "aligned", PAGE)
    sizes = [n for b in blobs for _, n in b.slices]
    frame = frame_bytes(max(sizes))
    capacity = getattr(policy, "capacity", None)
    pool = FramePool(pool_frames(budget, frame, None if capacity is None else capacity * len(blobs)), frame)
    return pool, layouts, PlacementReport(0, len(layouts), (pool.describe(budget, max(sizes), min(sizes)),))


def pool_frames(budget: int, frame: int, per_layer_entries: int | None) -> int:
    """How many frames a pool gets: a byte budget's worth, or per-layer caches' entries (capacity × blobs)."""
    n = per_layer_entries if per_layer_entries is not None else budget // frame
    if n < 1:
        raise ParamError("cache", "budget", f"{budget} B cannot hold one pool frame ({frame} B)")
    return n


def _populate(memory: Reservation) -> None:
    """Commit every page now (one write each; ``MADV_POPULATE_WRITE`` where the kernel has it, Linux >= 5.14)."""
    flag = getattr(mmap, "MADV_POPULATE_WRITE", None)
    if flag is not None:
        try:
            memory._map.madvise(flag, 0, memory.nbytes)
            return
        except OSError:
            pass  # an older kernel: EINVAL
    np.frombuffer(memory.view, dtype=np.uint8)[::PAGE] = 0
