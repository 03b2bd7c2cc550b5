"""The GPU backend, written once for cuda-python and hip-python.

hip-python mirrors cuda-python's call shapes (``err, value = api.cudaMalloc(n)`` / ``api.hipMalloc(n)``,
enum error codes, ints accepted as pointers), so the backend is written over a :class:`GpuRuntime` that
names the functions; ``cuda.py`` and ``hip.py`` only fill in the names, how to import the binding and
how to read the architecture and UMA flag from the device properties. Tests drive this module with a
fake binding object that records calls. Pinned and registered host memory are the device's part
:class:`~workbench.upload._gpu_host.GpuHostMemory`; the binding's roles, calls and probes are in
:mod:`workbench.upload.gpu_runtime`.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, ClassVar, Sequence

from workbench.errors import BackendUnavailable, DeviceError
from workbench.registry import Availability
from workbench.upload._gpu_host import GpuHostMemory
from workbench.upload.base import Device, DeviceBuffer, DeviceInfo, DeviceUsage, Fence, HostStaging, carve
from workbench.upload.gpu_runtime import (  # GpuRuntime, call_names, call_runtime: cuda.py, hip.py and tests read them here
    GpuEvent, GpuRuntime, HostRegistration, _Arena, _error_name, _text, binding_version, call_names, call_runtime,
    describe_error, host_address, probe_runtime,
)

_current = threading.local()  # which device instance each thread last made current, per backend
_instances = itertools.count()  # never reused, unlike id(): a new device always sets itself current


class GpuDevice(GpuHostMemory, Device):
    """The shared device backend; a subclass names its :class:`GpuRuntime` and binding loader."""

    runtime: ClassVar[GpuRuntime]

    @staticmethod
    def load_module() -> Any:
        """Import and return the binding module (ImportError when it is not installed)."""
        raise NotImplementedError

    @classmethod
    def describe_arch(cls, props: Any) -> tuple[str, bool]:
        """(architecture name, unified memory) from the binding's device properties."""
        raise NotImplementedError

    @staticmethod
    def format_version(version: int) -> str:
        return str(version)

    @classmethod
    def available(cls) -> Availability:
        return probe_runtime(cls.runtime, cls.load_module)

    def __init__(self, ordinal: int = 0, module: Any = None):
        self.ordinal, self.label = ordinal, f"{self.name}:{ordinal}"
        self._instance = next(_instances)
        self.module = module if module is not None else self.load_module()
        p = self.runtime.prefix
        self._success = getattr(getattr(self.module, f"{p}Error_t"), f"{p}Success")
        self._fns: dict[str, Callable[..., Any]] = {}
        self._kinds: dict[str, Any] = {}
        count = self._call("device_count")
        if not 0 <= ordinal < count:
            raise BackendUnavailable(self.name, f"no device {ordinal}: {count} present")
        self._buffers: dict[int, DeviceBuffer] = {}
        self._pinned: dict[int, HostStaging] = {}
        self._registered: dict[int, HostRegistration] = {}
        self._events: dict[int, GpuEvent] = {}
        self._fences: dict[int, Fence] = {}
        self._info: DeviceInfo | None = None
        self._use()
        self._stream = self._call("stream_create")
        self._closed = False

    def _call(self, role: str, *args: Any) -> Any:
        """:func:`call_runtime` with the function and the success code looked up once per device:
        reader threads issue thousands of calls per load, and the GIL is held between them."""
        fn = self._fns.get(role)
        if fn is None:
            fn = self._fns[role] = getattr(self.module, self.runtime.calls[role])
        result = fn(*args)
        err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
        if err != self._success:
            raise DeviceError(self.label, self.runtime.calls[role], _error_name(err),
                              describe_error(self.module, self.runtime, err))
        return rest[0] if len(rest) == 1 else (rest or None)

    def _use(self) -> None:
        """Make this ordinal current on the calling thread (the runtime's current device is per thread)."""
        if getattr(_current, self.name, None) != self._instance:
            self._call("set_device", self.ordinal)
            setattr(_current, self.name, self._instance)

    def _kind(self, direction: str) -> Any:
        kind = self._kinds.get(direction)
        if kind is None:
            p = self.runtime.prefix
            kind = self._kinds[direction] = getattr(getattr(self.module, f"{p}MemcpyKind"), f"{p}Memcpy{direction}")
        return kind

    def info(self) -> DeviceInfo:
        if self._info is None:
            props = self._call("properties", self.ordinal)
            arch, uma = self.describe_arch(props)
            driver = self.format_version(self._call("driver_version"))
            runtime = self.format_version(self._call("runtime_version"))
            self._info = DeviceInfo(
                backend=self.name, name=_text(props.name), arch=arch, uma=uma,
                memory_bytes=int(props.totalGlobalMem),
                driver=f"{self.runtime.driver_name} {driver}, runtime {runtime}",
                binding=binding_version(self.runtime),
            )
        return self._info

    def alloc(self, nbytes: int) -> DeviceBuffer:
        if nbytes < 0:
            raise ValueError(f"{self.label}: cannot allocate {nbytes} B")
        if nbytes == 0:  # the runtimes return NULL for 0 B anyway; no driver call needed
            buf = DeviceBuffer(0, 0)
        else:
            self._use()
            raw = self._call("malloc", nbytes)
            buf = DeviceBuffer(nbytes, int(raw), handle=raw)
        self._buffers[id(buf)] = buf
        return buf

    def alloc_many(self, sizes: Sequence[int], align: int = 256) -> list[DeviceBuffer]:
        offsets, total = carve(sizes, align)
        if total == 0:
            return [self.alloc(0) for _ in sizes]
        self._use()
        raw = self._call("malloc", total)  # the runtimes align allocations to at least 256 B
        arena = _Arena(raw, len(sizes))
        bufs = [DeviceBuffer(n, int(raw) + off, handle=arena) for off, n in zip(offsets, sizes)]
        for buf in bufs:
            self._buffers[id(buf)] = buf
        return bufs

    def adopt(self, ptr: int, nbytes: int, owner: Any) -> DeviceBuffer:
        """Device memory a framework allocated on this device (a torch tensor's ``data_ptr()``) as a
        buffer: the runtimes address it like our own allocations (one primary context per device), and
        :meth:`free` drops ``owner`` instead of calling the runtime's free on the framework's memory."""
        if owner is None:
            raise ValueError(f"{self.label}: adopt needs the object that keeps the memory allocated")
        if nbytes < 0 or (nbytes and not ptr):
            raise ValueError(f"{self.label}: cannot adopt {nbytes} B at 0x{int(ptr or 0):x}")
        buf = DeviceBuffer(nbytes, int(ptr or 0), owner=owner)
        self._buffers[id(buf)] = buf
        return buf

    def free(self, buf: DeviceBuffer) -> None:
        if buf.freed:
            return
        handle = buf.handle
        if isinstance(handle, _Arena):
            handle.live -= 1
            if handle.live == 0:
                self._use()
                self._call("free", handle.raw)
        elif buf.ptr and not buf.adopted:  # adopted memory is its owner's to release
            self._use()
            self._call("free", handle)
        self._buffers.pop(id(buf), None)
        buf.handle, buf.owner, buf.freed = None, None, True

    def _check_range(self, buf: DeviceBuffer, offset: int, nbytes: int, what: str) -> None:
        if buf.freed:
            raise ValueError(f"{self.label}: {what} on a freed buffer {buf!r}")
        if offset < 0 or nbytes < 0 or offset + nbytes > buf.nbytes:
            raise ValueError(
                f"{self.label}: {what} of {nbytes} B at {offset} overruns a {buf.nbytes} B buffer")

    def copy_h2d(self, dst: DeviceBuffer, dst_offset: int, src: Any, *, asynchronous: bool = False) -> None:
        addr, nbytes = host_address(src)
        self._check_range(dst, dst_offset, nbytes, "copy")
        if nbytes == 0:
            return
        self._use()
        kind = self._kind("HostToDevice")
        if asynchronous:
            self._call("memcpy_async", dst.ptr + dst_offset, addr, nbytes, kind, self._stream)
        else:
            self._call("memcpy", dst.ptr + dst_offset, addr, nbytes, kind)

    def synchronize(self) -> None:
        """Wait for every copy; the events recorded so far have all passed then, so they are destroyed
        (a pipeline's last fences are never waited on one by one)."""
        self._use()
        self._call("device_sync")
        for key in list(self._events):
            self._call("event_destroy", self._events.pop(key).handle)

    def read_back(self, buf: DeviceBuffer, offset: int, nbytes: int) -> bytes:
        self._check_range(buf, offset, nbytes, "read-back")
        out = bytearray(nbytes)
        if nbytes:
            self.synchronize()  # outside any timed window: wait for async copies still in flight
            addr, _ = host_address(out)
            self._call("memcpy", addr, buf.ptr + offset, nbytes, self._kind("DeviceToHost"))
        return bytes(out)

    def read_back_into(self, buf: DeviceBuffer, offset: int, dest: memoryview) -> None:
        nbytes = len(dest)
        self._check_range(buf, offset, nbytes, "read-back")
        if nbytes:
            addr, _ = host_address(dest)
            self._refuse_write_combined(addr, nbytes)
            self.synchronize()
            self._call("memcpy", addr, buf.ptr + offset, nbytes, self._kind("DeviceToHost"))

    def record_event(self) -> GpuEvent:
        self._use()
        event = GpuEvent(self._call("event_create"))
        self._events[id(event)] = event
        # Our stream is a blocking one, so the event also follows sync copies on the null stream.
        self._call("event_record", event.handle, self._stream)
        return event

    def wait_event(self, event: Any) -> None:
        live = self._events.pop(id(event), None) if event is not None else None
        if live is None:  # None, already waited on, or not ours: nothing left to wait for
            return
        try:
            self._call("event_sync", live.handle)
        finally:
            self._call("event_destroy", live.handle)

    def create_fence(self) -> Fence:
        self._use()
        fence = Fence(self._call("event_create"))
        self._fences[id(fence)] = fence
        return fence

    def record_fence(self, fence: Fence) -> None:
        self._use()  # a re-record replaces the previous one: the event then marks the newer point
        self._call("event_record", fence.event, self._stream)
        fence.recorded = True

    def wait_fence(self, fence: Fence) -> None:
        if fence.recorded:
            self._call("event_sync", fence.event)
            fence.recorded = False

    def destroy_fence(self, fence: Fence) -> None:
        if self._fences.pop(id(fence), None) is None:
            return
        try:
            self.wait_fence(fence)
        finally:
            self._call("event_destroy", fence.event)

    def memory_free(self) -> int:
        """Bytes of device memory free now (cudaMemGetInfo / hipMemGetInfo), for leak checks."""
        self._use()
        free, _total = self._call("mem_info")
        return int(free)

    def compute(self) -> Any:
        """Products over these buffers through torch or cupy (:mod:`workbench.upload.gpu_compute`)."""
        from workbench.upload.gpu_compute import open_gpu_compute

        self._use()
        return open_gpu_compute(self.name, self.ordinal)

    def usage(self) -> DeviceUsage:
        return DeviceUsage(
            buffers=len(self._buffers), buffer_bytes=sum(b.nbytes for b in self._buffers.values()),
            pinned=len(self._pinned), pinned_bytes=sum(s.nbytes for s in self._pinned.values()),
            registered=len(self._registered),
            registered_bytes=sum(r.nbytes for r in self._registered.values()), events=len(self._events),
            fences=len(self._fences))

    def close(self) -> None:
        """Free what is still allocated, then destroy the stream; raises the first failure at the end."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        steps: list[Callable[[], None]] = [self.synchronize]
        steps += [lambda e=e: self.wait_event(e) for e in list(self._events.values())]
        steps += [lambda f=f: self.destroy_fence(f) for f in list(self._fences.values())]
        steps += [lambda b=b: self.free(b) for b in list(self._buffers.values())]
        steps += [lambda s=s: self._release_pinned(s) for s in list(self._pinned.values())]
        steps += [lambda r=r: self.unregister_host(r) for r in list(self._registered.values())]
        steps.append(lambda: self._call("stream_destroy", self._stream))
        first: Exception | None = None
        for step in steps:
            try:
                step()
            except DeviceError as exc:
                first = first or exc
        if first is not None:
            raise first
