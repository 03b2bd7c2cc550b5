"""One Device test suite over every registered backend available here, plus the shared GPU logic on fakes.

``host`` and ``host-uma`` run everywhere; ``cuda`` and ``hip`` (marked ``gpu``) run where a device is
present and are skipped with the reason otherwise. ``fake-cuda`` / ``fake-hip`` run the same contract on
the shared GPU backend (``workbench/upload/_gpu.py``) driven by :class:`FakeRuntime`, a stand-in binding
that moves real bytes and records every call in cuda-python's or hip-python's call shape.
"""
from __future__ import annotations

import bisect
import ctypes
import enum
import mmap
import os
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from workbench.errors import BackendUnavailable, DeviceError, WorkbenchError
from workbench.upload import DEVICES, device_availability, open_device
from workbench.upload._gpu import GpuDevice, probe_runtime
from workbench.upload.cuda import CUDA_RUNTIME, CudaDevice, format_cuda_version
from workbench.upload.hip import HIP_RUNTIME, HipDevice

GPU_BACKENDS = {"cuda", "hip"}


class FakePointer:
    """hip-python hands back pointer objects, not ints; the backend must cope."""

    def __init__(self, addr: int):
        self.addr = addr

    def __int__(self) -> int:
        return self.addr


class FakeRuntime:
    """A cuda-python / hip-python stand-in: ``(err, value)`` tuples, real memory, every call recorded."""

    ALLOC = {"cuda": ("HostAlloc", "FreeHost"), "hip": ("HostMalloc", "HostFree")}
    WRITE_COMBINED = 4  # cudaHostAllocWriteCombined and hipHostMallocWriteCombined are both 4

    def __init__(self, prefix: str, *, devices: int = 1, fail: dict[str, str] | None = None,
                 props: dict[str, Any] | None = None, readonly_flag: bool = True):
        self.prefix, self.devices, self.fail = prefix, devices, dict(fail or {})
        self.calls: list[tuple[str, tuple]] = []
        self.device_mem: dict[int, Any] = {}
        self.host_mem: dict[int, Any] = {}
        self.registered: dict[int, tuple[int, int]] = {}
        self.streams: set[int] = set()
        self.events: dict[int, bool] = {}  # id → recorded
        self.props = SimpleNamespace(name=b"Fake GPU\0\0", major=9, minor=0, totalGlobalMem=8 << 30,
                                     integrated=0, gcnArchName="gfx1100")
        self.props.__dict__.update(props or {})
        codes = {"Success": 0, "ErrorInvalidValue": 1, "ErrorMemoryAllocation": 2,
                 "ErrorInsufficientDriver": 35, "ErrorNoDevice": 100}
        errors = enum.IntEnum(f"{prefix}Error_t", {prefix + k: v for k, v in codes.items()})
        setattr(self, f"{prefix}Error_t", errors)
        kinds = {"HostToHost": 0, "HostToDevice": 1, "DeviceToHost": 2}
        setattr(self, f"{prefix}MemcpyKind",
                enum.IntEnum(f"{prefix}MemcpyKind", {f"{prefix}Memcpy{k}": v for k, v in kinds.items()}))
        setattr(self, f"{prefix}{self.ALLOC[prefix][0]}Default", 0)
        setattr(self, f"{prefix}{self.ALLOC[prefix][0]}WriteCombined", self.WRITE_COMBINED)
        self.write_combined: set[int] = set()  # addresses of write-combined host allocations
        setattr(self, f"{prefix}HostRegisterDefault", 0)
        if readonly_flag:
            setattr(self, f"{prefix}HostRegisterReadOnly", 8)

    def __getattr__(self, name: str) -> Any:
        prefix = self.__dict__["prefix"]
        handler = getattr(type(self), "_" + name[len(prefix):], None) if name.startswith(prefix) else None
        if handler is None:
            raise AttributeError(name)

        def call(*args: Any) -> tuple:
            self.calls.append((name, args))
            if name in self.fail:
                return (self._err(self.fail[name]),)
            return handler(self, *args)
        return call

    def names(self) -> list[str]:
        return [name[len(self.prefix):] for name, _ in self.calls]

    def _err(self, code: str) -> Any:
        return getattr(getattr(self, f"{self.prefix}Error_t"), self.prefix + code)

    def _ok(self, *values: Any) -> tuple:
        return (self._err("Success"), *values)

    def _GetErrorString(self, err: Any) -> tuple:
        return self._ok(f"fake text for {err.name}".encode())

    def _GetDeviceCount(self) -> tuple:
        return self._ok(self.devices)

    def _SetDevice(self, ordinal: int) -> tuple:
        return self._ok() if ordinal < self.devices else (self._err("ErrorInvalidValue"),)

    def _GetDeviceProperties(self, ordinal: int) -> tuple:
        return self._ok(self.props)

    def _DriverGetVersion(self) -> tuple:
        return self._ok(12080 if self.prefix == "cuda" else 60241134)

    _RuntimeGetVersion = _DriverGetVersion

    def _new(self, table: dict[int, Any], size: int) -> Any:
        block = ctypes.create_string_buffer(size)
        table[ctypes.addressof(block)] = block
        self.__dict__.pop("_device_bases", None)  # the sorted bases _on_device searches, made anew
        addr = ctypes.addressof(block)
        return FakePointer(addr) if self.prefix == "hip" else addr

    def _drop(self, table: dict[int, Any], ptr: Any) -> tuple:
        self.__dict__.pop("_device_bases", None)
        return self._ok() if table.pop(int(ptr), None) is not None else (self._err("ErrorInvalidValue"),)

    def _Malloc(self, size: int) -> tuple:
        return self._ok(self._new(self.device_mem, size))

    def _Free(self, ptr: Any) -> tuple:
        return self._drop(self.device_mem, ptr)

    def _HostAlloc(self, size: int, flags: int) -> tuple:
        ptr = self._new(self.host_mem, size)
        if flags & self.WRITE_COMBINED:
            self.write_combined.add(int(ptr))
        return self._ok(ptr)

    _HostMalloc = _HostAlloc

    def _FreeHost(self, ptr: Any) -> tuple:
        self.write_combined.discard(int(ptr))
        return self._drop(self.host_mem, ptr)

    _HostFree = _FreeHost

    def in_write_combined(self, addr: int, size: int) -> bool:
        return any(base < addr + size and addr < base + len(self.host_mem[base]) for base in self.write_combined)

    def _on_device(self, addr: int, size: int) -> bool:
        """Inside one device allocation: the one with the greatest base at or below ``addr`` (allocations
        never overlap), found by bisection — a load makes thousands of copies into hundreds of blocks."""
        bases = self.__dict__.get("_device_bases")
        if bases is None or len(bases) != len(self.device_mem):  # an owner may pop its block itself
            bases = self.__dict__["_device_bases"] = sorted(self.device_mem)
        i = bisect.bisect_right(bases, addr) - 1
        block = self.device_mem.get(bases[i]) if i >= 0 else None
        if i >= 0 and block is None:  # popped and the count made up since: search again from scratch
            self.__dict__.pop("_device_bases")
            return self._on_device(addr, size)
        return block is not None and addr + size <= bases[i] + len(block)

    def _Memcpy(self, dst: int, src: int, size: int, kind: Any) -> tuple:
        kinds = getattr(self, f"{self.prefix}MemcpyKind")
        h2d = kind == getattr(kinds, f"{self.prefix}MemcpyHostToDevice")
        dev, host = (dst, src) if h2d else (src, dst)
        if not self._on_device(dev, size) or self._on_device(host, 1):
            return (self._err("ErrorInvalidValue"),)
        if not h2d and self.in_write_combined(host, size):
            raise AssertionError("device-to-host copy into write-combined staging: the CPU would read it")
        ctypes.memmove(dst, src, size)
        return self._ok()

    def _MemcpyAsync(self, dst: int, src: int, size: int, kind: Any, stream: Any) -> tuple:
        if id(stream) not in self.streams:
            return (self._err("ErrorInvalidValue"),)
        return self._Memcpy(dst, src, size, kind)

    def _StreamCreate(self) -> tuple:
        stream = object()
        self.streams.add(id(stream))
        self._keep = getattr(self, "_keep", []) + [stream]
        return self._ok(stream)

    def _StreamDestroy(self, stream: Any) -> tuple:
        self.streams.discard(id(stream))
        return self._ok()

    def _DeviceSynchronize(self) -> tuple:
        return self._ok()

    def _EventCreate(self) -> tuple:
        event = SimpleNamespace()
        self.events[id(event)] = False
        self._keep = getattr(self, "_keep", []) + [event]
        return self._ok(event)

    def _EventRecord(self, event: Any, stream: Any) -> tuple:
        if id(event) not in self.events or id(stream) not in self.streams:
            return (self._err("ErrorInvalidValue"),)
        self.events[id(event)] = True
        return self._ok()

    def _EventSynchronize(self, event: Any) -> tuple:
        return self._ok() if self.events.get(id(event)) else (self._err("ErrorInvalidValue"),)

    def _EventDestroy(self, event: Any) -> tuple:
        known = self.events.pop(id(event), None) is not None
        return self._ok() if known else (self._err("ErrorInvalidValue"),)

    def _HostRegister(self, ptr: int, size: int, flags: int) -> tuple:
        if any(p < ptr + size and ptr < p + n for p, (n, _) in self.registered.items()):
            return (self._err("ErrorInvalidValue"),)
        self.registered[ptr] = (size, flags)
        return self._ok()

    def _HostUnregister(self, ptr: int) -> tuple:
        return self._ok() if self.registered.pop(ptr, None) is not None else (self._err("ErrorInvalidValue"),)


