"""Test devices shared by several test files.

:class:`DeferredCopyDevice` makes asynchronous copies really asynchronous: the bytes move only when an
event or fence recorded after them is waited on (or on synchronize), reading their source *then* — so
staging refilled before its copy's fence was waited on lands the wrong bytes, and a verification
catches it. Safe for several threads issuing copies at once (one lock orders the queue, as a stream
orders its copies).
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from workbench.upload.host import HostDevice


class DeferredCopyDevice(HostDevice):
    """The host backend with copies that run only when something waits for them."""

    def __init__(self, ordinal: int = 0):
        super().__init__(ordinal)
        self.pending: list = []
        self.done = 0
        self._lock = threading.Lock()

    def copy_h2d(self, dst, dst_offset, src, *, asynchronous=False):
        if not asynchronous:
            self.synchronize()  # a synchronous copy follows everything issued before it
            return super().copy_h2d(dst, dst_offset, src)
        arr = np.frombuffer(src, dtype=np.uint8)  # like a DMA engine: keep the address, not the view
        with self._lock:
            self.pending.append((dst, dst_offset, arr.ctypes.data, arr.nbytes))
        del arr

    def host_view(self, buf):
        return None  # a GPU stand-in: its memory is reached by (deferred) copies, never written directly

    def record_event(self):
        with self._lock:
            return len(self.pending)

    def wait_event(self, event):
        with self._lock:
            self._flush(len(self.pending) if event is None else event)

    def synchronize(self):
        with self._lock:
            self._flush(len(self.pending))

    def _flush(self, upto):
        while self.done < upto:
            dst, off, addr, n = self.pending[self.done]
            if n:
                HostDevice.copy_h2d(self, dst, off, (ctypes.c_char * n).from_address(addr))
            self.done += 1

    # As cudaHostUnregister and cudaFreeHost do, releasing host memory first finishes every copy: a
    # missing fence wait then shows as wrong bytes, never as a copy from unmapped memory.
    def unregister_host(self, handle):
        self.synchronize()
        super().unregister_host(handle)

    def free_pinned(self, staging):
        self.synchronize()
        super().free_pinned(staging)

    @property
    def in_flight(self) -> int:
        """Copies issued and not yet run."""
        with self._lock:
            return len(self.pending) - self.done
