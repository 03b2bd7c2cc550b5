"""One Device test suite over every registered backend available here, plus the shared GPU logic on fakes.

``host`` and ``host-uma`` run everywhere; ``cuda`` and ``hip`` (marked ``gpu``) run where a device is
present and are skipped with the reason otherwise. ``fake-cuda`` / ``fake-hip`` run the same contract on
the shared GPU backend (``workbench/upload/_gpu.py``) driven by :class:`FakeRuntime`, a stand-in binding
that moves real bytes and records every call in cuda-python's or hip-python's call shape.
"""
from __future__ import annotations

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
        setattr(self, f"{prefix}Error_t", enum.IntEnum(f"{prefix}Error_t", {prefix + k: v for k, v in codes.items()}))
        kinds = {"HostToHost": 0, "HostToDevice": 1, "DeviceToHost": 2}
        setattr(self, f"{prefix}MemcpyKind",
                enum.IntEnum(f"{prefix}MemcpyKind", {f"{prefix}Memcpy{k}": v for k, v in kinds.items()}))
        setattr(self, f"{prefix}{self.ALLOC[prefix][0]}Default", 0)
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
        addr = ctypes.addressof(block)
        return FakePointer(addr) if self.prefix == "hip" else addr

    def _drop(self, table: dict[int, Any], ptr: Any) -> tuple:
        return self._ok() if table.pop(int(ptr), None) is not None else (self._err("ErrorInvalidValue"),)

    def _Malloc(self, size: int) -> tuple:
        return self._ok(self._new(self.device_mem, size))

    def _Free(self, ptr: Any) -> tuple:
        return self._drop(self.device_mem, ptr)

    def _HostAlloc(self, size: int, flags: int) -> tuple:
        return self._ok(self._new(self.host_mem, size))

    _HostMalloc = _HostAlloc

    def _FreeHost(self, ptr: Any) -> tuple:
        return self._drop(self.host_mem, ptr)

    _HostFree = _FreeHost

    def _on_device(self, addr: int, size: int) -> bool:
        return any(base <= addr and addr + size <= base + len(block) for base, block in self.device_mem.items())

    def _Memcpy(self, dst: int, src: int, size: int, kind: Any) -> tuple:
        kinds = getattr(self, f"{self.prefix}MemcpyKind")
        h2d = kind == getattr(kinds, f"{self.prefix}MemcpyHostToDevice")
        dev, host = (dst, src) if h2d else (src, dst)
        if not self._on_device(dev, size) or self._on_device(host, 1):
            return (self._err("ErrorInvalidValue"),)
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
        return self._ok() if self.events.pop(id(event), None) is not None else (self._err("ErrorInvalidValue"),)

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
    params = [pytest.param(n, id=n, marks=[pytest.mark.gpu] if n in GPU_BACKENDS else []) for n in DEVICES.names()]
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