def open_fake(prefix: str, **kwargs: Any) -> tuple[Any, FakeRuntime]:
    fake = FakeRuntime(prefix, **kwargs)
    cls = CudaDevice if prefix == "cuda" else HipDevice
    return cls(0, module=fake), fake


def _backend_params() -> list[Any]:
    params = [pytest.param(n, id=n, marks=[pytest.mark.gpu] if n in GPU_BACKENDS else [])
              for n in DEVICES.names()]
    return params + [pytest.param("fake-cuda", id="fake-cuda"), pytest.param("fake-hip", id="fake-hip")]


@pytest.fixture(params=_backend_params())
def device(request: pytest.FixtureRequest) -> Any:
    name = request.param
    if name.startswith("fake-"):
        dev = open_fake(name[len("fake-"):])[0]
    else:
        avail = device_availability(name)
        if not avail:
            pytest.skip(f"{name}: {avail.reason}")
        dev = open_device(name)
    yield dev
    dev.close()


def pattern(nbytes: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8).tobytes()


@pytest.fixture
def mapped_file(tmp_path: Any) -> Any:
    data = pattern(3 * mmap.PAGESIZE + 123, seed=7)
    path = tmp_path / "weights.bin"
    path.write_bytes(data)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    yield m, data
    m.close()


# --- the contract, for every backend --------------------------------------------------------------


