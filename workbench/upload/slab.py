"""One anonymous mapping carved into every ``first-read`` staging slot of a ring (``mapping="one"``).

With ``mapping="each"`` a reader makes its first-read slot inside the load: an ``mmap`` of the slot, a
``madvise`` onto huge pages and the slot's fence. On the H200 (2026-12-03 17:11, 256 MiB bf16, warm,
docs/benchmarks/sizes-h200.md "Third pass") that part cost ~1 ms a slot (7.9 ms over 8 slots) inside the
load, although the same calls alone take microseconds: the suspicion is that a reader's ``mmap`` waits on
the process's mmap write lock behind the other readers' registrations (pinning holds its read lock), and
its event creation on the driver's lock behind them. Here the ring makes ONE mapping for every slot, and
every slot's fence, when it is created, before any reader runs; a reader only carves its slot (a slice),
faults it in by its first pread and registers that slice alone — the one driver call left in its path.
The fences are made with the ring too: uncontended there (microseconds each, in the ring's
``provision_s``), and a ring is sized to its load (``size_ring``), so few go unused.

Each slot's stride is its size rounded up to a huge page: every slot starts 2 MiB-aligned (huge pages
only back aligned ranges) and no page belongs to two slots (a second registration of a registered page
can be refused). Nothing is populated or registered before a slot's first fill.
"""
from __future__ import annotations

import mmap

import numpy as np

from workbench.upload.base import Device
from workbench.upload.pinned import HUGE_PAGE, Registrable, advise_huge_pages, unmap
from workbench.upload.slot import Slot

MAPPINGS = ("each", "one")


class Slab:
    """``slots`` strides of one anonymous mapping, advised onto huge pages once, neither populated nor
    registered; :meth:`carve` hands out slot ``i``'s slice, :meth:`close` unmaps it once.

    ``nbytes`` is the address space reserved (``slots`` strides), not memory held: a page is only
    memory once a fill touches it (the ring's ``nbytes`` counts the slots carved, see StagingRing)."""

    def __init__(self, device: Device, slots: int, slot_bytes: int):
        self.device, self.slot_bytes = device, slot_bytes
        self.stride = -(-slot_bytes // HUGE_PAGE) * HUGE_PAGE
        self.nbytes = slots * self.stride
        self._map: mmap.mmap | None = mmap.mmap(-1, self.nbytes + HUGE_PAGE,
                                                flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._base = memoryview(self._map)
        self._start = -np.frombuffer(self._base, dtype=np.uint8).ctypes.data % HUGE_PAGE
        advise_huge_pages(self._map, self._start, self.nbytes, populate=False)

    def carve(self, index: int) -> CarvedBlock:
        """Slot ``index``'s slice, ``pending`` (its first fill faults it in, then :meth:`CarvedBlock.lock`)."""
        start = self._start + index * self.stride
        return CarvedBlock(self.device, self._base[start : start + self.slot_bytes])

    def close(self, strict: bool = True) -> None:
        """Unmap, once every slice is closed (idempotent). A view still held: ``strict`` raises
        BufferError (a leak); not strict (error paths) leaves the unmapping to the last view's release."""
        if self._map is None:
            return
        m, self._map = self._map, None
        try:
            unmap(m, self._base, strict)
        finally:
            del m  # a BufferError's traceback keeps this frame too: the mapping must go with the last view


class CarvedBlock(Registrable):
    """One slot's slice of a :class:`Slab`, with the accounting of a
    :class:`~workbench.upload.pinned.PinnedBlock`: ``how`` is ``pending`` until :meth:`lock` registers
    the slice, then ``registered``, or ``unlocked`` where the device refuses (an ordinary anonymous
    mapping: copies out of it still land the bytes, at the pageable rate)."""

    def __init__(self, device: Device, view: memoryview):
        self.device, self.view, self.nbytes = device, view, len(view)
        self.how = "pending"
        self._handle: object = None
        self._closed = False

    @property
    def locked(self) -> bool:
        return self.how == "registered"

    def close(self, strict: bool = True) -> None:
        """Undo the registration and release the slice (the :class:`Slab` unmaps; ``strict`` is its)."""
        if self._closed:
            return
        self._closed = True
        handle, self._handle = self._handle, None
        self.device.unregister_host(handle)
        self.view.release()


def carve_ring(device: Device, slots: int, slot_bytes: int) -> tuple[Slab, list[Slot]]:
    """The slab behind a ring of ``slots`` slots and their placeholders (unmade, to be popped: slot 0
    last in the list), each with its fence made now; on a failure everything made here is given back."""
    slab = Slab(device, slots, slot_bytes)
    fences = []
    try:
        for _ in range(slots):
            fences.append(device.create_fence())
    except BaseException:
        for fence in fences:
            device.destroy_fence(fence)
        slab.close()
        raise
    return slab, [Slot(i, None, fences[i]) for i in reversed(range(slots))]  # type: ignore[arg-type]
