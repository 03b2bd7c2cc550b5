"""``experts`` staged (the default): every blob and dense tensor through the ring's pipeline, planned by
upload/staged_read.py — windows, merged copies, shares, sized staging — and the reader itself."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from workbench.errors import FormatError
from workbench.io.pagecache import prepare
from workbench.measure.run.verify import verify_placements
from workbench.strategies import get_strategy
from workbench.upload import open_device
from workbench.upload.staged_read import (Extent, SharedQueue, StagedReader, plan_windows, split_shares)
from workbench.upload.staging import StagingRing

from device_fakes import DeferredCopyDevice

PAGE = 4096
MiB = 1 << 20


@pytest.fixture(autouse=True)
def _cache(isolated_cache):
    return isolated_cache


def load(index, device="host", **params):
    dev = open_device(device) if isinstance(device, str) else device
    result = get_strategy("experts")(**params).load(index, dev)
    report = verify_placements(index, dev, result.placements)
    assert report.ok and report.checked == report.total == len(index), (report.first_mismatch, report.detail)
    assert result.bytes_moved == index.nbytes
    return result


SMALL = {"slot_mib": 1, "cold_mib": 1, "readers": 3, "cold_readers": 2}


def planned_slots(staging) -> int:  # noqa: ANN001 - the pinned_staging fact
    """The ring's size as planned: a ring whose readers make their slots says ``N of M x`` when they
    made fewer than planned (a reader finding a free slot makes none)."""
    import re

    made = re.search(r"(\d+) of (\d+) x ", staging.note)
    return int(made.group(2)) if made else staging.total


@pytest.mark.parametrize("cache", ["warm", "cold"])
@pytest.mark.parametrize("fmt,layout", [("gguf", None), ("safetensors", "split"), ("safetensors", "stacked")])
def test_staged_lands_every_tensor_of_every_layout(tmp_path, fmt, layout, cache):
    from workbench.formats.synth import write_synthetic

    index = write_synthetic(tmp_path / f"m.{fmt}", format=fmt, layout="moe", size=3 << 20, experts=8,
                            alignment=32, expert_layout=layout)
    prepare(index.path, cache)
    result = load(index, direct="off", **SMALL)
    readers = result.engaged_by("staged_readers")
    slots = planned_slots(result.engaged_by("pinned_staging"))
    assert readers.note.startswith(cache) and readers.done == min(readers.total, slots), str(readers)
    assert result.engaged_by("staged_blobs").done == len(index.blobs)
    assert result.engaged_by("blob_zero_copy") is None and result.engaged_by("lanes") is None
    assert result.engaged_by("direct_to_device") is None
    assert result.path == {"readers": readers.done, "copy_from": "pinned", "direct": False}
    assert result.counters["windows"] >= 3 and result.counters["read_bytes"] >= index.nbytes


# Layouts a direct read must land exactly: odd GGUF alignments, experts of no whole number of pages
# (odd strides), blobs starting past a page boundary, a tiny model and a larger one, one file and a set.
LAYOUTS = [
    dict(format="gguf", size=3 << 20, alignment=32, expert_stride="odd"),
    dict(format="gguf", size=3 << 20, alignment=64, expert_remainder=1152),
    dict(format="gguf", size=3 << 20, alignment=32, expert_stride="odd", expert_remainder=1152),
    dict(format="gguf", size=96 << 10, alignment=32, expert_stride="odd", experts=4),  # tiny
    dict(format="gguf", size=40 << 20, alignment=4096, experts=16),  # larger: several windows per blob
    dict(format="safetensors", size=3 << 20, alignment=32, expert_stride="odd"),
    dict(format="safetensors", size=3 << 20, alignment=32, expert_layout="stacked", expert_remainder=1152),
    dict(format="gguf", size=3 << 20, alignment=32, expert_stride="odd", shards=3),
]


def _write(tmp_path, spec):
    from workbench.formats.synth import write_synthetic

    spec = {"experts": 8, **spec}
    name = "m" if spec.get("shards", 1) > 1 else f"m.{spec['format']}"
    return write_synthetic(tmp_path / name, layout="moe", seed=5, **spec)


@pytest.mark.parametrize("cache", ["warm", "cold"])
@pytest.mark.parametrize("spec", LAYOUTS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_on_host_every_byte_is_read_straight_into_place(tmp_path, spec, cache):
    index = _write(tmp_path, spec)
    prepare(index.path, cache)
    result = load(index, **SMALL)  # verified byte for byte against the file
    fact = result.engaged_by("direct_to_device")
    assert fact is not None and fact.state == "ON", result.engaged
    assert result.engaged_by("pinned_staging") is None and result.path["copy_from"] == "none"
    assert result.engaged_by("staged_readers").note.startswith(cache)
    assert result.counters["read_bytes"] == index.nbytes  # only the tensors' bytes: no padding, no page rounding


@pytest.mark.parametrize("spec", LAYOUTS[:4] + LAYOUTS[5:], ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_a_device_reached_by_copies_still_stages_every_byte(tmp_path, spec):
    index = _write(tmp_path, spec)
    prepare(index.path, "warm")
    result = load(index, DeferredCopyDevice(), **SMALL)  # copies run late: a fence missed shows as wrong bytes
    assert result.engaged_by("direct_to_device") is None
    assert result.engaged_by("pinned_staging").done > 0 and result.path["copy_from"] == "pinned"


def test_direct_readers_are_fitted_to_the_usable_cores(synth_model, monkeypatch):
    import workbench.upload.staging_plan as plan

    monkeypatch.setattr(plan, "usable_cores", lambda: 2)
    index = synth_model("gguf", "moe", alignment=64, size=40 << 20, experts=16)
    prepare(index.path, "warm")
    result = load(index)
    readers = result.engaged_by("staged_readers")
    assert readers.done == 2 and readers.total == 16 and readers.state == "PARTIAL"
    assert "fitted to the load: 2 of 16 readers (2 usable cores)" in readers.note, readers.note
    assert result.path["readers"] == 2


def test_a_short_read_is_finished_across_the_buffers_of_one_preadv(tmp_path, monkeypatch):
    from workbench.upload import direct_read

    data = bytes(range(256)) * 64
    path = tmp_path / "f"
    path.write_bytes(data)
    real = os.preadv
    monkeypatch.setattr(direct_read.os, "preadv", lambda fd, views, off: real(fd, [views[0][:100]], off))
    out = [bytearray(300), bytearray(50), bytearray(1000)]
    fd = os.open(path, os.O_RDONLY)
    try:
        views = [memoryview(b) for b in out]
        assert direct_read.preadv_full(fd, views, 7, str(path)) == 1350
        assert b"".join(out) == data[7:1357]
        with pytest.raises(FormatError, match="end of file"):
            direct_read.preadv_full(fd, [memoryview(bytearray(10))], len(data) - 5, str(path))
    finally:
        os.close(fd)


@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
def test_staged_loads_a_sharded_set_file_by_file(sharded_model, fmt):
    index = sharded_model(fmt, "moe")
    prepare(index.path, "warm")
    result = load(index, **SMALL)
    assert "over 3 files" in result.engaged_by("staged_readers").note


def test_a_blob_goes_up_in_one_copy_per_window(synth_model):
    index = synth_model("gguf", "moe", alignment=64)
    prepare(index.path, "warm")
    result = load(index, slot_mib=64, sized=False, direct="off")  # one window holds the model: one copy per tensor at most
    note = result.engaged_by("staged_blobs").note
    copies = int(note.split("; ")[1].split()[0])
    assert copies <= len(index.tensors)


def test_the_ring_is_sized_to_a_small_model(synth_model):
    index = synth_model("gguf", "moe", alignment=64)  # 3 MiB: the default 20 x 8 MiB ring would be 160 MiB
    prepare(index.path, "warm")
    result = load(index, direct="off")
    fact = result.engaged_by("pinned_staging")
    slots = fact.total
    assert "sized to the load" in fact.note and slots * 8 * MiB > index.nbytes
    size_mib = float(fact.note.split(" x ")[1].split(" MiB")[0])
    assert slots * size_mib * MiB < result.counters["read_bytes"] + size_mib * MiB  # < one slot over what it reads


def test_everything_comes_from_one_device_allocation_on_the_gpu_backend(synth_model):
    from test_upload_devices import open_fake

    index = synth_model("gguf", "moe", alignment=64)
    prepare(index.path, "warm")
    dev, fake = open_fake("cuda")
    try:
        result = load(index, dev, **SMALL)
        assert sum(1 for name, _ in fake.calls if name == "cudaMalloc") == 1
        assert result.engaged_by("pinned_staging").state == "ON"
        assert any(name == "cudaMemcpyAsync" for name, _ in fake.calls)
    finally:
        dev.close()


def test_the_eviction_policy_drops_what_was_read(synth_model):
    index = synth_model("gguf", "moe", alignment=64)
    prepare(index.path, "warm")
    result = load(index, device="host-uma", **SMALL)
    assert result.counters["dontneed_calls"] > 0


@pytest.mark.parametrize("mapping", ["each", "one"])
def test_fences_hold_on_a_device_whose_copies_run_late(synth_model, mapping):
    index = synth_model("safetensors", "moe")
    prepare(index.path, "warm")
    result = load(index, DeferredCopyDevice(), slot_mib=1, readers=3, spare=0, provision="first-read",
                  mapping=mapping)
    carved = "from one mapping made with the ring" in result.engaged_by("pinned_staging").note
    assert carved == (mapping == "one")  # experts passes its mapping to the ring


# --- the planner ----------------------------------------------------------------------------------


class Buf:  # a stand-in device buffer: plan_windows only compares identities
    pass


def test_windows_split_extents_at_their_edges_and_merge_continuations():
    a, b = Buf(), Buf()
    extents = [Extent("f", 100, 3000, a, 0), Extent("f", 3100, 5000, a, 3000),  # continues a: one piece
               Extent("f", 8100, 9000, b, 0)]
    windows = plan_windows(extents, 2 * PAGE)
    assert [(w.lo, w.hi) for w in windows] == [(0, 8192), (8192, 16384), (16384, 17100)]
    assert windows[0].pieces == ((100, 8000, a, 0), (8100, 92, b, 0))  # the two extents of a: one copy
    assert windows[0].nbytes + windows[1].nbytes + windows[2].nbytes == 17000
    assert sum(p.nbytes for w in windows for p in w.pieces if p.buffer is b) == 9000


def test_windows_skip_wide_gaps_and_never_cross_files_or_go_back():
    a = Buf()
    extents = [Extent("f", 0, 100, a, 0), Extent("f", 1 << 20, 100, a, 100), Extent("g", 200, 100, a, 200),
               Extent("g", 0, 100, a, 300), Extent("g", 500, 0, a, 400)]
    windows = plan_windows(extents, 4 * MiB)
    assert [(w.file, w.lo, w.hi) for w in windows] == [("f", 0, 100), ("f", 1 << 20, (1 << 20) + 100),
                                                      ("g", 0, 300), ("g", 0, 100)]
    assert sum(w.nbytes for w in windows) == 400  # the zero-byte extent needs no copy


def test_shares_are_contiguous_and_about_equal():
    a = Buf()
    windows = plan_windows([Extent("f", 0, 10 * MiB, a, 0)], MiB)
    shares = split_shares(windows, 3)
    assert [w for s in shares for w in s] == windows and len(shares) == 3
    assert max(len(s) for s in shares) - min(len(s) for s in shares) <= 1
    assert split_shares(windows[:2], 8) == [[windows[0]], [windows[1]]]


# --- the reader on its own (what a session's lanes use) --------------------------------------------


def _file(tmp_path, n, seed=1):
    data = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()
    path = tmp_path / f"f{seed}.bin"
    path.write_bytes(data)
    return str(path), data


def test_the_reader_lands_extents_from_several_files_with_several_threads(tmp_path):
    (p1, d1), (p2, d2) = _file(tmp_path, 3 * MiB + 5, 1), _file(tmp_path, MiB + 77, 2)
    dev = DeferredCopyDevice()
    dst = dev.alloc(len(d1) + len(d2))
    extents = [Extent(p1, 0, len(d1), dst, 0), Extent(p2, 0, len(d2), dst, len(d1))]
    windows = plan_windows(extents, MiB)
    ring = StagingRing(dev, 3, MiB)
    tally = StagedReader(dev, ring).read([SharedQueue(windows)] * 3)
    ring.close()
    assert tally.bytes == len(d1) + len(d2) and tally.windows == len(windows)
    assert dev.read_back(dst, 0, len(d1) + len(d2)) == d1 + d2


def test_read_window_on_the_callers_own_thread(tmp_path):
    path, data = _file(tmp_path, 50_000)
    dev = open_device("host")
    dst = dev.alloc(1000)
    ring = StagingRing(dev, 1, PAGE * 4)
    reader = StagedReader(dev, ring)
    fd = os.open(path, os.O_RDONLY)
    try:
        for w in plan_windows([Extent(path, 12_345, 1000, dst, 0)], PAGE * 4):
            assert reader.read_window(fd, w) is not None
    finally:
        os.close(fd)
    ring.close()
    assert dev.read_back(dst, 0, 1000) == data[12_345:13_345]
    stop = threading.Event()
    stop.set()
    busy = StagingRing(dev, 1, PAGE)
    held = busy.acquire()
    assert StagedReader(dev, busy).read_window(-1, plan_windows([Extent(path, 0, 10, dst, 0)], PAGE)[0], stop) is None
    busy.release(held)
    busy.close()


def test_a_failing_reader_stops_the_others_and_its_error_is_raised(tmp_path):
    path, data = _file(tmp_path, 2 * MiB)
    dev = open_device("host")
    dst = dev.alloc(4 * MiB)
    windows = plan_windows([Extent(path, 0, 4 * MiB, dst, 0)], 256 << 10)  # runs past the file's end
    ring = StagingRing(dev, 4, 256 << 10)
    before = threading.active_count()
    with pytest.raises(FormatError, match="truncated since it was indexed"):
        StagedReader(dev, ring).read([SharedQueue(windows)] * 3)
    ring.close()
    assert threading.active_count() == before


def test_a_small_model_gets_a_ring_its_size_unless_unsized(synth_model):
    index = synth_model("gguf", "moe", alignment=64, size=8 << 20)
    prepare(index.path, "warm")
    sized = load(index, readers=4, slot_mib=2, direct="off", provision="upfront")  # every planned slot made
    readers, slots = sized.engaged_by("staged_readers"), sized.engaged_by("pinned_staging")
    assert "4 windows of 2 MiB" in readers.note and readers.done == slots.total == 4
    assert "sized to the load: 4 slots of 2 MiB, not 8 of 2" in slots.note
    unsized = load(index, readers=4, slot_mib=2, sized=False, direct="off", provision="upfront")
    assert unsized.engaged_by("pinned_staging").total == 8 and "sized" not in unsized.engaged_by("pinned_staging").note