def test_info_describes_the_device(device: Any) -> None:
    info = device.info()
    assert info.backend in (device.name, "cuda", "hip")
    assert info.name and info.arch and info.binding
    assert isinstance(info.uma, bool) and info.memory_bytes > 0
    assert info.to_json()["arch"] == info.arch


@pytest.mark.parametrize("nbytes", [1, 4097])
def test_copy_then_read_back_is_byte_exact(device: Any, nbytes: int) -> None:
    data = pattern(nbytes, seed=nbytes)
    buf = device.alloc(nbytes + 10)
    device.copy_h2d(buf, 10, data)
    device.copy_h2d(buf, 0, bytearray(b"0123456789"))
    device.synchronize()
    assert device.read_back(buf, 10, nbytes) == data
    assert device.read_back(buf, 0, 10) == b"0123456789"
    device.free(buf)


@pytest.mark.parametrize("nbytes", [1, 4097])
def test_read_back_into_pinned_staging_equals_read_back(device: Any, nbytes: int) -> None:
    data = pattern(nbytes + 7, seed=3)
    buf = device.alloc(nbytes + 7)
    device.copy_h2d(buf, 0, data)
    staging = device.alloc_pinned(nbytes)
    view = staging.view[:nbytes]
    device.read_back_into(buf, 7, view)
    assert bytes(view) == data[7:] == device.read_back(buf, 7, nbytes)
    view.release()
    with pytest.raises(ValueError):
        device.read_back_into(buf, 8, staging.view[:nbytes])  # one byte past the end
    device.free_pinned(staging)
    device.free(buf)


