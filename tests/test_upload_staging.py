"""The staging ring (upload/staging.py), fences and one-allocation buffers, once over every backend.

Backends: ``host`` and ``host-uma``; ``fake-cuda`` / ``fake-hip`` (the shared GPU backend on the fake
runtimes of test_upload_devices.py, which records every driver call); ``deferred`` (copies run only
when a fence or synchronize reaches them — the one that proves a slot is never refilled before its
copy finished); ``cuda`` / ``hip`` on a real device (marked ``gpu``, skipped without one).
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

from workbench.errors import DeviceError
from workbench.upload import DEVICES, device_availability, open_device
from workbench.upload._gpu import GpuDevice
from workbench.upload.staging import HUGE_PAGE, StagingRing

from device_fakes import DeferredCopyDevice
from test_upload_devices import GPU_BACKENDS, FakeRuntime, open_fake, pattern

BACKENDS = [pytest.param(n, id=n, marks=[pytest.mark.gpu] if n in GPU_BACKENDS else []) for n in DEVICES.names()]
BACKENDS += [pytest.param(n, id=n) for n in ("fake-cuda", "fake-hip", "deferred")]


@pytest.fixture(params=BACKENDS)
def device(request: pytest.FixtureRequest) -> Any:
    name = request.param
    if name == "deferred":
        dev = DeferredCopyDevice()
    elif name.startswith("fake-"):
        dev = open_fake(name[len("fake-"):])[0]
    else:
        avail = device_availability(name)
        if not avail:
            pytest.skip(f"{name}: {avail.reason}")
        dev = open_device(name)
    yield dev
    dev.close()


def push_through_ring(device: Any, ring: StagingRing, data: bytes, piece: int, threads: int) -> Any:
    """``threads`` threads copy ``data`` to a device buffer in ``piece``-byte pieces, each piece
    through a ring slot, pieces taken in turn (so consecutive pieces go through different slots)."""
    dst = device.alloc(len(data))
    offsets = iter(range(0, len(data), piece))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            while True:
                with lock:
                    off = next(offsets, None)
                if off is None:
                    return
                n = min(piece, len(data) - off)
                with ring.slot() as slot, slot.view[:n] as view:
                    view[:] = data[off : off + n]
                    ring.filled(slot)  # first-read: registered now; a no-op for every other provision
                    device.copy_h2d(dst, off, view, asynchronous=True)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    return dst


@pytest.mark.parametrize("threads", [1, 4])
def test_ring_lands_exact_bytes_from_several_threads(device: Any, threads: int) -> None:
    data = pattern(40 * 4096 + 123, seed=threads)
    ring = StagingRing(device, 3, 8192 + 5)  # fewer slots than pieces: every slot is reused many times
    dst = push_through_ring(device, ring, data, 8192 + 5, threads)
    ring.close()
    device.synchronize()
    assert device.read_back(dst, 0, len(data)) == data
    assert ring.how in ("registered", "pinned", "unlocked") and ring.provision_s > 0 and ring.release_s > 0


def test_a_ring_without_fence_waits_lands_wrong_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test above can fail: take the fence wait away and a slot is refilled while its copy is queued.
    dev = DeferredCopyDevice()
    monkeypatch.setattr(dev, "wait_fence", lambda fence: None)
    data = pattern(40 * 4096 + 123, seed=1)
    ring = StagingRing(dev, 3, 8192)
    dst = push_through_ring(dev, ring, data, 8192, 1)
    ring.close()
    dev.synchronize()
    assert dev.read_back(dst, 0, len(data)) != data


def test_close_waits_for_every_copy_before_releasing_the_memory() -> None:
    dev = DeferredCopyDevice()
    ring = StagingRing(dev, 2, 4096)
    dst = dev.alloc(4096)
    slot = ring.acquire()
    slot.view[:] = b"\x5a" * 4096
    dev.copy_h2d(dst, 0, slot.view, asynchronous=True)
    ring.release(slot)
    assert dev.in_flight == 1
    ring.close()
    assert dev.in_flight == 0 and dev.read_back(dst, 0, 4096) == b"\x5a" * 4096
    ring.close()  # idempotent


def test_a_view_kept_past_close_is_a_leak_unless_on_an_error_path(device: Any) -> None:
    ring = StagingRing(device, 2, 4096)
    kept = ring.acquire().view[:10]
    with pytest.raises(BufferError):
        ring.close()
    kept.release()
    other = StagingRing(device, 2, 4096)
    kept = other.acquire().view[:10]
    other.close(strict=False)  # the error path: unmapped when the last view goes
    kept.release()


def test_acquire_gives_up_when_stopped(device: Any) -> None:
    ring = StagingRing(device, 1, 4096)
    held = ring.acquire()
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    assert ring.acquire(stop) is None
    ring.release(held)
    assert ring.acquire(threading.Event()) is held  # a free slot comes back at once
    ring.release(held)
    ring.close()


def test_ring_rejects_an_empty_shape(device: Any) -> None:
    for slots, size in ((0, 4096), (2, 0)):
        with pytest.raises(ValueError, match="slots >= 1"):
            StagingRing(device, slots, size)


# --- provisioning: where the memory comes from, and that it all goes back ---------------------------


@pytest.mark.parametrize("prefix", ["cuda", "hip"])
def test_ring_registers_huge_page_aligned_anonymous_memory_and_releases_it(prefix: str) -> None:
    dev, fake = open_fake(prefix)
    fake.calls.clear()
    ring = StagingRing(dev, 5, 3 << 20)
    registered = [args for name, args in fake.calls if name.endswith("HostRegister")]
    assert ring.how == "registered" and len(registered) == 1
    addr, size, _ = registered[0]
    assert addr % HUGE_PAGE == 0 and size == 5 * (3 << 20)
    assert not fake.host_mem  # no cudaHostAlloc
    slot = ring.acquire()
    ring.release(slot)
    ring.release(ring.acquire())
    ring.close()
    names = fake.names()
    assert names.count("EventCreate") == 5 and names.count("EventDestroy") == 5  # one event per slot, kept
    assert names.count("EventRecord") == 2 and names.count("HostUnregister") == 1
    assert not fake.registered and not fake.events


@pytest.mark.parametrize("prefix", ["cuda", "hip"])
def test_ring_falls_back_to_alloc_pinned_when_registration_is_refused(prefix: str) -> None:
    dev, fake = open_fake(prefix, fail={f"{prefix}HostRegister": "ErrorMemoryAllocation"})
    ring = StagingRing(dev, 2, 4096)
    assert ring.how == "pinned" and len(fake.host_mem) == 1
    ring.close()
    assert not fake.host_mem
    forced = StagingRing(dev, 2, 4096, source="alloc")
    assert forced.how == "pinned"
    forced.close()
    anon = StagingRing(dev, 2, 4096, source="anon")  # the mapping only: kept, unregistered
    assert anon.how == "unlocked" and len(fake.host_mem) == 0
    anon.slots[0].view[:3] = b"abc"
    anon.close()
    with pytest.raises(ValueError, match="staging source"):
        StagingRing(dev, 2, 4096, source="tmpfs")


def test_host_ring_without_mlock_says_it_is_not_page_locked(monkeypatch: pytest.MonkeyPatch) -> None:
    import workbench.upload.host as host

    monkeypatch.setattr(host, "_mlock", lambda addr, n: False)  # as under RLIMIT_MEMLOCK, without root
    ring = StagingRing(host.HostDevice(), 2, 4096)
    assert ring.how == "unlocked" and not ring.block.locked and "NOT page-locked" in ring.describe()
    ring.close()


# --- fences on the GPU backend: one driver event per fence, re-recorded ------------------------------


@pytest.mark.parametrize("prefix", ["cuda", "hip"])
def test_fence_call_sequence(prefix: str) -> None:
    dev, fake = open_fake(prefix)
    fake.calls.clear()
    fence = dev.create_fence()
    dev.wait_fence(fence)  # never recorded: nothing to wait for
    dev.record_fence(fence)
    dev.record_fence(fence)
    dev.wait_fence(fence)
    dev.wait_fence(fence)
    kept = dev.create_fence()
    dev.record_fence(kept)
    dev.destroy_fence(fence)
    assert fake.names() == ["EventCreate", "EventRecord", "EventRecord", "EventSynchronize", "EventCreate",
                            "EventRecord", "EventDestroy"]
    fake.calls.clear()
    dev.close()  # waits for and destroys the fence still alive
    assert fake.names() == ["DeviceSynchronize", "EventSynchronize", "EventDestroy", "StreamDestroy"]
    assert not fake.events


# --- one device allocation carved into buffers --------------------------------------------------------


def test_alloc_many_buffers_are_aligned_separate_and_bounded(device: Any) -> None:
    sizes = [5, 0, 4097, 1, 300]
    bufs = device.alloc_many(sizes)
    assert [b.nbytes for b in bufs] == sizes
    live = [b for b in bufs if b.nbytes]
    assert all((b.ptr - live[0].ptr) % 256 == 0 for b in live)  # the base: the runtime's own alignment
    if not isinstance(getattr(device, "module", None), FakeRuntime):  # the fakes' memory is ctypes'
        assert live[0].ptr % 256 == 0
    spans = sorted((b.ptr, b.ptr + b.nbytes) for b in live)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))  # no overlap
    datas = [pattern(n, seed=i) for i, n in enumerate(sizes)]
    for b, d in zip(bufs, datas):
        device.copy_h2d(b, 0, d)
    with pytest.raises(ValueError, match="overruns"):
        device.copy_h2d(bufs[0], 0, b"x" * 6)  # bounded by its own size, not the allocation's
    device.synchronize()
    assert [device.read_back(b, 0, b.nbytes) for b in bufs] == datas
    for b in bufs:
        device.free(b)
    assert all(b.freed for b in bufs)


@pytest.mark.parametrize("prefix", ["cuda", "hip"])
def test_alloc_many_is_one_malloc_freed_with_the_last_buffer(prefix: str) -> None:
    dev, fake = open_fake(prefix)
    fake.calls.clear()
    bufs = dev.alloc_many([100, 3000, 7])
    assert fake.names() == ["Malloc"] and fake.calls[0][1] == (256 + 3072 + 7,)
    dev.free(bufs[1])
    dev.free(bufs[1])
    dev.free(bufs[0])
    assert "Free" not in fake.names() and len(fake.device_mem) == 1
    dev.free(bufs[2])
    assert fake.names().count("Free") == 1 and not fake.device_mem
    leftover = dev.alloc_many([8, 8])
    dev.close()  # frees the allocation once, through its buffers
    assert all(b.freed for b in leftover) and not fake.device_mem


def test_alloc_many_of_nothing(device: Any) -> None:
    assert device.alloc_many([]) == []
    empty = device.alloc_many([0, 0])
    assert [b.nbytes for b in empty] == [0, 0]
    assert device.read_back(empty[0], 0, 0) == b""
    if isinstance(device, GpuDevice) and isinstance(device.module, FakeRuntime):
        assert "Malloc" not in device.module.names()


def test_a_deferred_copy_reads_its_source_when_it_runs() -> None:
    # The property every fence test relies on: the device copies the source as it is at wait time.
    dev = DeferredCopyDevice()
    src = np.frombuffer(bytearray(b"a" * 64), dtype=np.uint8)
    dst = dev.alloc(64)
    dev.copy_h2d(dst, 0, src, asynchronous=True)
    src[:] = ord("b")
    dev.synchronize()
    assert dev.read_back(dst, 0, 64) == b"b" * 64


# --- background provisioning: slots registered one by one while the ring is already in use ------------


def inject(monkeypatch: pytest.MonkeyPatch, device: Any, *, fail_at: int = 0, delay: float = 0.0,
           gate: threading.Event | None = None, hold: threading.Event | None = None) -> None:
    """The device's register_host / alloc_pinned (one of them per slot with source anon or alloc) wait
    until ``hold`` is set (when given; 10 s at most), then ``delay`` seconds each, and the ``fail_at``-th
    call (1-based; 0: none) raises instead, once ``gate`` is set (when given)."""
    calls = [0]
    for name in ("register_host", "alloc_pinned"):
        real = getattr(device, name)

        def wrapped(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls[0] += 1
            if hold is not None:
                hold.wait(10)
            if delay:
                time.sleep(delay)
            if calls[0] == fail_at:
                if gate is not None:
                    gate.wait(5)
                raise DeviceError("test:0", _name, "ErrorInjected", f"call {calls[0]} refused on purpose")
            return _real(*args, **kwargs)

        monkeypatch.setattr(device, name, wrapped)


@pytest.mark.parametrize("threads", [1, 4])
def test_background_ring_lands_exact_bytes_and_gives_everything_back(device: Any, threads: int) -> None:
    before = device.usage()
    data = pattern(40 * 4096 + 123, seed=threads)
    ring = StagingRing(device, 3, 8192 + 5, provision="background")
    dst = push_through_ring(device, ring, data, 8192 + 5, threads)
    ring.close()
    device.synchronize()
    assert device.read_back(dst, 0, len(data)) == data
    device.free(dst)
    assert device.usage() == before  # every slot's block and fence released
    assert not ring._thread.is_alive() and ring.block is None
    assert ring.how in ("registered", "pinned", "unlocked") and ring.release_s > 0
    assert ring.first_slot_s is not None and "in the background (first slot after" in ring.describe()


def test_background_ring_provides_every_slot_each_its_own_memory(device: Any) -> None:
    before = device.usage()
    ring = StagingRing(device, 5, 4096 + 3, provision="background")
    held = [ring.acquire() for _ in range(5)]  # returns only once each slot has been provisioned
    assert sorted(s.index for s in held) == list(range(5)) and all(s.nbytes == 4096 + 3 for s in held)
    for k, slot in enumerate(held):
        slot.view[:] = bytes([k + 1]) * slot.nbytes
    assert [bytes(s.view) for s in held] == [bytes([k + 1]) * (4096 + 3) for k in range(5)]  # no overlap
    for slot in held:
        ring.release(slot)
    ring._thread.join(5)
    assert ring.provisioned_s is not None and ring.provisioned_s >= ring.first_slot_s
    assert ring.nbytes == 5 * (4096 + 3) and ring.locked == (ring.how != "unlocked")
    ring.close()
    assert len(ring.slots) == 5 and device.usage() == before
    assert ring.describe().startswith("5 x ") and "all after" in ring.describe()


def test_the_first_background_slot_comes_before_the_rest_and_close_stops_the_thread(
        device: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    before = device.usage()
    first = threading.Event()
    inject(monkeypatch, device, delay=0.25, hold=first)
    ring = StagingRing(device, 20, 4096, source="alloc", provision="background")  # ~5 s to provision all
    # the constructor did not wait for a slot: none can be made until ``first`` is set, so one that waited
    # would return only after the hold's 10 s, with a slot (was provision_s < 0.25: a loaded box's margin)
    assert ring.slots == [] and ring.provision_s < 10
    first.set()
    slot = ring.acquire()
    assert len(ring.slots) < 20
    ring.release(slot)
    ring.close()
    assert not ring._thread.is_alive() and 1 <= len(ring.slots) < 20
    assert ring.provisioned_s is None and "of 20 x" in ring.describe() and "stopped at close" in ring.describe()
    assert device.usage() == before


@pytest.mark.parametrize("source", ["alloc", "anon"])
def test_a_background_provisioning_failure_is_raised_by_acquire_and_close_frees_the_rest(
        device: Any, monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    before = device.usage()
    gate = threading.Event()
    inject(monkeypatch, device, fail_at=3, gate=gate)
    ring = StagingRing(device, 5, 4096, source=source, provision="background")
    first, second = ring.acquire(), ring.acquire()  # held by readers when the third slot fails
    gate.set()
    with pytest.raises(DeviceError, match="refused on purpose") as err:
        ring.acquire()  # would wait forever for a third slot
    if sys.version_info >= (3, 11):  # exception notes
        assert any("provisioning slot 3 of 5" in note for note in err.value.__notes__)
    with pytest.raises(DeviceError):
        ring.acquire(threading.Event())  # every later waiter too, also the polling kind
    ring.release(first)
    ring.release(second)
    with pytest.raises(DeviceError):
        ring.acquire()  # a released slot does not hide the failure
    ring.close()
    assert len(ring.slots) == 2 and "failed: DeviceError: test:0: " in ring.describe()
    assert device.usage() == before


def test_a_background_failure_wakes_a_thread_already_waiting(device: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    inject(monkeypatch, device, fail_at=2, gate=gate)
    ring = StagingRing(device, 3, 4096, source="alloc", provision="background")
    held = ring.acquire()
    got: list[BaseException] = []

    def wait() -> None:
        try:
            ring.acquire()
        except DeviceError as exc:
            got.append(exc)

    waiters = [threading.Thread(target=wait) for _ in range(3)]
    for w in waiters:
        w.start()
    time.sleep(0.05)  # all three waiting for the second slot
    gate.set()
    for w in waiters:
        w.join(5)
    assert len(got) == 3 and not any(w.is_alive() for w in waiters)
    ring.release(held)
    ring.close(strict=False)  # the error path
    assert len(ring.slots) == 1


@pytest.mark.parametrize("prefix", ["cuda", "hip"])
def test_background_ring_registers_one_block_per_slot_and_releases_each(prefix: str) -> None:
    dev, fake = open_fake(prefix)
    fake.calls.clear()
    ring = StagingRing(dev, 4, 3 << 20, provision="background")
    held = [ring.acquire() for _ in range(4)]
    for slot in held:
        ring.release(slot)
    ring.close()
    registered = [args for name, args in fake.calls if name.endswith("HostRegister")]
    assert len(registered) == 4 and all(a % HUGE_PAGE == 0 and n == 3 << 20 for a, n, _ in registered)
    names = fake.names()
    assert names.count("HostUnregister") == 4 and names.count("EventCreate") == names.count("EventDestroy") == 4
    assert not fake.registered and not fake.events and not fake.host_mem and ring.how == "registered"


def test_ring_rejects_an_unknown_provision(device: Any) -> None:
    with pytest.raises(ValueError, match="staging provision"):
        StagingRing(device, 2, 4096, provision="lazy")


# --- provision=readers: each slot made by the reader that first takes it ---------------------------------


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("piece", [4096 + 5, 3 * 4096, 12289, HUGE_PAGE + 12289])  # odd, page multiple, > a huge page
@pytest.mark.parametrize("provision, says", [("readers", "made by the reader that first took it"),
                                             ("first-read", "faulted in by its first read, then registered")])
def test_a_ring_whose_readers_make_its_slots_lands_exact_bytes_and_gives_everything_back(
        device: Any, threads: int, piece: int, provision: str, says: str) -> None:
    before = device.usage()
    data = pattern(3 * piece + 4096 * 7 + 123, seed=threads + piece)
    ring = StagingRing(device, 3, piece, provision=provision)
    assert ring.slots == [] and ring.nbytes == 0  # nothing made before the first acquire
    dst = push_through_ring(device, ring, data, piece, threads)
    ring.close()
    device.synchronize()
    assert device.read_back(dst, 0, len(data)) == data
    device.free(dst)
    assert device.usage() == before  # every slot made (and registered) was released
    assert 1 <= len(ring.slots) <= 3 and ring.first_slot_s is not None and ring.reader_provision_s > 0
    assert ring.deferred_made == (len(ring.slots) if provision == "first-read" else 0)
    # the registering part of the slot-making, timed on its own (first-read only: readers register in _make)
    assert (0 < ring.register_s <= ring.reader_provision_s) if provision == "first-read" else ring.register_s == 0
    assert ring.locked or device.info().backend.startswith("host")  # mlock may be refused to a user
    assert says in ring.describe()


def test_readers_ring_makes_only_the_slots_taken_each_its_own_memory(device: Any) -> None:
    before = device.usage()
    ring = StagingRing(device, 5, 4096 + 3, provision="readers")
    held = [ring.acquire() for _ in range(2)]
    assert len(ring.slots) == 2 and ring.nbytes == 2 * (4096 + 3)
    for k, slot in enumerate(held):
        slot.view[:] = bytes([k + 7]) * slot.nbytes
    assert [bytes(s.view) for s in held] == [bytes([k + 7]) * (4096 + 3) for k in range(2)]
    for slot in held:
        ring.release(slot)
    again = ring.acquire()  # a made slot comes back before an unmade one is made
    assert again in held and len(ring.slots) == 2
    ring.release(again)
    ring.close()
    assert device.usage() == before and ring.describe().startswith("2 of 5 x ")


def test_a_readers_ring_failing_to_make_a_slot_raises_in_that_reader_and_frees_the_rest(
        device: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    before = device.usage()
    inject(monkeypatch, device, fail_at=2)
    ring = StagingRing(device, 3, 4096, source="alloc", provision="readers")
    first = ring.acquire()
    with pytest.raises(DeviceError, match="refused on purpose"):
        ring.acquire()
    ring.release(first)
    ring.close()
    assert device.usage() == before and len(ring.slots) == 1


# --- provision=first-read: a bare mapping, faulted in by its first fill, then registered --------------


def resident_pages(view: memoryview) -> int:
    """Pages of ``view`` (page-aligned) resident now, by mincore(2)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    addr = np.frombuffer(view, dtype=np.uint8).ctypes.data
    pages = -(-len(view) // mmap.PAGESIZE)
    vec = (ctypes.c_ubyte * pages)()
    assert libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(len(view)), vec) == 0, ctypes.get_errno()
    return sum(b & 1 for b in vec)


