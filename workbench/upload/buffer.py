"""A device allocation: what every backend hands out, what a load writes into and a computation reads.

Below both :mod:`workbench.upload.base` (the device interface, which allocates them) and
:mod:`workbench.upload.compute` (matrix products over them).
"""
from __future__ import annotations

from typing import Any


class DeviceBuffer:
    """A device allocation. ``ptr`` is the device address (an int); ``host_view`` only for host.

    ``owner`` is set on memory taken over with :meth:`Device.adopt`: the object whose lifetime keeps
    that memory allocated (a framework's tensor). Freeing such a buffer drops the reference and never
    calls the runtime's free: the memory belongs to the owner's allocator.
    """

    __slots__ = ("nbytes", "ptr", "handle", "freed", "owner")

    def __init__(self, nbytes: int, ptr: int, handle: Any = None, owner: Any = None):
        self.nbytes, self.ptr, self.handle, self.freed, self.owner = nbytes, ptr, handle, False, owner

    @property
    def adopted(self) -> bool:
        """Whether this buffer is someone else's memory (see :meth:`Device.adopt`)."""
        return self.owner is not None

    def __repr__(self) -> str:
        return f"DeviceBuffer(nbytes={self.nbytes}, ptr=0x{self.ptr:x})"