def test_copy_from_a_read_only_mmap_slice(device: Any, mapped_file: Any) -> None:
    m, data = mapped_file
    start, n = mmap.PAGESIZE - 5, 2 * mmap.PAGESIZE + 17  # straddles pages, unaligned like GGUF tensors
    buf = device.alloc(n)
    view = memoryview(m)[start:start + n]
    device.copy_h2d(buf, 0, view)
    view.release()
    assert device.read_back(buf, 0, n) == data[start:start + n]


def test_overrun_and_bad_offsets_are_rejected(device: Any) -> None:
    buf = device.alloc(16)
    device.copy_h2d(buf, 0, b"\xaa" * 16)
    for offset, src in [(1, b"x" * 16), (17, b""), (-1, b"x")]:
        with pytest.raises(ValueError, match="overruns"):
            device.copy_h2d(buf, offset, src)
    with pytest.raises(ValueError):
        device.read_back(buf, 8, 9)
    assert device.read_back(buf, 0, 16) == b"\xaa" * 16


def test_pinned_staging_async_copy(device: Any) -> None:
    data = pattern(8192 + 3, seed=3)
    staging = device.alloc_pinned(len(data))
    assert staging.nbytes == len(data) and len(staging.view) == len(data) and not staging.view.readonly
    staging.view[:] = data
    buf = device.alloc(len(data))
    device.copy_h2d(buf, 0, staging.view, asynchronous=True)
    event = device.record_event()
    device.wait_event(event)
    device.wait_event(event)  # waiting twice is harmless
    device.wait_event(None)
    assert device.read_back(buf, 0, len(data)) == data
    device.free_pinned(staging)


def test_registered_host_memory(device: Any, mapped_file: Any) -> None:
    heap = np.frombuffer(bytearray(pattern(3 * mmap.PAGESIZE, seed=5)), dtype=np.uint8)
    handle = device.register_host(memoryview(heap))
    buf = device.alloc(heap.nbytes)
    device.copy_h2d(buf, 0, heap, asynchronous=True)
    device.synchronize()
    assert device.read_back(buf, 0, heap.nbytes) == heap.tobytes()
    device.unregister_host(handle)
    m, data = mapped_file  # a read-only file mapping, as a zero-copy strategy would register it
    view = memoryview(m)
    ro = device.register_host(view)
    device.copy_h2d(buf, 0, view[: heap.nbytes], asynchronous=True)
    device.synchronize()
    device.unregister_host(ro)
    view.release()
    assert device.read_back(buf, 0, heap.nbytes) == data[: heap.nbytes]


def test_zero_sizes_and_idempotent_free(device: Any) -> None:
    empty = device.alloc(0)
    device.copy_h2d(empty, 0, b"")
    assert device.read_back(empty, 0, 0) == b""
    device.free(empty)
    buf = device.alloc(4)
    device.free(buf)
    device.free(buf)
    assert buf.freed
    with pytest.raises(ValueError):
        device.copy_h2d(buf, 0, b"x")


