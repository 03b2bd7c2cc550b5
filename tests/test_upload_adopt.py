"""``Device.adopt``: memory a peer loader allocated becomes a placement without a copy, and freeing it
only drops the owner — never the runtime's free on someone else's allocation.

Runs on ``host`` and on the shared GPU backend driven by the fake CUDA and HIP runtimes (the owner there
is a block the fake "framework" allocated with the runtime's malloc, as torch's allocator would).
"""
from __future__ import annotations

import ctypes
import gc
import weakref

import numpy as np
import pytest

from test_upload_devices import FakeRuntime, open_fake, pattern
from workbench.errors import DeviceError
from workbench.upload import open_device
from workbench.upload.base import Device, DeviceBuffer


class Owner:
    """What a framework tensor is to us: an object whose lifetime keeps the memory allocated."""

    def __init__(self, ptr: int, nbytes: int, release=None):
        self.ptr, self.nbytes, self._release = ptr, nbytes, release

    def __del__(self):
        if self._release is not None:
            self._release(self.ptr)


def framework_alloc(device: Device, data: bytes) -> Owner:
    """Memory filled by "someone else": host numpy memory, or the fake runtime's own malloc."""
    fake = getattr(device, "module", None)
    if isinstance(fake, FakeRuntime):
        _, raw = fake._Malloc(max(len(data), 1))
        ptr = int(raw)
        ctypes.memmove(ptr, data, len(data))
        return Owner(ptr, len(data), release=lambda p: fake.device_mem.pop(p, None))
    arr = np.frombuffer(bytearray(data) or bytearray(1), dtype=np.uint8)
    owner = Owner(int(arr.ctypes.data), len(data))
    owner.array = arr  # the owner keeps the memory alive, as a tensor keeps its storage
    return owner


@pytest.fixture(params=["host", "host-uma", "fake-cuda", "fake-hip"])
def device(request):
    dev = open_fake(request.param[5:])[0] if request.param.startswith("fake-") else open_device(request.param)
    yield dev
    dev.close()


@pytest.mark.parametrize("nbytes", [1, 4097, (1 << 20) + 3])
def test_adopted_memory_reads_back_byte_exact_without_a_copy(device, nbytes):
    data = pattern(nbytes, seed=nbytes)
    owner = framework_alloc(device, data)
    fake = getattr(device, "module", None)
    calls_before = len(fake.calls) if fake else 0
    buf = device.adopt(owner.ptr, nbytes, owner)
    assert buf.ptr == owner.ptr and buf.nbytes == nbytes and buf.adopted
    if fake:  # adopting is bookkeeping: no runtime call at all
        assert fake.calls[calls_before:] == []
    assert device.read_back(buf, 0, nbytes) == data
    dest = bytearray(nbytes)
    device.read_back_into(buf, 0, memoryview(dest))
    assert bytes(dest) == data


def test_free_drops_the_owner_and_never_calls_the_runtimes_free(device):
    owner = framework_alloc(device, b"peer bytes")
    ref = weakref.ref(owner)
    buf = device.adopt(owner.ptr, owner.nbytes, owner)
    fake = getattr(device, "module", None)
    ptr = owner.ptr
    del owner
    gc.collect()
    assert ref() is not None, "the buffer must keep its owner alive until freed"
    device.free(buf)
    device.free(buf)  # idempotent
    assert buf.freed and buf.owner is None
    gc.collect()
    assert ref() is None, "free must release the owner reference"
    if fake:
        assert "Free" not in fake.names(), "cudaFree on memory the framework owns"
        assert ptr not in fake.device_mem  # released by its owner (the fake framework), not by us
    with pytest.raises(ValueError):
        device.read_back(buf, 0, 1)


def test_close_releases_adopted_owners_and_frees_only_our_own(device):
    owners = [framework_alloc(device, pattern(64, seed=i)) for i in range(3)]
    refs = [weakref.ref(o) for o in owners]
    adopted = [device.adopt(o.ptr, o.nbytes, o) for o in owners]
    ours = device.alloc(64)
    del owners
    device.close()
    gc.collect()
    assert all(b.freed for b in adopted) and all(r() is None for r in refs)
    fake = getattr(device, "module", None)
    if fake:
        assert fake.names().count("Free") == 1  # only the buffer we allocated
        assert ours.freed and not fake.device_mem


def test_zero_bytes_and_bad_arguments(device):
    token = object()
    empty = device.adopt(0, 0, token)
    assert device.read_back(empty, 0, 0) == b""
    device.free(empty)
    with pytest.raises(ValueError):
        device.adopt(0, 16, token)  # bytes at a null address
    with pytest.raises(ValueError):
        device.adopt(1234, 16, None)  # nothing keeps the memory alive


def test_a_backend_that_cannot_adopt_says_so():
    class Minimal(Device):
        name = "minimal"

        @classmethod
        def available(cls):
            raise NotImplementedError

        info = alloc = free = copy_h2d = synchronize = read_back = None  # type: ignore[assignment]
        alloc_pinned = free_pinned = register_host = unregister_host = None  # type: ignore[assignment]

    with pytest.raises(DeviceError, match="minimal: adopt failed"):
        Minimal().adopt(1, 1, object())
    assert DeviceBuffer(4, 1).adopted is False
