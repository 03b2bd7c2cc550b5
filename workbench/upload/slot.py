"""One staging slot of a :class:`~workbench.upload.staging.StagingRing`, and ``with ring.slot()``."""
from __future__ import annotations

from typing import Any

from workbench.upload.base import Fence


class Slot:
    """One staging slot: ``view`` (writable, ``nbytes`` long), the fence of the copies out of it, and
    ``pending``: the block still to be page-locked once its first fill has faulted its pages in
    (``provision="first-read"``; None once locked, and for every other provision)."""

    __slots__ = ("index", "view", "fence", "pending")

    def __init__(self, index: int, view: memoryview, fence: Fence, pending: Any = None):
        self.index, self.view, self.fence, self.pending = index, view, fence, pending

    @property
    def nbytes(self) -> int:
        return len(self.view)


class Held:
    """``with ring.slot() as slot:`` — acquire on entry, release on exit (also on error). The caller
    fills the slot, calls ``ring.filled(slot)``, then issues its copies."""

    __slots__ = ("ring", "slot")

    def __init__(self, ring: Any):
        self.ring, self.slot = ring, None

    def __enter__(self) -> Slot:
        self.slot = self.ring.acquire()
        return self.slot

    def __exit__(self, *exc: object) -> None:
        self.ring.release(self.slot)