def test_close_releases_what_is_left(device: Any) -> None:
    bufs = [device.alloc(64) for _ in range(3)]
    device.record_event()
    device.close()
    device.close()  # a second close is a no-op
    if isinstance(device, GpuDevice):  # the host backend just drops its arrays
        assert all(b.freed for b in bufs)
    if isinstance(getattr(device, "module", None), FakeRuntime):
        fake = device.module
        assert not fake.device_mem and not fake.events and not fake.streams


# --- the shared GPU logic, call by call, in both bindings' shapes -----------------------------------

PREFIXES = pytest.mark.parametrize("prefix", ["cuda", "hip"])


@PREFIXES
def test_alloc_copy_read_back_call_sequence(prefix: str) -> None:
    dev, fake = open_fake(prefix)
    assert fake.names()[:3] == ["GetDeviceCount", "SetDevice", "StreamCreate"]
    fake.calls.clear()
    buf = dev.alloc(100)
    ptr = buf.ptr
    dev.copy_h2d(buf, 40, b"abc")
    dev.copy_h2d(buf, 0, b"xy", asynchronous=True)
    assert dev.read_back(buf, 40, 3) == b"abc"
    dev.free(buf)
    assert fake.names() == ["Malloc", "Memcpy", "MemcpyAsync", "DeviceSynchronize", "Memcpy", "Free"]
    (_, malloc), (_, h2d), (_, h2d_async), _, (_, d2h), (_, free) = fake.calls
    assert malloc == (100,) and int(free[0]) == ptr and ptr not in fake.device_mem
    assert h2d[0] == ptr + 40 and h2d[2] == 3 and h2d[3].name == f"{prefix}MemcpyHostToDevice"
    assert h2d_async[:3] == (ptr, h2d_async[1], 2) and h2d_async[4] is dev._stream
    assert d2h[1] == ptr + 40 and d2h[2] == 3 and d2h[3].name == f"{prefix}MemcpyDeviceToHost"


def test_each_thread_makes_the_ordinal_current() -> None:
    import threading
    dev = CudaDevice(1, module=FakeRuntime("cuda", devices=2))
    fake = dev.module
    fake.calls.clear()
    worker = threading.Thread(target=lambda: dev.copy_h2d(dev.alloc(4), 0, b"1234"))
    worker.start()
    worker.join()
    assert fake.names() == ["SetDevice", "Malloc", "Memcpy"] and fake.calls[0][1] == (1,)


@PREFIXES
def test_overrun_never_reaches_the_driver(prefix: str) -> None:
    dev, fake = open_fake(prefix)
    buf = dev.alloc(8)
    fake.calls.clear()
    with pytest.raises(ValueError, match="overruns a 8 B buffer"):
        dev.copy_h2d(buf, 4, b"12345")
    with pytest.raises(ValueError, match="overruns"):
        dev.read_back(buf, 0, 9)
    assert fake.calls == []


def test_pinned_staging_uses_each_bindings_names() -> None:
    shapes = [("cuda", "cudaHostAlloc", "cudaFreeHost"), ("hip", "hipHostMalloc", "hipHostFree")]
    for prefix, alloc, free in shapes:
        dev, fake = open_fake(prefix)
        staging = dev.alloc_pinned(10)
        staging.view[:] = b"0123456789"
        addr = next(a for a in fake.host_mem)
        assert ctypes.string_at(addr, 10) == b"0123456789"  # the view is the runtime's memory
        dev.free_pinned(staging)
        dev.free_pinned(staging)  # idempotent
        names = [n for n, _ in fake.calls]
        assert names.count(alloc) == 1 and names.count(free) == 1 and not fake.host_mem


@PREFIXES
def test_register_flags_follow_the_source(prefix: str, mapped_file: Any) -> None:
    dev, fake = open_fake(prefix, readonly_flag=(prefix == "cuda"))  # hip-python 10 has no ReadOnly flag
    writable = bytearray(4096)
    rw = dev.register_host(writable)
    m, _ = mapped_file
    view = memoryview(m)
    ro = dev.register_host(view)
    flags = {args[0]: args[2] for name, args in fake.calls if name.endswith("HostRegister")}
    assert flags[rw.addr] == 0 and rw.nbytes == 4096 and not rw.read_only
    assert ro.read_only and flags[ro.addr] == (8 if prefix == "cuda" else 0)
    dev.unregister_host(rw)
    dev.unregister_host(rw)  # idempotent
    dev.close()  # unregisters what is still registered
    view.release()
    assert not fake.registered


