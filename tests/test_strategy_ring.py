"""The ``ring`` strategy: its plans, its gate, one device allocation, its tallies, its failure path.
(Byte-exactness on every format, layout and cache state is the shared suite's; fences are tested on the
deferred-copy device in test_strategies_behaviour.py.)"""
from __future__ import annotations

import threading
import time

import pytest

from workbench.errors import CacheStateError
from workbench.formats.index import PAGE_SIZE, TensorInfo
from workbench.io.pagecache import prepare
from workbench.measure.run.verify import verify_placements
from workbench.strategies import get_strategy
from workbench.strategies.ring import Region, plan_shares, plan_windows
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


def region(ts, file="f", base=0):
    return Region(file, ts, ts[0].offset, ts[-1].offset + ts[-1].nbytes, base)


def covered(windows, ts, files=None):
    """Every tensor byte → the pieces that hold it (each byte once); ``files``: each tensor's file."""
    got = {i: [] for i in range(len(ts))}
    for w in windows:
        for p in w.pieces:
            assert files is None or w.file == files[p.tensor]  # a window never crosses a file
            assert w.lo <= ts[p.tensor].offset + p.dst and ts[p.tensor].offset + p.dst + p.nbytes <= w.hi
            assert p.start == ts[p.tensor].offset + p.dst - w.lo
            got[p.tensor].append((p.dst, p.dst + p.nbytes))
    return {i: sorted(spans) for i, spans in got.items()}


def test_windows_hold_every_byte_once_and_split_tensors_at_their_edges():
    ts = tensors([3, (3 << 20) + 5, 0, 1, 5 << 20, 4097])
    windows = plan_windows(region(ts), 1 << 20)
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
    shares = plan_shares([region(ts)], 3, 1 << 20)
    assert len(shares) == 3
    starts = [s[0].lo for s in shares]
    assert all(x % PAGE_SIZE == 0 for x in starts) and starts == sorted(starts)
    for a, b in zip(shares, shares[1:]):
        assert a[-1].hi <= b[0].lo  # one contiguous stretch per reader
    windows = [w for s in shares for w in s]
    assert sum(w.nbytes for w in windows) == sum(t.nbytes for t in ts)
    assert all(len(spans) >= 1 for spans in covered(windows, ts).values())
    assert plan_shares([region(ts)], 64, 1 << 20)[-1]  # more readers than pages: no empty share


def two_files():
    a = tensors([(3 << 20) + 5, 7, 4097], first=1231)
    b = tensors([5, (2 << 20) + 333, 65537], first=77, gap=3)
    return a, b, [region(a, "a"), region(b, "b", base=len(a))]


def test_windows_of_a_set_never_cross_a_file_and_name_the_tensors_of_the_whole_load():
    a, b, regions = two_files()
    windows = [w for r in regions for w in plan_windows(r, 1 << 20)]
    assert [w.file for w in windows] == sorted(w.file for w in windows)  # model order: file a, then b
    ts, files = a + b, ["a"] * len(a) + ["b"] * len(b)
    for i, spans in covered(windows, ts, files).items():
        assert sum(e - s for s, e in spans) == ts[i].nbytes
    assert {p.tensor for w in windows if w.file == "b" for p in w.pieces} == {3, 4, 5}


def test_cold_shares_are_cut_over_the_whole_set_and_may_span_two_files():
    a, b, regions = two_files()
    shares = plan_shares(regions, 2, 1 << 20)
    assert len(shares) == 2
    assert [w.file for w in shares[0]][0] == "a" and [w.file for w in shares[1]][-1] == "b"
    assert {w.file for w in shares[1]} == {"a", "b"}  # the end of file a and the start of file b
    assert all(w.lo % PAGE_SIZE == 0 for s in shares for w in s)
    windows = [w for s in shares for w in s]
    ts, files = a + b, ["a"] * len(a) + ["b"] * len(b)
    for i, spans in covered(windows, ts, files).items():
        assert sum(e - s for s, e in spans) == ts[i].nbytes
    sizes = [sum(w.hi - w.lo for w in s) for s in shares]
    assert abs(sizes[0] - sizes[1]) <= 4 * PAGE_SIZE  # cut by bytes (by file it would be 3 MiB and 2 MiB)


