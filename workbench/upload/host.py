"""The ``host`` backend: CPU memory standing in for a device, so every strategy runs and verifies anywhere.

Copies are real memcpys (numpy slice assignment releases the GIL), so a host "upload" from a borrowed
mmap slice soft-faults page-cache pages exactly as a DMA from that mapping would on a GPU.
``host`` behaves as a discrete device (eviction policy: keep resident); ``host-uma`` as an APU.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os
import platform
from typing import Any, Sequence

import numpy as np

from workbench.registry import Availability
from workbench.upload.base import Device, DeviceBuffer, DeviceInfo, DeviceUsage, HostStaging, carve

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _address(view: Any) -> tuple[int, int]:
    arr = np.frombuffer(view, dtype=np.uint8)
    return arr.ctypes.data, arr.nbytes


def _mlock(addr: int, nbytes: int) -> bool:
    return _libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(nbytes)) == 0


def _munlock(addr: int, nbytes: int) -> None:
    _libc.munlock(ctypes.c_void_p(addr), ctypes.c_size_t(nbytes))


def _check_readable(buf: DeviceBuffer, offset: int, nbytes: int) -> None:
    if buf.freed or offset < 0 or nbytes < 0 or offset + nbytes > buf.nbytes:
        raise ValueError(f"read-back of {nbytes} B at {offset} overruns {buf!r} (or it was freed)")


def _total_ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class HostDevice(Device):
    """CPU memory as device memory; always available."""

    name = "host"
    uma = False

    def __init__(self, ordinal: int = 0):
        self.ordinal = ordinal
        self._arrays: dict[int, np.ndarray] = {}
        self._adopted: dict[int, DeviceBuffer] = {}  # their owners are released on close
        # what cudaHostAlloc / cudaHostRegister would hold: counted so a leak shows (usage())
        self._pinned: dict[int, HostStaging] = {}
        self._registered: dict[int, tuple[int, int]] = {}

    @classmethod
    def available(cls) -> Availability:
        return Availability(True)

    def info(self) -> DeviceInfo:
        return DeviceInfo(
            backend=self.name,
            name="host memory" + (" (UMA stand-in)" if self.uma else " (discrete stand-in)"),
            arch=platform.machine(),
            uma=self.uma,
            memory_bytes=_total_ram(),
            driver="",
            binding=f"numpy {np.__version__}",
        )

    def alloc(self, nbytes: int) -> DeviceBuffer:
        arr = np.empty(max(nbytes, 1), dtype=np.uint8)
        buf = DeviceBuffer(nbytes, arr.ctypes.data, handle=arr)
        self._arrays[id(buf)] = arr
        return buf

    def alloc_many(self, sizes: Sequence[int], align: int = 256) -> list[DeviceBuffer]:
        offsets, total = carve(sizes, align)
        whole = np.empty(total + align, dtype=np.uint8)
        base = -whole.ctypes.data % align  # aligned like a device allocation
        bufs = []
        for off, n in zip(offsets, sizes):
            view = whole[base + off : base + off + n]  # numpy keeps `whole` alive until the last view goes
            buf = DeviceBuffer(n, view.ctypes.data, handle=view)
            self._arrays[id(buf)] = view
            bufs.append(buf)
        return bufs

    def adopt(self, ptr: int, nbytes: int, owner: Any) -> DeviceBuffer:
        """Host memory a loader filled (a tensor's or array's buffer) as a buffer, without copying it;
        ``owner`` keeps it allocated until :meth:`free` drops the reference."""
        if owner is None:
            raise ValueError("adopt needs the object that keeps the memory allocated")
        if nbytes < 0 or (nbytes and not ptr):
            raise ValueError(f"cannot adopt {nbytes} B at 0x{int(ptr or 0):x}")
        if nbytes:
            arr = np.frombuffer((ctypes.c_uint8 * nbytes).from_address(int(ptr)), dtype=np.uint8)
        else:
            arr = np.empty(1, dtype=np.uint8)  # nothing to address; read-backs of 0 B still work
        buf = DeviceBuffer(nbytes, int(ptr or 0), handle=arr, owner=owner)
        self._arrays[id(buf)] = arr
        self._adopted[id(buf)] = buf
        return buf

    def free(self, buf: DeviceBuffer) -> None:
        if not buf.freed:
            self._arrays.pop(id(buf), None)
            self._adopted.pop(id(buf), None)
            buf.handle, buf.owner, buf.freed = None, None, True

    def copy_h2d(self, dst: DeviceBuffer, dst_offset: int, src: Any, *, asynchronous: bool = False) -> None:
        data = np.frombuffer(src, dtype=np.uint8)
        end = dst_offset + data.nbytes
        if dst.freed:
            raise ValueError(f"copy into a freed buffer {dst!r}")
        if dst_offset < 0 or end > dst.nbytes:
            raise ValueError(f"copy of {data.nbytes} B at {dst_offset} overruns a {dst.nbytes} B buffer")
        dst.handle[dst_offset:end] = data

    def synchronize(self) -> None:
        return None

    def host_view(self, buf: DeviceBuffer) -> memoryview:
        """The buffer's own memory, writable: a read into it is the upload (no copy after it)."""
        if buf.freed:
            raise ValueError(f"a view of a freed buffer {buf!r}")
        return memoryview(buf.handle)[: buf.nbytes]

    def read_back(self, buf: DeviceBuffer, offset: int, nbytes: int) -> bytes:
        _check_readable(buf, offset, nbytes)
        return buf.handle[offset : offset + nbytes].tobytes()

    def read_back_into(self, buf: DeviceBuffer, offset: int, dest: memoryview) -> None:
        n = len(dest)
        _check_readable(buf, offset, n)
        np.frombuffer(dest, dtype=np.uint8)[:] = buf.handle[offset : offset + n]

    def alloc_pinned(self, nbytes: int, write_combined: bool = False) -> HostStaging:
        """An mlocked anonymous mapping. ``write_combined`` is unsupported on host (user space cannot
        map ordinary memory write-combined): the staging is ordinary, and says so (write_combined False)."""
        m = mmap.mmap(-1, max(nbytes, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        addr, n = _address(m)
        locked = _mlock(addr, n)  # page-locked like cudaHostAlloc; may fail under RLIMIT_MEMLOCK
        staging = HostStaging(nbytes, memoryview(m)[:nbytes], handle=(m, addr, n), locked=locked)
        self._pinned[id(staging)] = staging
        self.locked.add("pinned", staging.nbytes)
        return staging

    def free_pinned(self, staging: HostStaging) -> None:
        if staging.handle is None:
            return
        m, addr, n = staging.handle
        staging.view.release()  # BufferError while something still views it, like the GPU backends
        if staging.locked:
            _munlock(addr, n)
        m.close()
        if self._pinned.pop(id(staging), None) is not None:
            self.locked.remove("pinned", staging.nbytes)
        staging.handle, staging.locked = None, False

    def register_host(self, view: memoryview) -> Any:
        addr, n = _address(view)
        if not _mlock(addr, n):
            return None
        handle = (addr, n)
        self._registered[id(handle)] = handle
        self.locked.add("registered", n)
        return handle

    def unregister_host(self, handle: Any) -> None:
        if handle is not None and self._registered.pop(id(handle), None) is not None:
            self.locked.remove("registered", handle[1])
            _munlock(*handle)

    def compute(self) -> Any:
        """numpy products over these buffers (:class:`~workbench.upload.compute.NumpyCompute`)."""
        from workbench.upload.compute import NumpyCompute

        return NumpyCompute()

    def usage(self) -> DeviceUsage:
        return DeviceUsage(
            buffers=len(self._arrays), buffer_bytes=sum(a.nbytes for a in self._arrays.values()),
            pinned=len(self._pinned), pinned_bytes=sum(s.nbytes for s in self._pinned.values()),
            registered=len(self._registered), registered_bytes=sum(n for _, n in self._registered.values()))

    def close(self) -> None:
        """Free what the caller left: buffers, pinned staging (unless still viewed) and registrations."""
        for staging in list(self._pinned.values()):
            with contextlib.suppress(BufferError):  # still exported: leave it counted in usage()
                self.free_pinned(staging)
        for handle in list(self._registered.values()):
            self.unregister_host(handle)
        for buf in list(self._adopted.values()):
            self.free(buf)
        self._arrays.clear()


class HostUmaDevice(HostDevice):
    """The host backend labelled as unified memory, to exercise the APU policy (evict after read)."""

    name = "host-uma"
    uma = True