@PREFIXES
def test_events_record_on_the_copy_stream(prefix: str) -> None:
    dev, fake = open_fake(prefix)
    fake.calls.clear()
    event = dev.record_event()
    dev.wait_event(event)
    assert fake.names() == ["EventCreate", "EventRecord", "EventSynchronize", "EventDestroy"]
    assert fake.calls[1][1] == (event.handle, dev._stream)
    assert not fake.events


@PREFIXES
def test_a_failed_call_names_the_device_the_call_and_the_error(prefix: str) -> None:
    dev, fake = open_fake(prefix, fail={f"{prefix}Malloc": "ErrorMemoryAllocation"})
    with pytest.raises(DeviceError) as err:
        dev.alloc(1 << 40)
    assert isinstance(err.value, WorkbenchError)
    assert str(err.value) == (f"{prefix}:0: {prefix}Malloc failed: {prefix}ErrorMemoryAllocation "
                              f"(fake text for {prefix}ErrorMemoryAllocation)")
    assert err.value.call == f"{prefix}Malloc" and err.value.device == f"{prefix}:0"


@PREFIXES
def test_close_frees_everything_and_reports_a_failure(prefix: str) -> None:
    dev, fake = open_fake(prefix, fail={f"{prefix}Free": "ErrorInvalidValue"})
    dev.alloc(8)
    staging = dev.alloc_pinned(8)
    dev.record_event()
    with pytest.raises(DeviceError, match=f"{prefix}Free failed"):
        dev.close()
    assert not fake.host_mem and not fake.events and not fake.streams  # the rest still released
    assert staging.handle is None


def test_info_cuda_reads_sm_arch_and_integrated() -> None:
    dev, _ = open_fake("cuda")
    info = dev.info()
    assert (info.backend, info.name, info.arch, info.uma) == ("cuda", "Fake GPU", "sm_90", False)
    assert info.memory_bytes == 8 << 30 and info.driver == "NVIDIA driver 12.8, runtime 12.8"
    assert open_fake("cuda", props={"integrated": 1, "major": 8, "minor": 7})[0].info().arch == "sm_87"
    assert open_fake("cuda", props={"integrated": 1})[0].info().uma is True
    assert format_cuda_version(13000) == "13.0"


@pytest.mark.parametrize("arch,integrated,uma", [
    ("gfx1100", 0, False), ("gfx1151:xnack-", 0, True), (b"gfx1103\0\0", 0, True),
    ("gfx90a:sramecc+:xnack-", 1, True),
])
def test_info_hip_uma_from_integrated_or_apu_arch(arch: Any, integrated: int, uma: bool) -> None:
    info = open_fake("hip", props={"gcnArchName": arch, "integrated": integrated})[0].info()
    assert info.uma is uma and info.arch.startswith("gfx") and ":" not in info.arch
    assert info.driver == "ROCm runtime 6.2.41134, runtime 6.2.41134"


def test_ordinal_beyond_the_device_count_is_unavailable() -> None:
    with pytest.raises(BackendUnavailable, match="no device 2: 2 present"):
        CudaDevice(2, module=FakeRuntime("cuda", devices=2))


# --- availability: module missing, no driver, no device ---------------------------------------------


def _raise(exc: BaseException) -> Any:
    def load() -> Any:
        raise exc
    return load