@pytest.mark.parametrize("prefix", ["cuda", "hip"])
def test_a_first_read_slot_is_neither_populated_nor_registered_until_its_first_fill(prefix: str) -> None:
    dev, fake = open_fake(prefix)
    ring = StagingRing(dev, 2, 3 * HUGE_PAGE, provision="first-read")
    fake.calls.clear()
    slot = ring.acquire()
    assert not [c for c in fake.names() if c.endswith("HostRegister")] and slot.pending is not None
    assert resident_pages(slot.view) == 0  # no MADV_POPULATE_WRITE: the fill is what faults it in
    assert ring.how == "pending" and not ring.locked and "NOT yet registered" in ring.describe()
    slot.view[: HUGE_PAGE + 5] = b"\x5a" * (HUGE_PAGE + 5)  # a short first fill: a window smaller than the slot
    ring.filled(slot)
    registered = [args for name, args in fake.calls if name.endswith("HostRegister")]
    assert len(registered) == 1 and registered[0][1] == 3 * HUGE_PAGE and registered[0][0] % HUGE_PAGE == 0
    assert bytes(slot.view[: HUGE_PAGE + 5]) == b"\x5a" * (HUGE_PAGE + 5)  # registering kept what was read
    ring.release(slot)
    again = ring.acquire()  # the same slot, locked once and for all
    assert again is slot and again.pending is None
    ring.filled(again)
    ring.release(again)
    assert len([c for c in fake.names() if c.endswith("HostRegister")]) == 1 and ring.how == "registered"
    ring.close()
    assert not fake.registered and fake.names().count("HostUnregister") == 1


