"""The behaviours the seeds measured, reproduced and measured with mincore rather than assumed."""
from __future__ import annotations

import errno
import os
import threading

import numpy as np
import pytest

from workbench.errors import CacheStateError, ParamError, StrategyUnavailable
from workbench.io.pagecache import filesystem_type, prepare, resident_fraction
from workbench.strategies import get_strategy
from workbench.upload import open_device
from workbench.upload.host import HostDevice
from workbench.measure.run.verify import verify_placements

from device_fakes import DeferredCopyDevice


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


@pytest.fixture
def model(synth_model):
    index = synth_model("gguf", "moe", size=4 << 20)
    return index


def data_resident(index) -> float:
    start, end = index.data_range
    return resident_fraction(index.path, start, end - start)


def set_cache(path: str, state: str) -> None:
    try:
        prepare(path, state)
    except CacheStateError as exc:
        pytest.skip(f"cache state unreachable here: {exc}")


def load(name, index, device="host", **params):
    dev = open_device(device)
    result = get_strategy(name)(**params).load(index, dev)
    assert verify_placements(index, dev, result.placements).ok
    return result


@pytest.mark.parametrize("name", ["pread", "lanes", "willneed"])
def test_evict_leaves_the_file_almost_not_resident(name, model):
    set_cache(model.path, "warm")
    result = load(name, model, evict=True)
    assert result.evict and result.evict_source == "param"
    assert result.counters["dontneed_calls"] > 0
    assert data_resident(model) < 0.05


@pytest.mark.parametrize("name", ["pread", "lanes"])
def test_keep_resident_leaves_the_file_resident(name, model):
    # the seeds' self-evicting parallel reader: a keep-resident load must not drop its own pages
    set_cache(model.path, "cold")
    result = load(name, model, evict=False, **({"threads": 4, "chunk_mib": 1} if name == "lanes" else {}))
    assert not result.evict and "dontneed_calls" not in result.counters
    assert data_resident(model) > 0.95


def test_lanes_follow_the_device_policy(model):
    set_cache(model.path, "warm")
    assert not load("lanes", model, "host").evict
    assert data_resident(model) > 0.95
    result = load("lanes", model, "host-uma", chunk_mib=1)
    assert result.evict and result.evict_source == "device-uma"
    assert data_resident(model) < 0.05


def test_environment_overrides_the_device_policy(model, monkeypatch):
    monkeypatch.setenv("WORKBENCH_PAGE_EVICTION", "1")
    set_cache(model.path, "warm")
    result = load("pread", model, "host")
    assert (result.evict, result.evict_source) == (True, "env")
    assert data_resident(model) < 0.05
    assert load("pread", model, "host", evict=False).evict_source == "param"


def test_warmer_skips_on_a_warm_file(model):
    set_cache(model.path, "warm")
    result = load("warmer", model)
    fact = result.engaged_by("warmer")
    assert fact.state == "INERT" and fact.done == 0
    assert "skipped" in fact.note and "% resident" in fact.note
    assert str(fact).startswith("warmer: 0/4 threads — INERT (skipped: 100% resident")
    assert result.counters["residency_probes"] == 1  # once per load, never per tensor


def test_warmer_runs_on_a_cold_file(model):
    set_cache(model.path, "cold")
    result = load("warmer", model, threads=2, chunk_mib=1)
    fact = result.engaged_by("warmer")
    assert fact.state == "ON" and fact.done == 2
    assert result.counters["residency_probes"] == 1
    assert result.counters.get("warm_chunks", 0) >= 0  # chunks still unread when the loader finished are skipped
    assert data_resident(model) > 0.95


def test_warmer_is_inert_under_eviction(model):
    set_cache(model.path, "cold")
    fact = load("warmer", model, "host-uma").engaged_by("warmer")
    assert fact.state == "INERT" and "eviction" in fact.note


