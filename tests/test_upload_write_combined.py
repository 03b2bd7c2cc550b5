"""Write-combined staging (``staging=wc``): the flag reaches the allocation call on the CUDA and HIP fakes,
the slots land exact bytes, the CPU never reads them back (verification reads the device into its own
memory; a read-back into write-combined staging is refused), and the host backend says it has none."""
from __future__ import annotations

import pytest

from workbench.io.pagecache import prepare
from workbench.measure.run.verify import verify_placements
from workbench.strategies import get_strategy
from workbench.upload import device_availability, open_device
from workbench.upload.staging import StagingRing, size_ring

from device_fakes import DeferredCopyDevice
from test_upload_devices import FakeRuntime, open_fake, pattern

ALLOC = {"cuda": "cudaHostAlloc", "hip": "hipHostMalloc"}


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


@pytest.mark.parametrize("prefix", ["cuda", "hip"])
def test_the_write_combined_flag_reaches_the_allocation_call(prefix):
    dev, fake = open_fake(prefix)
    wc = dev.alloc_pinned(4096, write_combined=True)
    plain = dev.alloc_pinned(4096)
    allocs = [args for name, args in fake.calls if name == ALLOC[prefix]]
    assert allocs == [(4096, FakeRuntime.WRITE_COMBINED), (4096, 0)]
    assert wc.write_combined and not plain.write_combined
    dev.free_pinned(wc)
    dev.free_pinned(plain)
    assert not fake.write_combined and not fake.host_mem
    dev.close()


@pytest.mark.parametrize("provision", ["upfront", "background"])
@pytest.mark.parametrize("prefix", ["cuda", "hip"])
def test_a_wc_ring_allocates_write_combined_slots_and_lands_exact_bytes(prefix, provision):
    dev, fake = open_fake(prefix)
    ring = StagingRing(dev, 3, 8192, source="wc", provision=provision)
    data = pattern(5 * 8192 + 77, seed=5)
    dst = dev.alloc(len(data))
    for off in range(0, len(data), 8192):
        with ring.slot() as slot, slot.view[: min(8192, len(data) - off)] as view:
            view[:] = data[off : off + len(view)]
            dev.copy_h2d(dst, off, view, asynchronous=True)
    ring.close()
    assert ring.how == "write-combined" and "write-combined" in ring.describe()
    fact = ring.write_combined_fact(prefix)
    assert (fact.done, fact.total, fact.state) == (3, 3, "ON")
    assert not any(name.endswith("HostRegister") for name, _ in fake.calls)  # no mmap + register path
    assert all(flags == FakeRuntime.WRITE_COMBINED for name, (_, flags) in
               ((n, a) for n, a in fake.calls if n == ALLOC[prefix]))
    assert dev.read_back(dst, 0, len(data)) == data
    dev.close()


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "hip"])
def test_a_wc_ring_on_a_real_device(backend):
    avail = device_availability(backend)
    if not avail:
        pytest.skip(f"{backend}: {avail.reason}")
    dev = open_device(backend)
    try:
        ring = StagingRing(dev, 2, 1 << 20, source="wc")
        data = pattern(3 * (1 << 20) + 5, seed=2)
        dst = dev.alloc(len(data))
        for off in range(0, len(data), 1 << 20):
            with ring.slot() as slot, slot.view[: min(1 << 20, len(data) - off)] as view:
                view[:] = data[off : off + len(view)]  # the CPU writes write-combined memory, never reads it
                dev.copy_h2d(dst, off, view, asynchronous=True)
        ring.close()
        assert ring.how == "write-combined" and ring.write_combined_fact(backend).state == "ON"
        assert dev.read_back(dst, 0, len(data)) == data
        dev.free(dst)
    finally:
        dev.close()


def test_a_read_back_into_write_combined_staging_is_refused():
    dev, fake = open_fake("cuda")
    buf = dev.alloc(64)
    wc = dev.alloc_pinned(64, write_combined=True)
    with pytest.raises(ValueError, match="must never read write-combined"):
        dev.read_back_into(buf, 0, wc.view)
    plain = dev.alloc_pinned(64)
    dev.read_back_into(buf, 0, plain.view)  # ordinary pinned memory: fine
    dev.free_pinned(wc)
    dev.free_pinned(plain)
    dev.close()