def set_cache(path, state):
    try:
        prepare(path, state)
    except CacheStateError as exc:
        pytest.skip(f"cache state unreachable here: {exc}")


def load(index, device=None, **params):
    """A verified load; the staged path as asked (``direct=off``, ``fit=0``, the whole ring upfront)
    unless ``params`` say otherwise: these tests are about the ring's plans and its sized staging, which
    host memory would skip (and reader-made slots would make only as many as host copies keep busy)."""
    dev = device or HostDevice()
    result = get_strategy("ring")(**{"direct": "off", "fit": False, "provision": "upfront", **params}).load(index, dev)
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
    import workbench.strategies.ring_readers as ring

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
                {"provision": "lazy"}, {"mapping": "many"}):
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


SET = [{"sizes": [(2 << 20) + 333, 5, 4097], "first": 1231, "gap": 29, "tail": 17},
       {"sizes": [3, (1 << 20) + 77, 65537, 1], "first": 77, "gap": 3, "tail": 4096},
       {"sizes": [12289, (2 << 20) + 1], "first": 5000, "gap": 1}]


def set_cache_all(index, state):
    for f in index.files:
        set_cache(f.path, state)


def opens_by_thread(monkeypatch, index):
    """(thread name, file) → how many times that thread opened that model file."""
    import collections
    import os
    import threading

    real, seen = os.open, collections.Counter()
    paths = {f.path for f in index.files}

    def counting(path, flags, *args, **kw):
        if os.fspath(path) in paths:
            seen[threading.current_thread().name, os.fspath(path)] += 1
        return real(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", counting)
    return seen


def test_cold_a_set_one_reader_pool_shares_across_files_a_descriptor_per_file_per_reader(raw_set, monkeypatch):
    index = raw_set(SET)
    set_cache_all(index, "cold")
    seen = opens_by_thread(monkeypatch, index)
    dev = HostDevice()
    result = load(index, dev, cold_threads=2, cold_mib=1, threads=3, slot_mib=1)
    readers = {thread for thread, _ in seen if thread.startswith("ring-")}
    assert result.engaged_by("ring_readers").note.startswith("cold") and len(readers) == 2  # one pool
    assert all(n == 1 for (t, _), n in seen.items() if t in readers)  # one descriptor per file it reads
    per_reader = {r: {f for t, f in seen if t == r} for r in readers}
    assert any(len(files) >= 2 for files in per_reader.values())  # a share ran from one file into the next
    assert set().union(*per_reader.values()) == {f.path for f in index.files}
    assert len({p.buffer.handle.base.ctypes.data for p in result.placements}) == 1  # one allocation
    for feature in ("ring_readers", "pinned_staging", "one_allocation"):
        assert result.engaged_by(feature).note.endswith("over 3 files")


def test_warm_a_set_one_queue_of_windows_in_model_order(raw_set, monkeypatch):
    import workbench.strategies.ring_readers as ring

    index = raw_set(SET)
    order, real = [], ring.pread_into
    monkeypatch.setattr(ring, "pread_into", lambda fd, view, offset, path="": (order.append((path, offset)),
                                                                                real(fd, view, offset, path))[1])
    result = load(index, threads=1, slot_mib=1, gate=0.0, spare=0)  # one reader: the queue's order itself
    assert order == sorted(order, key=lambda o: ([f.path for f in index.files].index(o[0]), o[1]))
    assert {path for path, _ in order} == {f.path for f in index.files}
    assert result.engaged_by("ring_readers").note.startswith("warm")


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_evict_on_a_set_drops_every_file(cache, raw_set):
    from workbench.io.pagecache import resident_fraction

    index = raw_set(SET)
    set_cache_all(index, "warm")
    result = load(index, cold_threads=2, cold_mib=1, threads=3, slot_mib=1, evict=True,
                  gate=0.0 if cache == "warm" else 1.0)
    assert result.counters["dontneed_calls"] > 0
    for f in index.files:
        assert resident_fraction(f.path, f.data_start, f.data_end - f.data_start) < 0.05, f.name


def test_a_small_model_gets_a_ring_no_larger_than_it(raw_model):
    index = raw_model([(1 << 20) + 5, 3000])  # 1 MiB: the default ring is 20 x 8 MiB
    set_cache(index.path, "warm")
    result = load(index)
    fact = result.engaged_by("pinned_staging")
    assert fact.total == 1 and fact.note.startswith("1 x 1.00") and fact.state == "ON", str(fact)


ODD = dict(first=1231, gap=29, tail=17)  # tensors off page boundaries, strides no page multiple
SIZES = [1, 5, (3 << 20) + 333, 4097, 0, 12289, (2 << 20) + 77, 3]  # tiny, empty and large tensors


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_on_host_memory_the_ring_reads_straight_into_the_buffers(cache, raw_model):
    index = raw_model(SIZES, **ODD)
    set_cache(index.path, cache)
    dev = HostDevice()
    result = get_strategy("ring")(threads=3, cold_threads=2, slot_mib=1, cold_mib=1).load(index, dev)
    assert dev.locked.peak == {"pinned": 0, "registered": 0}  # no staging memory at all
    report = verify_placements(index, dev, result.placements)
    assert report.ok, f"{report.first_mismatch}: {report.detail}"
    fact = result.engaged_by("direct_to_device")
    assert fact.state == "ON" and "no staging hop" in fact.note, str(fact)
    assert result.engaged_by("pinned_staging") is None and result.path["copy_from"] == "none"
    assert result.phases["staging"] == 0 and result.counters["read_us"] > 0


def test_the_ring_fitted_to_the_load_with_slots_made_by_its_readers_lands_every_byte(raw_model):
    index = raw_model(SIZES, **ODD)
    set_cache(index.path, "warm")
    dev = DeferredCopyDevice()  # copies run only when a fence waits: a slot refilled too early shows
    result = load(index, dev, fit=True, provision="readers", threads=16, slot_mib=8, min_share_mib=2)
    readers = result.engaged_by("ring_readers")
    assert "fitted to the load" in readers.note and readers.done <= 3  # 5.2 MiB at >= 2 MiB a reader
    staging = result.engaged_by("pinned_staging")
    assert "made by the reader that first took it" in staging.note and staging.total <= readers.done + 4
    assert dev.in_flight == 0 and dev.usage().registered == 0 and dev.usage().pinned == 0
    assert {"provision_us", "first_read_us", "unstage_us"} <= set(result.counters)


def test_more_than_eight_staged_readers_only_at_one_per_crowd_mib_never_direct(raw_model, monkeypatch):
    import workbench.upload.staging_plan as plan

    monkeypatch.setattr(plan, "usable_cores", lambda: 16)  # the 2-core VM would cap it first
    index = raw_model([(6 << 20) + 5, 3000, (6 << 20) + 77], **ODD)  # 12.0x MiB: 13 readers at >= 1 MiB each
    set_cache(index.path, "warm")
    common = dict(threads=16, slot_mib=1, min_share_mib=1, crowd_mib=4, fit=True)
    staged = load(index, DeferredCopyDevice(), direct="off", **common)
    readers = staged.engaged_by("ring_readers")
    assert readers.done == 8 and "more than 8 readers only at one per 4 MiB" in readers.note, str(readers)
    direct = load(index, HostDevice(), direct="auto", **common)  # host memory: no driver queue to spare, every reader
    assert direct.engaged_by("ring_readers").done == 13 and direct.path["copy_from"] == "none"  # 12.0x MiB
    off = load(index, DeferredCopyDevice(), direct="off", **{**common, "crowd_mib": 0})
    assert off.engaged_by("ring_readers").done == 13


@pytest.mark.parametrize("mapping, says", [("one", "carved by the reader that first took it from one mapping made "
                                                   "with the ring"),
                                           ("each", "each mapped by the reader that first took it")])
def test_first_read_slots_carved_from_one_mapping_or_mapped_each_land_every_byte(raw_model, mapping, says):
    index = raw_model(SIZES, **ODD)
    set_cache(index.path, "warm")
    dev = DeferredCopyDevice()  # copies run only when a fence waits: a slot refilled too early shows
    result = load(index, dev, provision="first-read", mapping=mapping, threads=3, slot_mib=1, gate=0.0)
    staging = result.engaged_by("pinned_staging")
    assert says in staging.note and "faulted in by its first read, then registered" in staging.note, str(staging)
    assert dev.in_flight == 0 and dev.usage().registered == 0 and dev.usage().pinned == 0
    assert {"provision_us", "reader_provision_us", "register_us"} <= set(result.counters)


@pytest.mark.parametrize("direct", ["off", "auto"])
def test_each_readers_life_holds_its_timed_parts_and_the_spreads_of_their_starts_and_ends_are_counted(raw_model, direct):
    index = raw_model([(3 << 20) + 333, 5, (2 << 20) + 77, 4097], first=1231, gap=29, tail=17)
    set_cache(index.path, "warm")
    result = load(index, threads=3, slot_mib=1, direct=direct)
    c = result.counters
    timed = sum(c.get(k, 0) for k in ("wait_us", "read_us", "issue_us", "release_us"))
    assert c["lived_us"] >= timed  # every timed part lies inside a reader's life
    assert c["lived_us"] > 0 and c["lived_us"] >= c["read_us"]
    assert 0 <= c["end_spread_us"] <= result.phases["read"] * 1e6
    assert 0 <= c["start_spread_us"] <= result.phases["read"] * 1e6
    one = load(index, threads=1, slot_mib=1, direct=direct).counters
    assert one["end_spread_us"] == 0 and one["start_spread_us"] == 0  # one reader: nothing to wait for


def _slow_spawns(monkeypatch, pause: float, fail_at: int | None = None) -> None:
    """The loading thread pauses ``pause`` s after starting each reader (and raises starting the
    ``fail_at``-th): a reader's start is then long enough to see who waited for whom."""
    from workbench.strategies import toolkit

    real, calls = toolkit.ThreadGuard.spawn, []

    def spawn(self, target, *args):
        calls.append(1)
        if fail_at is not None and len(calls) == fail_at:
            raise RuntimeError("test: starting a reader failed")
        real(self, target, *args)
        time.sleep(pause)
    monkeypatch.setattr(toolkit.ThreadGuard, "spawn", spawn)


@pytest.mark.parametrize("direct", ["off", "auto"])
def test_start_together_holds_every_reader_until_all_are_started(raw_model, monkeypatch, direct):
    index = raw_model([(3 << 20) + 333, 5, (2 << 20) + 77, 4097], first=1231, gap=29, tail=17)
    set_cache(index.path, "warm")
    _slow_spawns(monkeypatch, 0.4)
    each = load(index, threads=3, slot_mib=1, direct=direct, start="each").counters  # exact bytes checked by load
    together = load(index, threads=3, slot_mib=1, direct=direct).counters  # the default
    # each: the third reader started two pauses (0.8 s) after the first, less only the first's own delay
    # in starting, which a loaded box stretches: 1.5 pauses bound it, above together's bound and a pause
    assert each["start_spread_us"] >= 600_000
    assert together["start_spread_us"] < 350_000  # together: released at once, after the last start (< a pause)


def test_start_together_a_failed_start_releases_the_started_readers(raw_model, monkeypatch):
    index = raw_model([(3 << 20) + 333, 5, (2 << 20) + 77, 4097])
    set_cache(index.path, "warm")
    _slow_spawns(monkeypatch, 0.0, fail_at=2)
    with pytest.raises(RuntimeError, match="starting a reader failed"):
        load(index, threads=3, slot_mib=1, direct="off")  # start=together, the default
    assert not [t for t in threading.enumerate() if t.name.startswith("ring-")]  # none left waiting


def test_start_must_be_each_or_together():
    with pytest.raises(Exception, match="start"):
        get_strategy("ring")(start="soon")