class FailingDevice(HostDevice):
    """A host device whose n-th copy fails, to make a load raise halfway."""

    name = "host"

    def __init__(self, fail_at: int):
        super().__init__()
        self.fail_at, self.copies = fail_at, 0

    def copy_h2d(self, dst, dst_offset, src, *, asynchronous=False):
        self.copies += 1
        if self.copies == self.fail_at:
            raise RuntimeError("injected upload failure")
        super().copy_h2d(dst, dst_offset, src, asynchronous=asynchronous)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("name,params", [
    ("warmer", {"threads": 3, "chunk_mib": 1}), ("lanes", {"threads": 3, "chunk_mib": 1}),
    ("odirect", {"threads": 3, "bounce_mib": 1}), ("mmap", {}), ("populate", {}), ("pread", {}),
    ("pread", {"upload": "pinned", "staging_mib": 1}), ("pread", {"upload": "registered"}),
])
def test_a_raising_load_cleans_up(name, params, model):
    set_cache(model.path, "cold")
    threads_before, fds_before = set(threading.enumerate()), open_fds()
    device = FailingDevice(fail_at=5)
    with pytest.raises(RuntimeError, match="injected"):
        get_strategy(name)(**params).load(model, device)
    assert set(threading.enumerate()) == threads_before
    assert open_fds() == fds_before
    assert device._arrays == {}  # a failed load frees its device buffers


def test_warmer_threads_are_joined_after_a_failure(model, monkeypatch):
    from workbench.strategies import toolkit

    set_cache(model.path, "cold")
    spawned: list[threading.Thread] = []
    real_spawn = toolkit.ThreadGuard.spawn

    def spy(self, target, *args):
        real_spawn(self, target, *args)
        spawned.append(self.threads[-1])

    monkeypatch.setattr(toolkit.ThreadGuard, "spawn", spy)
    with pytest.raises(RuntimeError):
        get_strategy("warmer")(threads=3, chunk_mib=1).load(model, FailingDevice(fail_at=3))
    assert len(spawned) == 3  # the warmer did run, so the guard had threads to stop
    assert not any(t.is_alive() for t in spawned)


def test_mmap_zero_copy_on_a_discrete_policy(model):
    for state in ("cold", "warm"):
        set_cache(model.path, state)
        fact = load("mmap", model).engaged_by("zero_copy")
        assert (fact.done, fact.total, fact.state) == (len(model), len(model), "ON")


@pytest.mark.parametrize("device,params", [("host-uma", {}), ("host", {"evict": True})])
def test_mmap_falls_back_under_eviction(device, params, model):
    set_cache(model.path, "warm")
    result = load("mmap", model, device, **params)
    fact = result.engaged_by("zero_copy")
    assert (fact.done, fact.total, fact.state) == (0, len(model), "INERT")
    assert "eviction" in fact.note
    assert data_resident(model) < 0.05


def test_mmap_gate_reproduces_the_ungated_cut_and_its_fix(model):
    set_cache(model.path, "cold")
    assert load("mmap", model, gate=None).engaged_by("zero_copy").state == "ON"  # faults off disk
    set_cache(model.path, "cold")
    gated = load("mmap", model, gate=0.9).engaged_by("zero_copy")
    assert gated.state == "INERT" and "gate" in gated.note
    set_cache(model.path, "warm")
    assert load("mmap", model, gate=0.9).engaged_by("zero_copy").state == "ON"


def test_populate_prefaults_the_data_region(model):
    set_cache(model.path, "cold")
    result = load("populate", model)
    assert result.engaged_by("populate_read").state == "ON"
    assert result.engaged_by("zero_copy").state == "ON"
    assert result.phases["prefetch"] > 0


def test_populate_falls_back_when_the_kernel_refuses(model, monkeypatch):
    import workbench.strategies.populate as populate

    monkeypatch.setattr(populate, "MADV_POPULATE_READ", 0x7FFF)  # no such advice: EINVAL
    set_cache(model.path, "cold")
    result = load("populate", model)
    assert result.engaged_by("populate_read").state == "INERT"
    assert "EINVAL" in result.engaged_by("populate_read").note
    assert result.engaged_by("willneed_touch").state == "ON"
    assert any("MADV_WILLNEED" in n for n in result.notes)
    assert data_resident(model) > 0.95  # touching every page faulted it in