@pytest.mark.parametrize("rt", [CUDA_RUNTIME, HIP_RUNTIME], ids=["cuda", "hip"])
def test_probe_reasons(rt: Any) -> None:
    p, lib = rt.prefix, rt.driver_lib
    assert probe_runtime(rt, lambda: FakeRuntime(p)).ok
    missing = probe_runtime(rt, _raise(ImportError("No module named 'x'")))
    assert missing.reason == f"module missing: {rt.backend} Python bindings not importable"
    zero = probe_runtime(rt, lambda: FakeRuntime(p, devices=0))
    assert zero.reason == f"no device: {p}GetDeviceCount returned 0"
    nodev = probe_runtime(rt, lambda: FakeRuntime(p, fail={f"{p}GetDeviceCount": "ErrorNoDevice"}))
    assert nodev.reason == zero.reason
    old = probe_runtime(rt, lambda: FakeRuntime(p, fail={f"{p}GetDeviceCount": "ErrorInsufficientDriver"}))
    assert old.reason.startswith(f"no driver: {p}GetDeviceCount: {p}ErrorInsufficientDriver (fake text")

    class NoLib(FakeRuntime):
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError(f"failed to dlopen '{lib}': cannot open shared object file")
    dlopen = probe_runtime(rt, lambda: NoLib(p))
    assert not dlopen and dlopen.reason == f"no driver: {lib} not found ({rt.driver_name} missing)"


def test_cuda_availability_here_matches_the_installed_binding() -> None:
    avail = device_availability("cuda")
    try:
        import cuda.bindings.runtime  # noqa: F401
    except ImportError:
        try:
            from cuda import cudart  # noqa: F401
        except ImportError:
            assert avail.reason == "module missing: cuda Python bindings not importable"
            return
    assert avail.ok or avail.reason.startswith(("no driver:", "no device:"))


def test_the_real_cuda_binding_has_every_name_we_call() -> None:
    runtime = pytest.importorskip("cuda.bindings.runtime", reason="cuda-python (cuda-bindings) not installed")
    for name in list(CUDA_RUNTIME.calls.values()) + [CUDA_RUNTIME.pinned_flags, CUDA_RUNTIME.register_flags,
                                                     CUDA_RUNTIME.register_readonly_flags]:
        assert hasattr(runtime, name), name
    assert hasattr(runtime.cudaError_t, "cudaSuccess")
    assert hasattr(runtime.cudaMemcpyKind, "cudaMemcpyDeviceToHost")


@pytest.mark.parametrize("prefix", ["cuda", "hip"])
def test_gpu_smoke_paths_verify_on_the_shared_backend(prefix: str, tmp_path: Any) -> None:
    """benchmarks/gpu/gpu_smoke.py runs on the H200 only; its every path is checked here on the fakes."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "gpu_smoke", os.path.join(os.path.dirname(__file__), "..", "benchmarks", "gpu", "gpu_smoke.py"))
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    dev, fake = open_fake(prefix)
    base = np.frombuffer(pattern(9000, seed=9), dtype=np.uint8)
    path = tmp_path / "src.bin"
    path.write_bytes(b"\0" * smoke.FILE_OFFSET + smoke.path_data(base, "mmap", 9000).tobytes())
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    for nbytes in (1, 4097):
        for name in smoke.PATHS:
            assert smoke.run_path(dev, name, nbytes, base, mapped, reps=2)["verified"], (name, nbytes)
    mapped.close()
    assert not fake.device_mem and not fake.host_mem and not fake.registered
    assert smoke.parse_size("64Mi") == 64 << 20 and smoke.parse_size("4097") == 4097


@pytest.mark.parametrize("cls, prefix", [(CudaDevice, "cuda"), (HipDevice, "hip")])
def test_refused_registration_returns_none_so_callers_fall_back(cls: Any, prefix: str) -> None:
    # The Device contract (as the host backend's mlock): refusal is None, not an exception, so
    # `mmap register=1`, `pread upload=registered` and ceilings can say INERT and carry on.
    dev = cls(0, module=FakeRuntime(prefix, fail={f"{prefix}HostRegister": "ErrorMemoryAllocation"}))
    assert dev.register_host(memoryview(bytearray(8192))) is None
    dev.close()