@pytest.mark.parametrize("name,params", [("experts", {"staging": "wc"}), ("ring", {"staging": "wc", "direct": "off"}),
                                         ("lanes", {"upload": "pinned", "staging": "wc"}),
                                         ("pread", {"upload": "pinned", "staging": "wc"})])
def test_strategies_stage_through_write_combined_slots_and_verify_from_the_device(synth_model, name, params):
    index = synth_model("gguf", "moe", alignment=64)
    prepare(index.path, "warm")
    dev, fake = open_fake("cuda")
    try:
        result = get_strategy(name)(**params).load(index, dev)
        wc_allocs = [a for n, a in fake.calls if n == "cudaHostAlloc" and a[1] == FakeRuntime.WRITE_COMBINED]
        assert wc_allocs, "the WC flag never reached cudaHostAlloc"
        fact = result.engaged_by("write_combined")
        assert fact is not None and fact.state == "ON", str(fact)
        # verification reads the device into its own pinned buffer: the fake fails a D2H copy into WC memory
        n_d2h = len(fake.calls)
        report = verify_placements(index, dev, result.placements)
        assert report.ok and report.checked == len(index), report.detail
        reads = [a for n, a in fake.calls[n_d2h:] if n == "cudaMemcpy" and a[3] == 2]
        assert reads and not any(fake.in_write_combined(a[0], a[2]) for a in reads)
    finally:
        dev.close()


@pytest.mark.parametrize("name,params", [("experts", {"staging": "wc", "direct": "off"}), ("ring", {"staging": "wc", "direct": "off"}),
                                         ("lanes", {"upload": "pinned", "staging": "wc"})])
def test_the_host_has_no_write_combined_memory_and_says_so(synth_model, name, params):
    index = synth_model("gguf", "moe", alignment=64)
    dev = open_device("host")
    result = get_strategy(name)(**params).load(index, dev)
    assert verify_placements(index, dev, result.placements).ok
    fact = result.engaged_by("write_combined")
    assert fact.state == "INERT" and fact.note == "unsupported on host: ordinary page-locked slots", str(fact)


def test_wc_slots_are_never_refilled_before_their_copies_ran():
    # the deferred device copies only when a fence is waited on: a slot refilled early lands wrong bytes
    dev = DeferredCopyDevice()
    ring = StagingRing(dev, 2, 4096, source="wc")
    data = pattern(9 * 4096, seed=9)
    dst = dev.alloc(len(data))
    for off in range(0, len(data), 4096):
        with ring.slot() as slot:
            slot.view[:] = data[off : off + 4096]
            dev.copy_h2d(dst, off, slot.view, asynchronous=True)
    ring.close()
    assert dev.read_back(dst, 0, len(data)) == data


@pytest.mark.parametrize("slots,slot_bytes,windows,expected", [
    (20, 8 << 20, [8 << 20] * 256, (20, 8 << 20)),  # a 2 GiB model: the ring as asked
    (20, 8 << 20, [3 << 20], (1, 3 << 20)),  # one small window: one slot its size
    (20, 8 << 20, [8 << 20] * 3 + [4096], (4, 8 << 20)),  # the bytes to load, rounded up to a whole slot
    (20, 8 << 20, [8 << 20, (8 << 20) - 4096], (2, 8 << 20)),
    (20, 8 << 20, [100], (1, 4096)),  # at least a page
    (6, 1 << 20, [1 << 20] * 40, (6, 1 << 20)),
])
def test_a_ring_is_sized_to_the_load(slots, slot_bytes, windows, expected):
    got = size_ring(slots, slot_bytes, windows)
    assert got == expected
    assert got[0] * got[1] < max(sum(windows), 4096) + got[1]  # less than one slot over what it reads


def test_on_host_memory_the_ring_says_its_write_combined_slots_were_not_needed(synth_model):
    index = synth_model("gguf", "moe", alignment=64)
    dev = open_device("host")
    result = get_strategy("ring")(staging="wc").load(index, dev)  # direct: no staging at all
    fact = result.engaged_by("write_combined")
    assert fact.state == "INERT" and "read straight into host memory" in fact.note, str(fact)