def test_odirect_counts_the_shift_copy(synth_model):
    index = synth_model("gguf", "moe", alignment=32)
    assert index.page_aligned < len(index)
    result = load("odirect", index)
    assert result.engaged_by("odirect").state == "ON"
    assert result.counters["shift_copy_bytes"] > 0
    assert any("shift copy" in n for n in result.notes)


def test_odirect_needs_no_shift_on_page_aligned_offsets(synth_model):
    index = synth_model("gguf", "dense", alignment=4096)
    assert index.page_aligned == len(index)
    result = load("odirect", index, threads=2)
    assert result.engaged_by("odirect").state == "ON"
    assert result.counters.get("shift_copy_bytes", 0) == 0


def test_odirect_reads_without_warming_the_cache(model):
    set_cache(model.path, "cold")
    load("odirect", model)
    assert data_resident(model) < 0.05


def test_odirect_falls_back_when_refused(model, monkeypatch):
    import workbench.io.direct as direct

    def refuse(path):
        raise OSError(errno.EINVAL, "Invalid argument", str(path))

    monkeypatch.setattr(direct, "open_direct", refuse)
    result = load("odirect", model)
    fact = result.engaged_by("odirect")
    assert fact.state == "INERT" and fact.done == 0
    assert f"EINVAL on {filesystem_type(model.path)}" in str(fact)
    assert result.counters["shift_copy_bytes"] == 0  # recorded, and nothing was shifted


def test_odirect_on_tmpfs(tmp_path):
    from workbench.formats.synth import write_synthetic
    from workbench.io.direct import open_direct

    if not os.path.isdir("/dev/shm") or filesystem_type("/dev/shm") != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    path = f"/dev/shm/wb-odirect-{os.getpid()}.gguf"
    try:
        index = write_synthetic(path, format="gguf", layout="dense", size=1 << 20)
        try:
            os.close(open_direct(path))
            refused = False
        except OSError:
            refused = True
        fact = load("odirect", index).engaged_by("odirect")
        if not refused:
            pytest.skip("this kernel's tmpfs accepts O_DIRECT (Linux >= 6.6); fallback covered by monkeypatch")
        assert fact.state == "INERT" and "tmpfs" in fact.note
    finally:
        if os.path.exists(path):
            os.unlink(path)