@pytest.mark.parametrize("prefix", ["cuda", "hip"])
def test_a_first_read_slot_released_unsaid_is_registered_before_it_is_reused(prefix: str) -> None:
    dev, fake = open_fake(prefix)
    ring = StagingRing(dev, 1, 4096, provision="first-read")
    slot = ring.acquire()
    slot.view[:] = b"x" * 4096
    ring.release(slot)  # the caller never called filled(): the ring registers it here
    assert slot.pending is None and len(fake.registered) == 1
    ring.close()
    assert not fake.registered


@pytest.mark.parametrize("prefix", ["cuda", "hip"])
def test_a_refused_first_read_registration_leaves_that_slot_unlocked_and_allocates_the_rest(prefix: str) -> None:
    dev, fake = open_fake(prefix, fail={f"{prefix}HostRegister": "ErrorMemoryAllocation"})
    data = pattern(9 * 4096 + 77, seed=5)
    ring = StagingRing(dev, 3, 4096 + 3, provision="first-read")
    dst = push_through_ring(dev, ring, data, 4096 + 3, 1)  # one thread: the first slot is refused first
    ring.close()
    dev.synchronize()
    assert dev.read_back(dst, 0, len(data)) == data  # an unlocked slot still lands the bytes
    assert ring.deferred_made == 1 and ring.how == "unlocked" and not ring.locked
    assert "NOT page-locked" in ring.describe() and not fake.host_mem  # every allocation given back
    anon = StagingRing(dev, 2, 4096, provision="first-read", source="anon")  # the mapping only: every slot tried
    for _ in range(2):
        slot = anon.acquire()
        anon.filled(slot)
    assert anon.deferred_made == 2 and anon.how == "unlocked"
    anon.close()
