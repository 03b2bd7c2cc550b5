"""``mapping="one"`` (upload/slab.py): every first-read slot of a staging ring carved from one mapping
made with the ring, against ``mapping="each"`` (a mapping per slot, made by its reader)."""
from __future__ import annotations

import mmap
import weakref
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from workbench.errors import DeviceError
from workbench.upload.host import HostDevice
from workbench.upload.staging import HUGE_PAGE, StagingRing

from test_upload_devices import open_fake, pattern
from test_upload_staging import device, push_through_ring, resident_pages  # noqa: F401 - ``device``: a fixture

PREFIXES = pytest.mark.parametrize("prefix", ["cuda", "hip"])


def address(view: memoryview) -> int:
    return np.frombuffer(view, dtype=np.uint8).ctypes.data


class Mappings(SimpleNamespace):
    """``mmap.mmap`` objects made (``made``), closed (``closed``) and still alive (:meth:`alive`)."""

    made: int
    closed: int
    refs: list[weakref.ref]

    def alive(self) -> int:
        return sum(r() is not None for r in self.refs)  # a dead one was unmapped (its dealloc munmaps)


@pytest.fixture
def mappings(monkeypatch: pytest.MonkeyPatch) -> Mappings:
    """Every ``mmap.mmap`` made while the test runs, counted."""
    seen = Mappings(made=0, closed=0, refs=[])

    class Counted(mmap.mmap):
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            seen.made += 1
            m = super().__new__(cls, *args, **kwargs)
            seen.refs.append(weakref.ref(m))
            return m

        def close(self) -> None:
            seen.closed += 1
            try:
                super().close()
            except BufferError:
                del self  # as the product's own frames do: the error's traceback keeps this frame
                raise

    monkeypatch.setattr(mmap, "mmap", Counted)
    return seen


def take(ring: StagingRing, n: int, fill: bool = True) -> list[Any]:
    """``n`` slots taken at once, each (``fill``) written to its end and said filled."""
    slots = [ring.acquire() for _ in range(n)]
    for k, slot in enumerate(slots):
        if fill:
            slot.view[:] = bytes([k + 1]) * slot.nbytes
            ring.filled(slot)
    return slots


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("piece", [1, 4096 + 5, 3 * 4096, HUGE_PAGE, HUGE_PAGE + 12289])
def test_a_ring_carved_from_one_mapping_lands_exact_bytes_and_gives_everything_back(
        device: Any, threads: int, piece: int, mappings: Mappings) -> None:
    before = device.usage()
    data = pattern(3 * piece + 4096 * 7 + 123, seed=threads + piece)  # odd length: a short last piece
    ring = StagingRing(device, 3, piece, provision="first-read", mapping="one")
    assert ring.slots == [] and ring.nbytes == 0 and mappings.made == 1  # the one mapping, made with the ring
    dst = push_through_ring(device, ring, data, piece, threads)
    ring.close()
    device.synchronize()
    assert device.read_back(dst, 0, len(data)) == data
    device.free(dst)
    assert device.usage() == before and (mappings.made, mappings.closed) == (1, 1)
    assert ring.deferred_made == len(ring.slots) and 0 < ring.register_s <= ring.reader_provision_s
    assert ring.locked or device.info().backend.startswith("host")  # mlock may be refused to a user
    assert ring.first_slot_s is not None and ring.nbytes == len(ring.slots) * piece
    assert "carved by the reader that first took it from one mapping made with the ring" in ring.describe()


@PREFIXES
def test_each_carved_slot_starts_on_a_huge_page_and_no_two_share_a_page(prefix: str) -> None:
    dev, fake = open_fake(prefix)
    size = HUGE_PAGE + 5  # a stride of two huge pages
    ring = StagingRing(dev, 4, size, provision="first-read", mapping="one")
    slots = take(ring, 4)
    addrs = [address(s.view) for s in slots]
    stride = 2 * HUGE_PAGE
    assert all(a % HUGE_PAGE == 0 for a in addrs)
    assert [a - addrs[0] for a in addrs] == [i * stride for i in range(4)]  # one mapping, slot i at i strides
    assert [set(bytes(s.view)) for s in slots] == [{k + 1} for k in range(4)]  # no slot wrote into another
    registered = sorted(args[:2] for name, args in fake.calls if name.endswith("HostRegister"))
    assert registered == [(a, size) for a in addrs]  # each slice on its own: no range registered twice
    for slot in slots:
        ring.release(slot)
    ring.close()