def test_a_corrupted_device_copy_is_caught(model):
    device = open_device("host")
    result = get_strategy("pread")().load(model, device)
    victim = result.placements[len(result.placements) // 2]
    victim.buffer.handle[victim.nbytes // 2] ^= 0x01
    report = verify_placements(model, device, result.placements)
    assert not report.ok and report.mismatches == 1
    assert report.first_mismatch == victim.tensor and "xxh3_64" in report.detail
    with pytest.raises(Exception, match=victim.tensor):
        report.raise_for_mismatch(model.path)


def test_a_missing_placement_is_a_failure(model):
    device = open_device("host")
    result = get_strategy("mmap")().load(model, device)
    dropped = result.placements[0]
    report = verify_placements(model, device, result.placements[1:])
    assert not report.ok and report.first_mismatch == dropped.tensor
    assert "no placement" in report.detail and report.checked == len(model) - 1


def test_reference_checksums_are_cached_and_leave_the_cache_alone(synth_model, monkeypatch):
    import workbench.io.untouched as untouched
    from workbench.measure.run.verify import reference_checksums

    index = synth_model("safetensors", "dense", size=1 << 20)
    set_cache(index.path, "cold")
    first = reference_checksums(index)
    assert len(first) == len(index) and data_resident(index) < 0.05

    def boom(*a, **kw):
        raise AssertionError("reference checksums recomputed")

    monkeypatch.setattr(untouched, "range_checksums", boom)
    assert reference_checksums(index) == first


def test_params_parse_from_strings_and_are_checked():
    cls = get_strategy("warmer")
    s = cls.from_strings({"threads": "2", "evict": "off", "gate": "0.5", "chunk_mib": "8"})
    assert (s.params.threads, s.params.evict, s.params.gate, s.params.chunk_mib) == (2, False, 0.5, 8)
    with pytest.raises(ParamError, match="threads"):
        cls.from_strings({"threads": "0"})
    with pytest.raises(ParamError, match="gate"):
        get_strategy("mmap").from_strings({"gate": "1.5"})
    assert get_strategy("mmap").from_strings({"gate": "none"}).params.gate is None


def test_an_unavailable_strategy_refuses_to_load(model, monkeypatch):
    from workbench.registry import Availability

    cls = get_strategy("pread")
    monkeypatch.setattr(cls, "available", classmethod(lambda c: Availability(False, "not here")))
    with pytest.raises(StrategyUnavailable, match="not here"):
        cls().load(model, open_device("host"))


@pytest.mark.parametrize("upload", ["pageable", "registered", "pinned"])
@pytest.mark.parametrize("device", ["host", "host-uma"])
def test_pread_upload_modes_are_byte_exact(upload, device, raw_model):
    index = raw_model([7, (1 << 20) + 5, 3 << 20, 4096, 1], first=33, gap=3)
    result = load("pread", index, device, upload=upload, staging_mib=1)
    assert result.bytes_moved == index.nbytes
    if upload == "pinned":
        fact = result.engaged_by("pinned_staging")
        assert fact.total == 2 and "pieces" in fact.note
        assert "heap_copy" not in {e.feature for e in result.engaged}
    if device == "host-uma":
        assert data_resident(index) < 0.05


def test_pread_pinned_fences_each_staging_buffer(model):
    events = []

    class Recorder(HostDevice):
        def record_event(self):
            mark = sum(kind == "record" for kind, _ in events) + 1
            events.append(("record", mark))
            return mark

        def wait_event(self, event):
            events.append(("wait", event))

    dev = Recorder()
    result = get_strategy("pread")(upload="pinned", staging_mib=1).load(model, dev)
    assert verify_placements(model, dev, result.placements).ok
    records = [e for kind, e in events if kind == "record"]
    assert sorted(e for kind, e in events if kind == "wait") == records  # every fence waited on once
    at = {event: i for i, event in enumerate(events)}
    # two slots alternate: piece k's fence is waited on before piece k + 2 refills its slot
    assert len(records) > 2 and all(at[("wait", k)] < at[("record", k + 2)] for k in records[:-2])


@pytest.mark.parametrize("name, params", [
    ("lanes", {"upload": "pinned", "threads": 3, "chunk_mib": 1}),
    ("pread", {"upload": "pinned", "staging_mib": 1}),
    ("mmap", {"register": True}),
    ("ring", {"threads": 3, "slot_mib": 1, "spare": 0, "gate": 0.0}),  # warm plan: shared windows
    ("ring", {"cold_threads": 2, "cold_mib": 1, "spare": 0, "gate": 1.0}),  # cold plan: shares
])
def test_async_copies_are_waited_on_before_their_source_is_reused(name, params, raw_model):
    index = raw_model([(3 << 20) + 333, 5, (2 << 20) + 77, 4097], first=1231, gap=29, tail=17)
    set_cache(index.path, "cold")
    dev = DeferredCopyDevice()
    result = get_strategy(name)(**params).load(index, dev)
    report = verify_placements(index, dev, result.placements)
    assert report.ok, f"{name}: {report.first_mismatch}: {report.detail}"
    if name == "ring":
        assert result.engaged_by("ring_readers").note.startswith("warm" if params["gate"] == 0 else "cold")


@pytest.mark.parametrize("name, params", [
    ("lanes", {"upload": "pinned", "threads": 3, "chunk_mib": 1}),
    ("pread", {"upload": "pinned", "staging_mib": 1}),
    ("ring", {"threads": 3, "slot_mib": 1, "spare": 0, "gate": 0.0}),
])
def test_the_deferred_device_catches_a_missing_fence_wait(name, params, raw_model, monkeypatch):
    # The test above can fail: with the staging ring's fence wait removed, a slot is refilled while
    # its copy is still queued, and the bytes that land are the next piece's.
    index = raw_model([(3 << 20) + 333, 5, (2 << 20) + 77, 4097], first=1231, gap=29, tail=17)
    dev = DeferredCopyDevice()
    monkeypatch.setattr(dev, "wait_fence", lambda fence: None)
    result = get_strategy(name)(**params).load(index, dev)
    assert not verify_placements(index, dev, result.placements).ok
