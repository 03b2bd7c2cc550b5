"""The ``ring`` strategy: its plans, its gate, one device allocation, its tallies, its failure path.
(Byte-exactness on every format, layout and cache state is the shared suite's; fences are tested on the
deferred-copy device in test_strategies_behaviour.py.)"""
from __future__ import annotations

import pytest

from workbench.errors import CacheStateError
from workbench.formats.index import PAGE_SIZE, TensorInfo
from workbench.io.pagecache import prepare
from workbench.measure.verify import verify_placements
from workbench.strategies import get_strategy
from workbench.strategies.ring import plan_shares, plan_windows
from workbench.upload.host import HostDevice

from device_fakes import DeferredCopyDevice

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


def tensors(sizes, first=1231, gap=29):
    out, off = [], first
    for i, n in enumerate(sizes):
        out.append(TensorInfo(f"t{i}", off, n, "u8", (n,)))
        off += n + gap
    return out


def covered(windows, ts):
    """Every tensor byte → how many pieces hold it (must be exactly one each)."""
    got = {i: [] for i in range(len(ts))}
    for w in windows:
        for p in w.pieces:
            assert w.lo <= ts[p.tensor].offset + p.dst and ts[p.tensor].offset + p.dst + p.nbytes <= w.hi
            assert p.start == ts[p.tensor].offset + p.dst - w.lo
            got[p.tensor].append((p.dst, p.dst + p.nbytes))
    return {i: sorted(spans) for i, spans in got.items()}


def test_windows_hold_every_byte_once_and_split_tensors_at_their_edges():
    ts = tensors([3, (3 << 20) + 5, 0, 1, 5 << 20, 4097])
    lo, hi = ts[0].offset, ts[-1].offset + ts[-1].nbytes
    windows = plan_windows(ts, lo, hi, 1 << 20)
    assert windows[0].lo % PAGE_SIZE == 0 and all(w.hi - w.lo <= 1 << 20 for w in windows)
    assert all(a.hi <= b.lo for a, b in zip(windows, windows[1:]))  # in file order, disjoint
    for i, spans in covered(windows, ts).items():
        joined = 0
        for a, b in spans:
            assert a == joined  # contiguous, no overlap
            joined = b
        assert joined == ts[i].nbytes
    assert sum(w.nbytes for w in windows) == sum(t.nbytes for t in ts)


def test_shares_are_contiguous_page_aligned_and_cover_the_region():
    ts = tensors([(7 << 20) + 3, 11, (2 << 20) + 1])
    lo, hi = ts[0].offset, ts[-1].offset + ts[-1].nbytes
    shares = plan_shares(ts, lo, hi, 3, 1 << 20)
    assert len(shares) == 3
    starts = [s[0].lo for s in shares]
    assert all(x % PAGE_SIZE == 0 for x in starts) and starts == sorted(starts)
    for a, b in zip(shares, shares[1:]):
        assert a[-1].hi <= b[0].lo  # one contiguous stretch per reader
    windows = [w for s in shares for w in s]
    assert sum(w.nbytes for w in windows) == sum(t.nbytes for t in ts)
    assert all(len(spans) >= 1 for spans in covered(windows, ts).values())
    assert plan_shares(ts, lo, hi, 64, 1 << 20)[-1]  # more readers than pages: no empty share


def set_cache(path, state):
    try:
        prepare(path, state)
    except CacheStateError as exc:
        pytest.skip(f"cache state unreachable here: {exc}")


def load(index, device=None, **params):
    dev = device or HostDevice()
    result = get_strategy("ring")(**params).load(index, dev)
    report = verify_placements(index, dev, result.placements)
    assert report.ok, f"{report.first_mismatch}: {report.detail}"
    return result


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_the_gate_picks_the_plan(cache, raw_model):
    index = raw_model([(3 << 20) + 333, 5, (2 << 20) + 77, 4097], first=1231, gap=29, tail=17)
    set_cache(index.path, cache)
    result = load(index, threads=3, cold_threads=2, slot_mib=1, cold_mib=2)
    readers = result.engaged_by("ring_readers")
    if cache == "warm":
        assert readers.note.startswith("warm: 100% resident") and "windows of 1 MiB shared" in readers.note
        assert (readers.done, readers.total, result.path["readers"]) == (3, 3, 3)
        assert result.engaged_by("pinned_staging").total == 6  # readers + spare, sized: 5.2 MiB fill 6 slots
    else:
        assert readers.note.startswith("cold: 0% resident") and "2 MiB reads" in readers.note
        assert (readers.done, readers.total, result.path["readers"]) == (2, 2, 2)
    assert result.path["copy_from"] == "pinned"
    assert {"wait_us", "read_us", "issue_us", "release_us", "alloc_us"} <= set(result.counters)
    assert result.phases["staging"] > 0 and result.counters["residency_probes"] == 1