@PREFIXES
def test_nothing_is_populated_or_registered_before_a_carved_slots_first_fill(prefix: str) -> None:
    dev, fake = open_fake(prefix)
    fake.calls.clear()
    ring = StagingRing(dev, 3, 3 * HUGE_PAGE, provision="first-read", mapping="one")
    assert fake.names() == ["EventCreate"] * 3  # the fences, made with the ring; nothing registered
    first, second = ring.acquire(), ring.acquire()
    assert resident_pages(first.view) == resident_pages(second.view) == 0  # no MADV_POPULATE_WRITE
    assert ring.how == "pending" and not ring.locked and "NOT yet registered" in ring.describe()
    first.view[: HUGE_PAGE + 5] = b"\x5a" * (HUGE_PAGE + 5)  # a short first fill
    ring.filled(first)
    assert resident_pages(second.view) == 0  # the neighbour's fill faulted none of its pages
    registered = [args for name, args in fake.calls if name.endswith("HostRegister")]
    assert len(registered) == 1 and registered[0][:2] == (address(first.view), 3 * HUGE_PAGE)
    assert bytes(first.view[: HUGE_PAGE + 5]) == b"\x5a" * (HUGE_PAGE + 5)
    assert second.pending is not None and fake.names().count("EventCreate") == 3  # readers make none
    for slot in (first, second):
        ring.release(slot)  # the second is registered here, before anyone reuses it
    ring.close()
    assert not fake.registered and not fake.events


@PREFIXES
def test_a_refused_registration_leaves_a_carved_slot_unlocked_and_the_ring_lands_exact_bytes(
        prefix: str, mappings: Mappings) -> None:
    dev, fake = open_fake(prefix, fail={f"{prefix}HostRegister": "ErrorMemoryAllocation"})
    data = pattern(9 * 4096 + 77, seed=5)
    ring = StagingRing(dev, 3, 4096 + 3, provision="first-read", mapping="one")
    dst = push_through_ring(dev, ring, data, 4096 + 3, 1)  # one thread: the first slot is refused first
    held = ring.nbytes
    ring.close()
    dev.synchronize()
    assert dev.read_back(dst, 0, len(data)) == data  # the unlocked carved slot still lands the bytes
    assert ring.deferred_made == 1 and ring.how == "unlocked" and not ring.locked
    assert held == len(ring.slots) * (4096 + 3) and (mappings.made, mappings.closed) == (1, 1)
    assert fake.names().count("HostAlloc") == len(ring.slots) - 1  # the later slots: alloc_pinned
    assert "NOT page-locked" in ring.describe() and not fake.host_mem and not fake.events
    anon = StagingRing(dev, 2, 4096, provision="first-read", source="anon", mapping="one")  # every slot tried
    for slot in take(anon, 2):
        anon.release(slot)
    assert anon.deferred_made == 2 and anon.how == "unlocked" and mappings.made == 2
    anon.close()


def test_host_without_mlock_a_carved_slot_stays_unlocked_and_lands_exact_bytes(
        monkeypatch: pytest.MonkeyPatch, mappings: Mappings) -> None:
    import workbench.upload.host as host

    monkeypatch.setattr(host, "_mlock", lambda addr, n: False)  # as under RLIMIT_MEMLOCK, without root
    dev = host.HostDevice()
    data = pattern(5 * 8192 + 11, seed=3)
    ring = StagingRing(dev, 2, 8192, provision="first-read", source="anon", mapping="one")
    for slot in take(ring, 2):  # both slots made (and refused) before the readers run
        ring.release(slot)
    dst = push_through_ring(dev, ring, data, 8192, 2)
    ring.close()
    assert dev.read_back(dst, 0, len(data)) == data and ring.how == "unlocked" and ring.deferred_made == 2
    assert mappings.made == 1  # every slot tried was carved from the ring's one mapping


