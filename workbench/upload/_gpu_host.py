"""Page-locked host memory of the GPU backend: pinned staging (``cudaHostAlloc`` / ``hipHostMalloc``,
write-combined on request) and registered ranges (``cudaHostRegister`` / ``hipHostRegister``), each
counted in the device's :class:`~workbench.upload.base.LockedMeter`.

:class:`GpuHostMemory` is a part of :class:`workbench.upload._gpu.GpuDevice` (a mixin listed before
:class:`~workbench.upload.base.Device`): it works on the device's runtime handle through the device's
``_call`` and ``_use``, and keeps the ``_pinned`` and ``_registered`` tables the device's ``usage``
and ``close`` read. Import the device from :mod:`workbench.upload._gpu`.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, ClassVar

from workbench.errors import DeviceError
from workbench.upload.base import HostStaging, LockedMeter
from workbench.upload.gpu_runtime import GpuRuntime, HostRegistration, host_address


class GpuHostMemory:
    """Pinned and registered host memory for :class:`~workbench.upload._gpu.GpuDevice`."""

    # What the device provides (set in GpuDevice.__init__, or by Device for ``locked``).
    runtime: ClassVar[GpuRuntime]
    module: Any
    label: str
    locked: LockedMeter
    _pinned: dict[int, HostStaging]
    _registered: dict[int, HostRegistration]
    _call: Callable[..., Any]
    _use: Callable[[], None]

    def alloc_pinned(self, nbytes: int, write_combined: bool = False) -> HostStaging:
        self._use()
        size = max(nbytes, 1)
        flags = self.runtime.write_combined_flags if write_combined else self.runtime.pinned_flags
        raw = self._call("host_alloc", size, getattr(self.module, flags))
        array = (ctypes.c_char * size).from_address(int(raw))
        staging = HostStaging(nbytes, memoryview(array).cast("B")[:nbytes], handle=raw, locked=True,
                              write_combined=write_combined)
        self._pinned[id(staging)] = staging
        self.locked.add("pinned", staging.nbytes)
        return staging

    def _refuse_write_combined(self, addr: int, nbytes: int) -> None:
        """A read-back into write-combined staging would have the CPU read it (uncached): refused."""
        for s in self._pinned.values():
            base = int(s.handle) if s.handle is not None else 0
            if s.write_combined and base < addr + nbytes and addr < base + max(s.nbytes, 1):
                raise ValueError(f"{self.label}: read-back into write-combined staging at 0x{base:x}: the CPU "
                                 "must never read write-combined memory (verification reads into its own buffer)")

    def free_pinned(self, staging: HostStaging) -> None:
        if staging.handle is None:
            return
        staging.view.release()  # BufferError while something still views it: better than a dangling view
        self._release_pinned(staging)

    def _release_pinned(self, staging: HostStaging) -> None:
        if self._pinned.pop(id(staging), None) is not None:
            self.locked.remove("pinned", staging.nbytes)
        raw, staging.handle, staging.locked = staging.handle, None, False
        self._call("host_free", raw)

    def register_host(self, view: Any) -> HostRegistration | None:
        addr, nbytes = host_address(view)
        read_only = memoryview(view).readonly
        reg = HostRegistration(addr, nbytes, read_only)
        if nbytes == 0:  # the runtimes reject an empty range; nothing to lock
            return reg
        flags = self.runtime.register_flags
        if read_only and hasattr(self.module, self.runtime.register_readonly_flags):
            flags = self.runtime.register_readonly_flags  # a PROT_READ mapping cannot be locked for writing
        self._use()
        try:
            self._call("host_register", addr, nbytes, getattr(self.module, flags))
        except DeviceError:  # refused (locked-memory limit, unsupported range): callers fall back
            return None
        self._registered[id(reg)] = reg
        self.locked.add("registered", nbytes)
        return reg

    def unregister_host(self, handle: Any) -> None:
        if handle is None or self._registered.pop(id(handle), None) is None:
            return
        self.locked.remove("registered", handle.nbytes)
        self._use()
        self._call("host_unregister", handle.addr)