def test_one_device_allocation_or_one_per_tensor(raw_model):
    index = raw_model([5, (1 << 20) + 3, 0, 4097])
    dev = HostDevice()
    shared = load(index, dev, threads=2, slot_mib=1)
    bases = {p.buffer.handle.base.ctypes.data for p in shared.placements}  # numpy views of one array
    assert len(bases) == 1 and shared.engaged_by("one_allocation").done == 1
    apart = load(index, dev, threads=2, slot_mib=1, arena=False)
    assert len({p.buffer.ptr for p in apart.placements}) == len(index) and apart.engaged_by("one_allocation") is None


def test_staging_from_alloc_pinned_when_asked(raw_model):
    index = raw_model([(2 << 20) + 1, 7])
    result = load(index, threads=2, slot_mib=1, spare=0, staging="alloc")
    assert "alloc_pinned" in result.engaged_by("pinned_staging").note


def test_a_failing_reader_stops_the_load_and_releases_everything(raw_model, monkeypatch):
    import workbench.strategies.ring as ring

    index = raw_model([(4 << 20) + 1, 7, (3 << 20) + 5])
    calls = []

    def failing(fd, view, offset, path=""):
        calls.append(offset)
        if len(calls) == 3:
            raise OSError(5, "injected read error")
        return real(fd, view, offset, path)

    real = ring.pread_into
    monkeypatch.setattr(ring, "pread_into", failing)
    dev = DeferredCopyDevice()
    with pytest.raises(OSError, match="injected read error"):
        get_strategy("ring")(threads=2, slot_mib=1, gate=0.0).load(index, dev)
    assert dev.in_flight == 0  # every copy issued ran before the staging memory went back
    assert not dev._arrays  # the device buffers of the failed load were freed


def test_params_are_checked():
    from workbench.errors import ParamError

    for bad in ({"threads": 0}, {"slot_mib": 0}, {"spare": -1}, {"gate": 1.5}, {"staging": "tmpfs"},
                {"provision": "lazy"}):
        with pytest.raises(ParamError):
            get_strategy("ring")(**bad)


def test_background_provisioning_on_the_deferred_copy_device(raw_model):
    # every slot refilled only after its copies ran, with slots arriving while the readers run
    index = raw_model([(4 << 20) + 1, 7, (3 << 20) + 5, 4097])
    dev = DeferredCopyDevice()
    result = load(index, dev, threads=3, slot_mib=1, gate=0.0, provision="background")
    staging = result.engaged_by("pinned_staging")
    assert "one by one in the background (first slot after" in staging.note
    assert 1 <= staging.total <= 3 + 4 and dev.in_flight == 0 and dev.usage().registered == 0


def test_a_background_provisioning_failure_fails_the_load_and_releases_everything(raw_model, monkeypatch):
    from workbench.errors import DeviceError

    index = raw_model([(4 << 20) + 1, 7, (3 << 20) + 5])
    dev = DeferredCopyDevice()
    real, calls = dev.register_host, []

    def failing(view):
        calls.append(len(view))
        if len(calls) == 1:  # the first slot: no reader can finish the load without one
            raise DeviceError("test:0", "register_host", "ErrorInjected", "first slot refused")
        return real(view)

    monkeypatch.setattr(dev, "register_host", failing)
    with pytest.raises(DeviceError, match="first slot refused"):
        get_strategy("ring")(threads=2, slot_mib=1, gate=0.0, spare=2, provision="background").load(index, dev)
    assert dev.in_flight == 0 and not dev._arrays
    assert dev.usage().registered == 0 and dev.usage().pinned == 0


def test_a_small_model_gets_a_ring_no_larger_than_it(raw_model):
    index = raw_model([(1 << 20) + 5, 3000])  # 1 MiB: the default ring is 20 x 8 MiB
    set_cache(index.path, "warm")
    result = load(index)
    fact = result.engaged_by("pinned_staging")
    assert fact.total == 1 and fact.note.startswith("1 x 1.00") and fact.state == "ON", str(fact)