@PREFIXES
@pytest.mark.parametrize("mapping, per_slot", [("one", False), ("each", True)])
def test_close_unregisters_every_registered_slot_once_and_unmaps_once(
        prefix: str, mapping: str, per_slot: bool, mappings: Mappings) -> None:
    dev, fake = open_fake(prefix)
    fake.calls.clear()
    ring = StagingRing(dev, 4, 4096 + 3, provision="first-read", mapping=mapping)
    for slot in take(ring, 3):  # one slot never taken
        ring.release(slot)
    assert mappings.made == (3 if per_slot else 1)  # a mapping per slot made, or one per ring
    ring.close()
    ring.close()  # idempotent
    names = fake.names()
    assert names.count("HostRegister") == names.count("HostUnregister") == 3 and not fake.registered
    assert mappings.closed == mappings.made
    assert names.count("EventCreate") == names.count("EventDestroy") == (3 if per_slot else 4)  # one: every fence
    assert not fake.events


@PREFIXES
@pytest.mark.parametrize("mapping", ["one", "each"])
def test_close_with_a_view_still_held_raises_when_strict_and_unmaps_when_the_view_goes(
        prefix: str, mapping: str, mappings: Mappings) -> None:
    for strict in (True, False):
        mappings.refs.clear()
        mappings.made = 0
        dev, fake = open_fake(prefix)
        ring = StagingRing(dev, 3, 4096, provision="first-read", mapping=mapping)
        slots = take(ring, 2)
        assert mappings.made == (1 if mapping == "one" else 2)
        kept = slots[1].view[:10]
        for slot in slots:
            ring.release(slot)
        if strict:
            with pytest.raises(BufferError):
                ring.close()
        else:
            ring.close(strict=False)  # the error path: unmapped when the last view goes
        assert not fake.registered and not fake.events  # every registration undone all the same
        kept[:3] = b"abc"  # still mapped while the view lives
        assert bytes(kept[:3]) == b"abc" and mappings.alive() == 1
        kept.release()
        assert mappings.alive() == 0  # strict too: the BufferError's traceback does not keep the mapping alive


@PREFIXES
def test_a_fence_failing_at_ring_creation_gives_everything_back(prefix: str, mappings: Mappings) -> None:
    dev, fake = open_fake(prefix)
    real, calls = dev.create_fence, []

    def failing() -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise DeviceError("test:0", "create_fence", "ErrorInjected", "third fence refused")
        return real()

    dev.create_fence = failing
    with pytest.raises(DeviceError, match="third fence refused"):
        StagingRing(dev, 4, 4096, provision="first-read", mapping="one")
    assert not fake.events and (mappings.made, mappings.closed) == (1, 1)


def test_mapping_means_nothing_outside_first_read_from_a_mapping(mappings: Mappings) -> None:
    dev = HostDevice()
    for provision, source in (("upfront", "auto"), ("background", "auto"), ("readers", "auto"),
                              ("first-read", "alloc"), ("first-read", "wc")):
        made = []
        for mapping in ("one", "each"):
            mappings.made = 0
            ring = StagingRing(dev, 3, 4096, provision=provision, source=source, mapping=mapping)
            for slot in take(ring, 3):
                ring.release(slot)
            assert ring.slab is None and ring.deferred_made == 0, (provision, source)
            made.append((mappings.made, ring.how, ring.nbytes))
            ring.close()
        assert made[0] == made[1], (provision, source)  # the host's alloc_pinned maps too: as many
    with pytest.raises(ValueError, match="staging mapping 'many'"):
        StagingRing(dev, 2, 4096, provision="first-read", mapping="many")


def test_a_carved_slot_counts_once_taken_an_untaken_one_never(mappings: Mappings) -> None:
    dev = HostDevice()
    ring = StagingRing(dev, 5, 4096 + 3, provision="first-read", mapping="one")
    assert ring.nbytes == 0 and ring.how == "none" and not ring.locked
    held = take(ring, 2, fill=False)
    assert ring.nbytes == 2 * (4096 + 3) and ring.how == "pending" and ring.provisioned_s is None
    assert mappings.made == 1 and ring.slab.nbytes == 5 * HUGE_PAGE  # reserved, untouched: not counted
    for slot in held:
        ring.release(slot)  # registered here (filled unsaid)
    assert ring.how in ("registered", "unlocked") and ring.deferred_made == 2
    assert ring.describe().startswith("2 of 5 x ")
    ring.close()
